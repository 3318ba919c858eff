#!/usr/bin/env bash
# A MEASUREMENT, NOT A CHANGE (session 22): would a round's pick and its turns cost less as
# one statement? The pick locks the fairest channels (FOR NO KEY UPDATE SKIP LOCKED) and the
# turn then rewrites each row; merged, one UPDATE over the picked rows does both (it would
# then have to undo the turn of a channel with nothing to take). Channel rows only, no
# messages: pick_turn/separate.sql (a pick, then an update by id) against
# pick_turn/merged.sql (UPDATE ... FROM the pick), 2 pgbench clients on 100 channels,
# ROUNDS interleaved rounds of 8 s at N = 1 and 8 channels per transaction, generic plans
# and enable_seqscan off as message_dequeue runs them, sync off.
#
#   bench/cluster start
#   bench/prototypes/pick_turn_merge.sh [ROUNDS] [NAME]
#
# Writes bench/results/pick-turn-NAME.csv: round, script, channels per transaction, tps.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/lib.sh"
rounds=${1:-3}
name=${2:-pick-turn}
psql=("$PGBIN/psql" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -n -M prepared -c 2 -j 2 -T 8
         -D now=9000000000000000)
out=$here/../results/pick-turn-$name.csv

"${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS pick_turn" \
    -c "CREATE DATABASE pick_turn"
# 100 channels, each ready (a head long due).
"${psql[@]}" -d pick_turn -c "CREATE EXTENSION lonnymq" \
    -c "SELECT count(lonnymq.message_create('pick_turn', 'c' || i, '\x00'::bytea)) FROM generate_series(1, 100) i" \
    -c "UPDATE lonnymq.channel SET head_ms = 0, last_turn_ms = 0, ready_ms = 0" >/dev/null

echo "round,script,channels,tps" > "$out"
for round in $(seq "$rounds"); do
    for script in separate merged; do
        for n in 1 8; do
            "${psql[@]}" -d pick_turn -c "VACUUM lonnymq.channel"
            tps=$(PGOPTIONS="-c enable_seqscan=off -c synchronous_commit=off -c plan_cache_mode=force_generic_plan" \
                "${pgbench[@]}" -D n=$n -f "$here/pick_turn/$script.sql" pick_turn | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
            echo "$round,$script,$n,$tps" | tee -a "$out"
        done
    done
done
echo "wrote $out"
