#!/usr/bin/env bash
# Workload 1's shape (4 producers, 4 consumers, 100 channels, 2,000 seeded, sync off) for
# 10 s on three databases in interleaved rounds: lonnymq as installed (lp_a), lonnymq with
# the definitions of B.sql applied over it (lp_b), and the original LonnyMQ (lp_original).
# A quick check of a prototype under load, with bench/pgbench's scripts: fewer rounds and
# systems than bench/run, so read it as a direction, not as a goal measurement.
#
#   bench/cluster start
#   bench/lifecycle_pair.sh B.sql [ROUNDS] [NAME]
#
# PAIR_CHANNELS=N (1-1000, default 100) spreads the messages over N channels instead: 1 is
# workload 2's one hot channel. PAIR_SYNC=on runs it with synchronous_commit on (default off).
# PAIR_BATCH=N (1-1000; default 1, single calls): from 2 on, workload 4's shape instead,
# batches of N (the batch scripts, and the original LonnyMQ left out: it has no batch
# calls); the seed is then 20 batches. PAIR_SHAPE=one is near empty's shape (b) instead:
# from an empty queue, one client creating, dequeuing and completing in turn (the create
# script, then the consume script, three commits a lifecycle).
#
# Writes bench/results/pair-NAME.csv: round, database, created, completed, messages per
# second (the lesser of the two, as bench/run counts a lifecycle), the mean top-level
# dequeue, complete and create in ms (pg_stat_statements).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/lib.sh"
. "$here/pair_lib.sh"
definitions=$1
rounds=${2:-5}
name=${3:-lifecycle-pair}
sync=${PAIR_SYNC:-off}
batch=${PAIR_BATCH:-1}
[[ $batch =~ ^[0-9]+$ ]] && [ "$batch" -ge 1 ] && [ "$batch" -le 1000 ] \
    || { echo "PAIR_BATCH must be 1-1000" >&2; exit 2; }
databases=(lp_a lp_b lp_original)
kind= calls=(message_dequeue message_complete message_create) seeded=2000
if [ "$batch" -gt 1 ]; then
    databases=(lp_a lp_b)
    kind=_batch calls=(message_dequeue message_complete_batch message_create_batch) seeded=$((20 * batch))
fi
[[ $sync =~ ^(on|off)$ ]] || { echo "PAIR_SYNC must be on or off" >&2; exit 2; }
shape=${PAIR_SHAPE:-w1}
[[ $shape =~ ^(w1|one)$ ]] || { echo "PAIR_SHAPE must be w1 or one" >&2; exit 2; }
[ "$shape" = one ] && [ "$batch" -gt 1 ] && { echo "PAIR_SHAPE=one takes single calls" >&2; exit 2; }
pair_channels
peers=${LONNYMQ_PEERS_DIR:-$here/../../shared/peers}
[[ $peers = /* ]] || peers=$here/../$peers
psql=("$PGBIN/psql" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -n -M prepared -j 1 -T 10
         -D nchannels=$channels -D payload='\x00' -D batch=$batch)
scripts=$here/pgbench
out=$here/results/pair-$name.csv
if [ "$shape" = one ]; then
    seeded=0
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    for system in lonnymq lonnymq_original; do
        cat "$scripts/${system}_create.sql" "$scripts/${system}_consume.sql" > "$work/${system}.sql"
    done
fi

for db in lp_a lp_b lp_original; do
    "${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
        -c "CREATE DATABASE $db"
    "${psql[@]}" -d "$db" -c "CREATE EXTENSION pg_stat_statements"
done
"${psql[@]}" -d lp_a -c "CREATE EXTENSION lonnymq"
"${psql[@]}" -d lp_b -c "CREATE EXTENSION lonnymq" -f "$definitions"
"${psql[@]}" -d lp_original -c "CREATE SCHEMA lonny_up" -f "$peers/lonnymq-original.sql" >/dev/null

# The queue emptied and seeded afresh, vacuumed (one statement per call: VACUUM cannot run
# in a transaction block).
seed() {
    if [ "$1" = lp_original ]; then
        "${psql[@]}" -d "$1" -c "TRUNCATE lonny_up.message, lonny_up.channel" \
            -c "SELECT count(lonny_up.channel_set('c' || c, 2147483647, 2147483647, 0)) FROM generate_series(1, $channels) c" \
            -c "SELECT count(*) FROM generate_series(1, $seeded) i, LATERAL lonny_up.message_create('c' || (i % $channels + 1), '\x00'::bytea, NULL) x" \
            -c "VACUUM ANALYZE lonny_up.message" -c "VACUUM ANALYZE lonny_up.channel" >/dev/null
    else
        "${psql[@]}" -d "$1" -c "TRUNCATE lonnymq.message, lonnymq.channel_hint, lonnymq.message_archive" \
            -c "SELECT count(lonnymq.message_create('bench', 'c' || (i % $channels + 1), '\x00'::bytea)) FROM generate_series(1, $seeded) i" \
            -c "VACUUM ANALYZE lonnymq.message" -c "VACUUM ANALYZE lonnymq.channel" \
            -c "VACUUM ANALYZE lonnymq.channel_hint" >/dev/null
    fi
    "${psql[@]}" -d "$1" -c "CHECKPOINT" -c "SELECT pg_stat_statements_reset()" >/dev/null
}

live() {
    local table=lonnymq.message
    [ "$1" = lp_original ] && table=lonny_up.message
    "${psql[@]}" -d "$1" -c "SELECT count(*) FROM $table"
}

echo "round,database,created,completed,messages_per_s,dequeue_mean_ms,complete_mean_ms,create_mean_ms" > "$out"
for round in $(seq "$rounds"); do
    for db in "${databases[@]}"; do
        system=lonnymq
        [ "$db" = lp_original ] && system=lonnymq_original
        seed "$db"
        before=$(live "$db")
        produced=$(mktemp)
        if [ "$shape" = one ]; then
            PGOPTIONS="-c synchronous_commit=$sync" "${pgbench[@]}" -c 1 -f "$work/$system.sql" "$db" > "$produced" 2>&1
        else
            PGOPTIONS="-c synchronous_commit=$sync" "${pgbench[@]}" -c 4 -f "$scripts/${system}${kind}_create.sql" "$db" \
                > "$produced" 2>&1 &
            PGOPTIONS="-c synchronous_commit=$sync" "${pgbench[@]}" -c 4 -f "$scripts/${system}${kind}_consume.sql" "$db" \
                > /dev/null 2>&1
            wait
        fi
        after=$(live "$db")
        created=$(( $(grep -oP 'actually processed: \K\d+' "$produced") * batch ))
        rm -f "$produced"
        completed=$((before + created - after))
        lifecycle=$(( (created < completed ? created : completed) / 10 ))
        echo "$round,$db,$created,$completed,$lifecycle$(stat_means "$db" "${calls[@]}")" | tee -a "$out"
    done
done
echo "wrote $out"
