#!/usr/bin/env bash
# Where a consumer's server CPU goes, lonnymq next to the original LonnyMQ and PGMQ: one
# pgbench client consumes (sync off) with the consumer scripts of bench/pgbench (a dequeue
# and its complete, each its own transaction) from 100,000 ready messages (lonnymq's and the
# original's on 100 channels, PGMQ's in its one queue) while `perf record` samples its
# backend, in 4 interleaved rounds of 4 s per system. perf_split.py puts every sample in one
# category (executor start, PL/pgSQL, index scans, commit, ...) and reports microseconds of
# CPU per message consumed. A measuring instrument, not part of bench/run. Needs perf
# (Debian: linux-perf) and the right to trace the backend (root, or perf_event_paranoid <= 1).
#
#   bench/cluster start
#   bench/prototypes/dequeue_profile.sh [NAME [B.sql]]
#
# With B.sql (definitions applied over a fresh install, as lifecycle_pair.sh takes them), a
# third system, lonnymq_b, is profiled as well. PROFILE_BATCH=N (1-100): the batch consumer
# scripts instead, N messages per dequeue (the original LonnyMQ has single dequeues only, so
# it is left out). PROFILE_LIFECYCLE=1: the whole lifecycle instead, the create scripts of
# bench/pgbench run by the same client as often as the consumer scripts (pgbench picks
# either for each transaction), 100 channels; the figures stay per message consumed and
# include the creates. PROFILE_ROUNDS: rounds (4).
#
# Writes bench/results/profile-NAME.txt (the tables) and profile-NAME.json (one line per
# system). lonnymq is the version installed into the benchmark cluster's PostgreSQL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/lib.sh"
die() { echo "dequeue_profile.sh: $*" >&2; exit 1; }
name=${1:-dequeue}
definitions=${2:-}
batch=${PROFILE_BATCH:-1}
rounds=${PROFILE_ROUNDS:-4}
consume=consume  # bench/pgbench/SYSTEM_consume.sql, or _batch_consume.sql with PROFILE_BATCH
[ "$batch" = 1 ] || consume=batch_consume
lifecycle=${PROFILE_LIFECYCLE:-}
[[ $batch =~ ^[0-9]+$ ]] && [ "$batch" -ge 1 ] && [ "$batch" -le 100 ] || die "PROFILE_BATCH must be 1-100"
peers=${LONNYMQ_PEERS_DIR:-$here/../../../shared/peers}
[[ $peers = /* ]] || peers=$here/../../$peers
command -v perf >/dev/null || die "perf is not installed (Debian: apt-get install linux-perf)"
for file in lonnymq-original.sql pgmq.sql; do
    [ -f "$peers/$file" ] || die "no $peers/$file (LONNYMQ_PEERS_DIR)"
done
psql=("$PGBIN/psql" -h 127.0.0.1 -p "${BENCH_PGPORT:-54339}" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "${BENCH_PGPORT:-54339}" -U postgres -n -M prepared -c 1)
results=$here/../results
scripts=$here/../pgbench
py=$here/../../.venv/bin/python
[ -x "$py" ] || py=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: > "$results/profile-$name.txt"
: > "$results/profile-$name.json"

setup() {  # database: a fresh one, 100,000 ready messages (lonnymq's on 100 channels), vacuumed
    "${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" \
        -c "CREATE DATABASE $1"
    if [ "$1" = prof_pgmq ]; then
        "${psql[@]}" -d "$1" -c "CREATE SCHEMA pgmq" -c "SET client_min_messages = warning" -f "$peers/pgmq.sql" >/dev/null
        "${psql[@]}" -d "$1" -c "SELECT pgmq.create('bench')" >/dev/null
        for _ in $(seq $((batch < 4 ? batch : 4))); do
            "${psql[@]}" -d "$1" -c "SELECT count(*) FROM pgmq.send_batch('bench',
                array_fill('{\"content\": \"AA==\"}'::jsonb, ARRAY[100000]))" >/dev/null
        done
        "${psql[@]}" -d "$1" -c "VACUUM ANALYZE pgmq.q_bench" >/dev/null
    elif [ "$1" = prof_original ]; then
        "${psql[@]}" -d "$1" -c "CREATE SCHEMA lonny_up" -f "$peers/lonnymq-original.sql" >/dev/null
        "${psql[@]}" -d "$1" \
            -c "SELECT count(lonny_up.channel_set('c' || c, 2147483647, 2147483647, 0)) FROM generate_series(1, 100) c" \
            -c "SELECT count(*) FROM generate_series(1, 100000) i,
                LATERAL lonny_up.message_create('c' || (i % 100 + 1), '\x00'::bytea, NULL) x" \
            -c "VACUUM ANALYZE lonny_up.message" -c "VACUUM ANALYZE lonny_up.channel" >/dev/null
    else
        "${psql[@]}" -d "$1" -c "CREATE EXTENSION lonnymq"
        [ "$1" = prof_lonnymq_b ] && "${psql[@]}" -d "$1" -f "$definitions" >/dev/null
        # Batches drain it faster: 100,000 messages per message a call takes, 400,000 at most.
        for _ in $(seq $((batch < 4 ? batch : 4))); do
            "${psql[@]}" -d "$1" -c "SELECT count(*) FROM lonnymq.message_create_batch('bench',
                (SELECT array_agg('c' || (i % 100 + 1)) FROM generate_series(1, 100000) i),
                array_fill('\x00'::bytea, ARRAY[100000]))" >/dev/null
        done
        "${psql[@]}" -d "$1" -c "VACUUM ANALYZE lonnymq.message" -c "VACUUM ANALYZE lonnymq.channel" >/dev/null
    fi
}

consumed() {  # database: messages created so far minus messages in the queue
    local table=lonnymq.message seq=lonnymq.message_id_seq
    [ "$1" = prof_pgmq ] && table=pgmq.q_bench seq=pgmq.q_bench_msg_id_seq
    [ "$1" = prof_original ] && table=lonny_up.message seq=lonny_up.message_id_seq
    "${psql[@]}" -d "$1" -c "SELECT (SELECT last_value FROM $seq) - (SELECT count(*) FROM $table)"
}

round() {  # database, label, system, round number
    local files=(-f "$scripts/${3}_$consume.sql")
    [ -n "$lifecycle" ] && files+=(-f "$scripts/${3}_create.sql")
    PGOPTIONS="-c synchronous_commit=off" PGAPPNAME=dequeue-profile \
        "${pgbench[@]}" -T 6 -D batch="$batch" -D nchannels=100 -D payload='\x00' \
        -D json_payload='{"content": "AA=="}' "${files[@]}" "$1" > "$work/pgbench.log" 2>&1 &
    local driver=$! pid="" before after
    sleep 1.5  # connected, plans made
    pid=$("${psql[@]}" -d postgres -c "SELECT pid FROM pg_stat_activity
                                        WHERE application_name = 'dequeue-profile' LIMIT 1")
    [ -n "$pid" ] || die "no pgbench backend found"
    before=$(consumed "$1")
    perf record -q -F 4000 -g -p "$pid" -o "$work/perf.data" -- sleep 4 >/dev/null 2>&1
    after=$(consumed "$1")
    wait "$driver"
    perf script -i "$work/perf.data" 2>/dev/null > "$work/$2-$4.txt"
    pooled[$2]="${pooled[$2]:-} $((after - before)):$work/$2-$4.txt"
}

# Every system set up first, then measured in interleaved rounds (drift on this machine
# moves every system's numbers by tens of percent over a minute), each round's samples
# pooled per system.
declare -A pooled
systems=(lonnymq)
setup prof_lonnymq
if [ -n "$definitions" ]; then
    systems+=(lonnymq_b)
    setup prof_lonnymq_b
fi
if [ "$batch" = 1 ]; then
    systems+=(lonnymq_original)
    setup prof_original
fi
systems+=(pgmq)
setup prof_pgmq
for r in $(seq "$rounds"); do
    for system in "${systems[@]}"; do
        case $system in
            lonnymq) round prof_lonnymq "$system" lonnymq "$r" ;;
            lonnymq_b) round prof_lonnymq_b "$system" lonnymq "$r" ;;
            lonnymq_original) round prof_original "$system" lonnymq_original "$r" ;;
            pgmq) round prof_pgmq "$system" pgmq "$r" ;;
        esac
    done
done
for system in "${systems[@]}"; do
    # shellcheck disable=SC2086  # the pairs are words
    "$py" "$here/perf_split.py" "$system" message 250 ${pooled[$system]} > "$work/split.txt"
    grep -v '^{' "$work/split.txt" | tee -a "$results/profile-$name.txt"
    grep '^{' "$work/split.txt" >> "$results/profile-$name.json"
done
echo "wrote $results/profile-$name.txt and .json"
