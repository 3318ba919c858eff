# Shared settings for every lonnymq script: where the throwaway cluster lives and how to reach it.
# Sourced, never run. Everything stays inside the checkout so a clone is self-contained.

LONNYMQ_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export LONNYMQ_ROOT

# PostgreSQL 15 binaries from Debian; /usr/local/bin may hold other versions, so name the
# directory. They provide the clients every script uses (psql, pg_regress, isolationtester,
# pg_prove's psql), whatever the server's version: the protocol and the SQL they send are
# the same from 15 to 18.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
export PGBIN
export PG_CONFIG=${PG_CONFIG:-$PGBIN/pg_config}
export PATH="$PGBIN:$PATH"

# The server's major version (the version matrix): 15 is Debian's, with pg_cron; 16, 17 and
# 18 are server binaries from the npm packages pinned in test/servers, which
# scripts/install-deps installs and which ship no pg_cron, pg_config or clients.
export LONNYMQ_PG=${LONNYMQ_PG:-15}
LONNYMQ_PG_VERSIONS="15 16 17 18"
case " $LONNYMQ_PG_VERSIONS " in
    *" $LONNYMQ_PG "*) ;;
    *) echo "LONNYMQ_PG=$LONNYMQ_PG: supported versions are $LONNYMQ_PG_VERSIONS" >&2; exit 2 ;;
esac

# The directory of the server's initdb, pg_ctl and postgres.
server_bin() {
    if [ "$LONNYMQ_PG" = 15 ]; then
        echo "$PGBIN"
    else
        echo "$LONNYMQ_ROOT/test/servers/node_modules/pg$LONNYMQ_PG/native/bin"
    fi
}

# Where the server looks for extension control and script files. The npm servers
# are relocatable: their share directory sits beside bin/.
extension_dir() {
    if [ "$LONNYMQ_PG" = 15 ]; then
        echo "$("$PG_CONFIG" --sharedir)/extension"
    else
        echo "$(dirname "$(server_bin)")/share/postgresql/extension"
    fi
}

# pg_cron is preloaded and tested only where it is installed (Debian's 15).
have_pg_cron() { [ -f "$(extension_dir)/pg_cron.control" ]; }

# The local cluster: data inside the checkout, on an uncommon port below Linux's default
# ephemeral range (32768-60999), where no kernel-chosen client port lands (scripts/cluster).
# A LONNYMQ_PGDATA that this file exported as its default, inherited from a shell that
# sourced another checkout's copy (or another version's), is not the caller's choice: the
# default is worked out again here, so a clone never runs on another tree's cluster.
[ "${LONNYMQ_PGDATA:-}" = "${LONNYMQ_PGDATA_DEFAULT:-}" ] && LONNYMQ_PGDATA=
if [ "$LONNYMQ_PG" = 15 ]; then
    LONNYMQ_PGDATA_DEFAULT=$LONNYMQ_ROOT/.pgdata
else
    LONNYMQ_PGDATA_DEFAULT=$LONNYMQ_ROOT/.pgdata-$LONNYMQ_PG
fi
export LONNYMQ_PGDATA_DEFAULT LONNYMQ_PGDATA=${LONNYMQ_PGDATA:-$LONNYMQ_PGDATA_DEFAULT}
export PGHOST=${PGHOST:-127.0.0.1}
export PGPORT=${PGPORT:-25429}
export PGUSER=${PGUSER:-postgres}
export PGDATABASE=${PGDATABASE:-postgres}
LOCAL_DATABASE_URL="postgresql://$PGUSER@$PGHOST:$PGPORT/$PGDATABASE"
export LOCAL_DATABASE_URL

# PostgreSQL refuses to run as root: as root, run server commands as the postgres user.
as_cluster_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

log() { printf '\n==> %s\n' "$*"; }
