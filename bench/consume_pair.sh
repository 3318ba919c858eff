#!/usr/bin/env bash
# One client consuming (workload 4's consumer script: a dequeue of BATCH, then a
# message_complete_batch of what it got, each its own transaction, sync off) on two
# databases in interleaved rounds: lonnymq as installed (lp_a) and lonnymq with the
# definitions of B.sql applied over it (lp_b). Each round fills both alike (30,000
# messages over 100 channels, or PAIR_CHANNELS, vacuumed) and consumes 20,000 of them. What a change to
# the consumer's calls costs per call, without the load of bench/run's 8 clients; the
# means come from pg_stat_statements (top-level calls). PAIR_CHANNELS=N (1-1000, default
# 100) spreads the messages over N channels instead.
#
#   bench/cluster start
#   bench/consume_pair.sh B.sql [ROUNDS] [BATCH] [NAME]
#
# Writes bench/results/consume-NAME.csv: round, database, channels, batch, the mean dequeue and
# the mean message_complete_batch in ms.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/lib.sh"
. "$here/pair_lib.sh"
definitions=$1
rounds=${2:-4}
batch=${3:-100}
name=${4:-consume-pair}
pair_channels
[[ $batch =~ ^[0-9]+$ ]] && [ "$batch" -ge 1 ] && [ "$batch" -le 1000 ] \
    || { echo "BATCH must be 1-1000" >&2; exit 2; }
psql=("$PGBIN/psql" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -n -M prepared -c 1
         -t $((20000 / batch)) -D batch=$batch)
out=$here/results/consume-$name.csv

pair_databases "$definitions"

echo "round,database,channels,batch,dequeue_mean_ms,complete_batch_mean_ms" > "$out"
for round in $(seq "$rounds"); do
    for db in lp_a lp_b; do
        # 300 creates of 100, each over all the channels (g makes each call's channels its own:
        # a call whose arguments do not depend on g would run once).
        "${psql[@]}" -d "$db" -c "TRUNCATE lonnymq.message, lonnymq.channel_hint" \
            -c "SELECT count(*) FROM generate_series(1, 300) g, LATERAL lonnymq.message_create_batch('bench',
                    (SELECT array_agg('c' || (1 + (i + g) % $channels)) FROM generate_series(1, 100) i),
                    array_fill('\x00'::bytea, ARRAY[100])) x" >/dev/null
        "${psql[@]}" -d "$db" -c "VACUUM ANALYZE lonnymq.message" -c "VACUUM ANALYZE lonnymq.channel" \
            -c "CHECKPOINT" -c "SELECT pg_stat_statements_reset()" >/dev/null
        PGOPTIONS="-c synchronous_commit=off" "${pgbench[@]}" -f "$here/pgbench/lonnymq_batch_consume.sql" \
            "$db" >/dev/null
        echo "$round,$db,$channels,$batch$(stat_means "$db" message_dequeue message_complete_batch)" | tee -a "$out"
    done
done
echo "wrote $out"
