#!/usr/bin/env bash
# Workload 7's cause, statement by statement: what each statement of a dequeue and a complete
# reads (shared buffers per call, pg_stat_statements with nested statements tracked) over
# 10 s of two consumers, then what each statement of a create reads over 10 s of one
# producer (since session 20), first after 90 s of traffic with nothing held, then after
# 90 s of traffic while another session holds a REPEATABLE READ snapshot (as workload 7
# does). Each measurement starts with 5,000 messages more on the 100 channels, so the
# consumers claim.
#
#   bench/cluster start
#   bench/prototypes/held_snapshot_walks.sh > bench/results/NAME.txt      # ~4 minutes
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/lib.sh"
port=${BENCH_PGPORT:-25439}
psql=("$PGBIN/psql" -h 127.0.0.1 -p "$port" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -M prepared
         -D nchannels=100 -D payload='\x00' -D batch=1)
scripts=$here/../pgbench
db=held_walks

"${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
    -c "CREATE DATABASE $db"
"${psql[@]}" -d $db -c "CREATE EXTENSION pg_stat_statements" -c "CREATE EXTENSION lonnymq"

more() {
    "${psql[@]}" -d $db \
        -c "SELECT count(lonnymq.message_create('bench', 'c' || (i % 100 + 1), '\x00'::bytea)) FROM generate_series(1, $1) i" \
        >/dev/null
}
# Workload 7's kind of traffic: producers and consumers at a rate the clean system keeps up with.
traffic() {
    "${pgbench[@]}" -c 4 -j 2 -T 90 -R 800 -f "$scripts/lonnymq_consume.sql" \
        -f "$scripts/lonnymq_create.sql" "$db" >/dev/null
}
# 10 s of CLIENTS running SCRIPT, then what each statement read per call.
#   statements CLIENTS SCRIPT
statements() {
    "${psql[@]}" -d $db -c "SELECT pg_stat_statements_reset()" >/dev/null
    echo "$2, $1 client(s): $(PGOPTIONS="-c pg_stat_statements.track=all" "${pgbench[@]}" -c "$1" -j "$1" \
        -T 10 -f "$scripts/$2" "$db" | grep "number of transactions actually processed")"
    echo "calls | buffers per call | ms per call | statement"
    "${psql[@]}" -d $db -F ' | ' -c "
        SELECT calls, round((shared_blks_hit + shared_blks_read)::numeric / calls, 1),
               round(mean_exec_time::numeric, 3), regexp_replace(left(query, 100), '\s+', ' ', 'g')
        FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db') AND calls >= 20
          AND query !~ 'pg_stat_statements_reset'
        ORDER BY shared_blks_hit + shared_blks_read DESC LIMIT 12"
}
measure() {
    echo "dead versions: $("${psql[@]}" -d $db -c "SELECT string_agg(relname || ' ' || n_dead_tup, ', ' ORDER BY relname) FROM pg_stat_user_tables WHERE schemaname = 'lonnymq' AND relname IN ('channel', 'message', 'channel_hint')")"
    more 5000
    statements 2 lonnymq_consume.sql
    statements 1 lonnymq_create.sql
    # The probe's two walks on their own: due hints, and expired locks (lonnymq_consume.sql
    # locks for 30 s, so every message claimed more than 30 s ago and completed since is a
    # dead entry at the front of message_locked_idx).
    echo "the probe's parts (buffers):"
    for part in \
        "hints: SELECT h.dequeue_ms FROM lonnymq.channel_hint h WHERE h.queue_id = 1 AND h.dequeue_ms <= lonnymq._now_ms() ORDER BY h.dequeue_ms LIMIT 1" \
        "expired locks: SELECT m.locked_until_ms FROM lonnymq.message m WHERE m.queue_id = 1 AND m.locked_until_ms <= lonnymq._now_ms() ORDER BY m.locked_until_ms LIMIT 1"; do
        echo "  ${part%%:*}: $("${psql[@]}" -d $db -c "SET enable_seqscan = off" \
            -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) ${part#*: }" \
            | grep -m1 'Buffers' | sed 's/^ *//')"
    done
}

more 2000
echo "== nothing held: 90 s of traffic, then 10 s of two consumers"
traffic
measure
echo
echo "== a snapshot held from before 90 s of traffic, then 10 s of two consumers"
"${psql[@]}" -d $db -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM lonnymq.queue" \
    -c "SELECT pg_sleep(160)" -c "COMMIT" >/dev/null &
holder=$!
sleep 2
traffic
measure
wait "$holder"
"${psql[@]}" -d postgres -c "DROP DATABASE $db"
