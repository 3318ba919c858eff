#!/usr/bin/env bash
# Model B prototype (issue 37): statements per lifecycle (create, dequeue, complete) of every
# system, one client, the queue near empty: pg_stat_statements with track = all counts the
# statements the client sent and those inside the functions (PL/pgSQL queries), over 300
# lifecycles on 100 channels, in scratch databases s_<system> of the cluster at PGHOST/PGPORT.
# Needs PGBIN; run modelb_bench.py --setup first (it writes nothing here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
peers=${LONNYMQ_PEERS_DIR:-$root/../shared/peers}
n=300
for sys in floor pgmq lonnymq_original lonnymq112 lonnymq; do
    db=s_$sys
    "$PGBIN/psql" -XAtq -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    "$PGBIN/psql" -XAtq -d $db -c "CREATE EXTENSION pg_stat_statements"
    case $sys in
        floor) "$PGBIN/psql" -XAtq -d $db -f "$root/bench/floor.sql"; prefix=floor ;;
        pgmq) "$PGBIN/psql" -XAtq -d $db -c "CREATE SCHEMA pgmq" -f "$peers/pgmq.sql" -c "SELECT pgmq.create('bench')" >/dev/null; prefix=pgmq ;;
        lonnymq_original) "$PGBIN/psql" -XAtq -d $db -c "CREATE SCHEMA lonny_up" -f "$peers/lonnymq-original.sql" \
              -c "SELECT lonny_up.channel_set('c' || g, 2147483647, 2147483647, 0) FROM generate_series(1, 100) g" >/dev/null
            prefix=lonnymq_original ;;
        lonnymq112) "$PGBIN/psql" -XAtq -d $db -c "CREATE EXTENSION lonnymq VERSION '1.12'"; prefix=lonnymq ;;
        lonnymq) "$PGBIN/psql" -XAtq -d $db -c "CREATE EXTENSION lonnymq"; prefix=lonnymq ;;
    esac
    script=$(mktemp)
    cat "$root/bench/pgbench/${prefix}_create.sql" "$root/bench/pgbench/${prefix}_consume.sql" > "$script"
    # warm-up: channels created, plans made
    "$PGBIN/pgbench" -n -M prepared -c1 -t 200 -f "$script" -D nchannels=100 -D payload='\xabab' \
        -D json_payload='{"a":1}' $db >/dev/null 2>&1
    "$PGBIN/psql" -XAtq -d $db -c "SELECT pg_stat_statements_reset()" >/dev/null
    PGOPTIONS="-c pg_stat_statements.track=all" "$PGBIN/pgbench" -n -M prepared -c1 -t $n -f "$script" \
        -D nchannels=100 -D payload='\xabab' -D json_payload='{"a":1}' $db >/dev/null 2>&1
    "$PGBIN/psql" -XAtq -d $db -c "SELECT '$sys', round(sum(calls)::numeric / $n, 2) AS per_lifecycle,
        round(sum(calls) FILTER (WHERE toplevel)::numeric / $n, 2) AS sent,
        round(sum(calls) FILTER (WHERE NOT toplevel)::numeric / $n, 2) AS nested
        FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND query !~* '^(BEGIN|COMMIT|SELECT pg_stat_statements_reset)'"
    rm -f "$script"
done
