#!/usr/bin/env bash
# One client's message_create_batch against PGMQ's send_batch, statement by
# statement (bench/README.md, "A/B tools").
#   bench/cluster start && bench/create_profile.sh [SECONDS]
# In database create_profile (made afresh): lonnymq, 100 channels whose heads
# are set (a backlog, one dequeue run, so no hints are written), and PGMQ from
# LONNYMQ_PEERS_DIR (default ../shared/peers). Two interleaved pairs of
# SECONDS (default 5) of batches of 100, one client each; then the statements
# with nested ones tracked (pg_stat_statements.track = all for these sessions
# only), mean microseconds and buffers per call.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
export PGHOST=127.0.0.1 PGPORT=${BENCH_PGPORT:-25439} PGUSER=postgres
. "$BENCH_DIR/../scripts/lib.sh"
seconds=${1:-5}
peers=${LONNYMQ_PEERS_DIR:-../shared/peers}
case $peers in /*) ;; *) peers="$LONNYMQ_ROOT/$peers" ;; esac
[ -f "$peers/pgmq.sql" ] || { echo "pgmq.sql not found in $peers (LONNYMQ_PEERS_DIR)" >&2; exit 1; }
db=create_profile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

psql -XqA -d postgres -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -XqA -d $db -v ON_ERROR_STOP=1 <<SQL >/dev/null
CREATE EXTENSION lonnymq;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
\i $peers/pgmq.sql
SELECT pgmq.create('bench');
\i $BENCH_DIR/create_backlog.sql
SQL
cp "$BENCH_DIR/create_batch.sql" "$work/lonnymq.sql"
cat > "$work/pgmq.sql" <<'SQL'
SELECT count(*) FROM pgmq.send_batch('bench', array_fill('{"x":1}'::jsonb, ARRAY[100]));
SQL
psql -XqA -d $db -c "SELECT pg_stat_statements_reset()" >/dev/null
for system in lonnymq pgmq lonnymq pgmq; do
    PGOPTIONS='-c pg_stat_statements.track=all' \
        "$PGBIN/pgbench" -n -M prepared -T "$seconds" -c 1 -f "$work/$system.sql" $db 2>/dev/null \
        | sed -n "s/^tps = \([0-9.]*\).*/$system: \1 batches of 100 per second/p"
done
psql -X -d $db -c "
    SELECT calls, round((total_exec_time / calls * 1000)::numeric, 1) AS us_per_call,
           round(((shared_blks_hit + shared_blks_read)::numeric / calls), 1) AS buffers,
           left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS statement
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db') AND calls > 100
    ORDER BY total_exec_time DESC LIMIT 15"
psql -XqA -d postgres -c "DROP DATABASE $db"
