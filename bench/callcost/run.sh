#!/bin/sh
# Instructions per call of lonnymq's API shell and the peers' calls, counted
# by callgrind in one single-user backend (no perf counters needed).
#   PGBIN=... PGPORT=... bench/callcost/run.sh [WORKDIR]
# (CALLCOST_N / CALLCOST_W: calls measured / warmed per case, default
# 200 / 20. For a server without psql, e.g. test/servers' PostgreSQL 18,
# PSQL names 15's. Compare runs: callcost.py report WORKDIR1 WORKDIR2.)
# Runs as the postgres user when started as root. Peers load from
# LONNYMQ_PEERS_DIR (default ../shared/peers) when present.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
peers=${LONNYMQ_PEERS_DIR:-$here/../../../shared/peers}
work=${1:-/tmp/callcost}
: "${PGBIN:?set PGBIN}" "${PGPORT:?set PGPORT}"
as() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
rm -rf "$work"; mkdir -p "$work"; chmod 777 "$work"
as "$PGBIN/initdb" -D "$work/data" -U postgres -A trust >/dev/null
as "$PGBIN/pg_ctl" -D "$work/data" -o "-p $PGPORT -k $work -c fsync=off -c autovacuum=off" -w -l "$work/log" start >/dev/null
sql() { as "${PSQL:-$PGBIN/psql}" -h "$work" -p "$PGPORT" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
sql -c 'CREATE DATABASE cc'
sql -d cc -f "$here/setup.sql" >/dev/null
has_peers=false
if [ -f "$peers/pgmq.sql" ] && [ -f "$peers/lonnymq-original.sql" ]; then
    has_peers=true
    sql -d cc -c 'CREATE SCHEMA pgmq' -f "$peers/pgmq.sql" -c "SELECT pgmq.create('bench')" >/dev/null
    sql -d cc -c 'CREATE SCHEMA lonny_up' -f "$peers/lonnymq-original.sql" \
        -c "SELECT lonny_up.channel_set('c1', 2147483647, 2147483647, 0)" >/dev/null
fi
# The first id each system will hand out, and the ids the statements need.
sql -d cc -At -c "SELECT json_build_object(
    'lonnymq', (SELECT last_value + 1 FROM lonnymq.message_id_seq),
    'q_id', (SELECT id FROM lonnymq.queue WHERE name = 'q'),
    'c1_id', (SELECT c.id FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id
              WHERE q.name = 'q' AND c.name = 'c1'),
    'c1_lock', (SELECT c.lock_key FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id
                WHERE q.name = 'q' AND c.name = 'c1'),
    'pgmq', CASE WHEN $has_peers THEN 1 END,
    'orig', CASE WHEN $has_peers THEN 1 END)" > "$work/ids.json"
as "$PGBIN/pg_ctl" -D "$work/data" -w stop >/dev/null
python3 "$here/callcost.py" gen "$work/ids.json" "$work/labels.json" > "$work/script.sql"
cd "$work"
as valgrind --tool=callgrind --dump-before=pg_postmaster_start_time \
    --callgrind-out-file="$work/callgrind.out.%p" \
    "$PGBIN/postgres" --single -D "$work/data" -c fsync=off cc < "$work/script.sql" > "$work/out.txt" 2> "$work/valgrind.txt"
python3 "$here/callcost.py" report "$work"
