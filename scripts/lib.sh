# Shared settings for every lonnymq script: where the throwaway cluster lives and how to reach it.
# Sourced, never run. Everything stays inside the checkout so a clone is self-contained.

LONNYMQ_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export LONNYMQ_ROOT

# PostgreSQL 15 binaries; /usr/local/bin may hold other versions, so name the directory.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
export PG_CONFIG=${PG_CONFIG:-$PGBIN/pg_config}

# The local cluster: data and socket inside the checkout, an uncommon port to avoid clashes.
export LONNYMQ_PGDATA=${LONNYMQ_PGDATA:-$LONNYMQ_ROOT/.pgdata}
export PGHOST=${PGHOST:-127.0.0.1}
export PGPORT=${PGPORT:-54329}
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
