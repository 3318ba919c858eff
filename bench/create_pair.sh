#!/usr/bin/env bash
# One client creating (workload 1's producer script: a message_create per commit, over 100
# channels, sync off) on two databases in interleaved rounds: lonnymq as installed (lp_a)
# and lonnymq with the definitions of B.sql applied over it (lp_b). Each round empties both
# alike (the 100 channels stay, vacuumed) and creates MESSAGES in each. What a change to
# message_create costs per call, without the load of bench/run's 8 clients; the means come
# from pg_stat_statements (top-level calls). Rounds alternate which database goes first.
#
#   bench/cluster start
#   bench/create_pair.sh B.sql [ROUNDS] [MESSAGES] [NAME]
#
# Writes bench/results/create-NAME.csv: round, database, the mean message_create in ms and
# the client's transactions per second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/lib.sh"
. "$here/pair_lib.sh"
definitions=$1
rounds=${2:-6}
messages=${3:-20000}
name=${4:-create-pair}
[[ $messages =~ ^[0-9]+$ ]] && [ "$messages" -ge 1 ] || { echo "MESSAGES must be a positive number" >&2; exit 2; }
psql=("$PGBIN/psql" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -n -M prepared -c 1
         -t "$messages" -D nchannels=100 -D payload="\\x$(printf 'ab%.0s' {1..128})")  # bench/common.py's PAYLOAD
out=$here/results/create-$name.csv

pair_databases "$definitions"
for db in lp_a lp_b; do
    # The channels, made once: every round's creates find them.
    "${psql[@]}" -d "$db" -c "SELECT count(*) FROM generate_series(1, 100) i,
                                LATERAL lonnymq.message_create('bench', 'c' || i, '\x00') x" >/dev/null
done

echo "round,database,create_mean_ms,tps" > "$out"
for round in $(seq "$rounds"); do
    order=(lp_a lp_b)
    [ $((round % 2)) -eq 0 ] && order=(lp_b lp_a)
    for db in "${order[@]}"; do
        "${psql[@]}" -d "$db" -c "TRUNCATE lonnymq.message, lonnymq.channel_hint" >/dev/null
        "${psql[@]}" -d "$db" -c "VACUUM ANALYZE lonnymq.message" -c "VACUUM ANALYZE lonnymq.channel" \
            -c "CHECKPOINT" -c "SELECT pg_stat_statements_reset()" >/dev/null
        tps=$(PGOPTIONS="-c synchronous_commit=off" "${pgbench[@]}" -f "$here/pgbench/lonnymq_create.sql" \
                  "$db" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        echo "$round,$db$(stat_means "$db" message_create),$tps" | tee -a "$out"
    done
done
echo "wrote $out"
