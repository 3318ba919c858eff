#!/usr/bin/env bash
# Where a consumer's server CPU goes, lonnymq next to the original LonnyMQ, PGMQ and the
# floor (bench/floor.sql). pgbench clients (one per system by default) consume (sync off)
# with the consumer scripts of bench/pgbench (a dequeue and its complete, each its own
# transaction), each system in its own database filled with ready messages (lonnymq's, the
# original's and the floor's on 100 channels by default, PGMQ's in its one queue), while
# `perf record` samples the clients' backends: 4 interleaved rounds of 4 s per system.
# perf_split.py puts every sample in one category (executor start, PL/pgSQL, index scans,
# commit, ...) and reports microseconds of the backends' CPU per message consumed, and their
# minor page faults per message (read from /proc around each round).
# A measuring instrument, not part of bench/run. Needs perf (Debian: linux-perf) and the
# right to sample the server's processes (root; or perf_event_paranoid <= 1 and the user
# that runs the server).
#
#   bench/cluster start
#   bench/prototypes/dequeue_profile.sh [NAME [B.sql]]
#
# With B.sql (definitions applied over a fresh install, as lifecycle_pair.sh takes them), a
# third system, lonnymq_b, is profiled as well. Settings (environment):
#   PROFILE_BATCH=N      the batch consumer scripts, N (1-100) messages per dequeue; the
#                        original LonnyMQ (single dequeues only) is left out
#   PROFILE_LIFECYCLE=1  the whole lifecycle: the create scripts of bench/pgbench run by the
#                        same client as often as the consumer scripts (pgbench picks one
#                        per transaction); still per message consumed, creates included
#   PROFILE_ROUNDS=N     rounds (1-20, default 4)
#   PROFILE_CHANNELS=N   channels (0-1000, default 100); 0: channel-less messages, and the
#                        original LonnyMQ (which has none) is left out; 1: one hot channel
#   PROFILE_CLIENTS=N    pgbench clients per system (1-8, default 1), every one's backend
#                        sampled: with several, the CPU per message includes what they
#                        spend on each other (rows skipped, the held path), not their waits
#   PROFILE_WITHIN=FRAME a second table per system: the same CPU per message, counting
#                        only the samples under FRAME, by category (perf_split.py count).
#                        ExecMakeTableFunctionResult is a call in FROM: in the single
#                        consumer scripts only the dequeue (the completes are called in
#                        SELECT's list), but with PROFILE_LIFECYCLE=1 the creates too, and
#                        with PROFILE_BATCH the batch completes too
#   PROFILE_KEEP=DIR     keep each round's `perf script` dump as DIR/SYSTEM-ROUND.txt
#   PROFILE_PEERS="..."  the peers to profile beside lonnymq (default: lonnymq_original pgmq
#                        floor; empty: lonnymq alone). Leave the original out with PROFILE_CHANNELS=1: its fill
#                        there ran over 6 minutes and was stopped (every create updates the
#                        channel's row, 300,000 times in one transaction)
#
# Writes bench/results/profile-NAME.txt (the tables) and profile-NAME.json (one line per
# system), once every round is done. lonnymq is the version installed into the benchmark
# cluster's PostgreSQL. The prof_* databases are left for inspection.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/lib.sh"
die() { echo "dequeue_profile.sh: $*" >&2; exit 1; }

name=${1:-dequeue}
definitions=${2:-}
batch=${PROFILE_BATCH:-1}
rounds=${PROFILE_ROUNDS:-4}
lifecycle=${PROFILE_LIFECYCLE:-0}
channels=${PROFILE_CHANNELS:-100}
clients=${PROFILE_CLIENTS:-1}
within=${PROFILE_WITHIN:-}
keep=${PROFILE_KEEP:-}
[ -z "$keep" ] || [ -d "$keep" ] || die "PROFILE_KEEP must be a directory"
read -r -a peers_wanted <<< "${PROFILE_PEERS-lonnymq_original pgmq floor}"
[[ $batch =~ ^[0-9]+$ ]] && batch=$((10#$batch)) && ((batch >= 1 && batch <= 100)) \
    || die "PROFILE_BATCH must be 1-100"
[[ $rounds =~ ^[0-9]+$ ]] && rounds=$((10#$rounds)) && ((rounds >= 1 && rounds <= 20)) \
    || die "PROFILE_ROUNDS must be 1-20"
[[ $lifecycle =~ ^[01]$ ]] || die "PROFILE_LIFECYCLE must be 0 or 1"
[[ $channels =~ ^[0-9]+$ ]] && channels=$((10#$channels)) && ((channels <= 1000)) \
    || die "PROFILE_CHANNELS must be 0-1000"
[[ $clients =~ ^[0-9]+$ ]] && clients=$((10#$clients)) && ((clients >= 1 && clients <= 8)) \
    || die "PROFILE_CLIENTS must be 1-8"
for system in ${peers_wanted[@]+"${peers_wanted[@]}"}; do
    [[ $system =~ ^(lonnymq_original|pgmq|floor)$ ]] || die "PROFILE_PEERS: no system '$system'"
done
wanted=" ${peers_wanted[*]-} "  # (space-separated, for the membership tests below)
if [ -n "$definitions" ]; then
    [ -f "$definitions" ] || die "no such file: $definitions"
    definitions=$(cd "$(dirname "$definitions")" && pwd)/$(basename "$definitions")
fi
peers=${LONNYMQ_PEERS_DIR:-$here/../../../shared/peers}
[[ $peers = /* ]] || peers=$here/../../$peers
# (Only the install SQL of the peers profiled: the floor's is bench/floor.sql.)
for system in lonnymq_original:lonnymq-original.sql pgmq:pgmq.sql; do
    [[ $wanted = *" ${system%%:*} "* ]] && { [ -f "$peers/${system#*:}" ] \
        || die "no $peers/${system#*:} (LONNYMQ_PEERS_DIR)"; }
done
command -v perf >/dev/null || die "perf is not installed (Debian: apt-get install linux-perf)"
if [ "$(id -u)" != 0 ] && [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -gt 1 ]; then
    die "perf may not sample other processes here: run as root, or set kernel.perf_event_paranoid to 1"
fi

psql=("$PGBIN/psql" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -X -q -A -t -v ON_ERROR_STOP=1)
pgbench=("$PGBIN/pgbench" -h 127.0.0.1 -p "${BENCH_PGPORT:-25439}" -U postgres -n -M prepared
         -c "$clients" -j "$clients")
results=$here/../results
scripts=$here/../pgbench
py=$here/../../.venv/bin/python
[ -x "$py" ] || py=python3
work=$(mktemp -d)
pgbench_pid=""
trap '[ -z "$pgbench_pid" ] || kill "$pgbench_pid" 2>/dev/null; rm -rf "$work"' EXIT
consume=consume  # bench/pgbench/SYSTEM_consume.sql, or SYSTEM_batch_consume.sql
((batch == 1)) || consume=batch_consume
# Enough messages for every round (PGMQ in batches of 8 consumed ~11,000 a second here, for
# 8 s a round); larger batches or more rounds may need more, which the check before each
# round tells. Filled 50,000 at a time; twice as many for several clients.
chunks=$((3 * (batch < 4 ? batch : 4) * ((rounds + 3) / 4) * (clients > 1 ? 2 : 1)))
fill=$((50000 * chunks))
# Each message's channel in the fills (SQL of i, the message's number).
channel="'c' || (i % $channels + 1)"
((channels > 0)) || channel="NULL::text"

setup() {  # database: a fresh one, $fill ready messages, vacuumed
    "${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" \
        -c "CREATE DATABASE $1"
    local i
    case $1 in
        prof_pgmq)
            "${psql[@]}" -d "$1" -c "CREATE SCHEMA pgmq" -c "SET client_min_messages = warning" \
                -f "$peers/pgmq.sql" -c "SELECT pgmq.create('bench')" >/dev/null
            for i in $(seq "$chunks"); do
                "${psql[@]}" -d "$1" -c "SELECT count(*) FROM pgmq.send_batch('bench',
                    array_fill('{\"content\": \"AA==\"}'::jsonb, ARRAY[50000]))" >/dev/null
            done
            "${psql[@]}" -d "$1" -c "VACUUM ANALYZE pgmq.q_bench" >/dev/null ;;
        prof_original)
            "${psql[@]}" -d "$1" -c "CREATE SCHEMA lonny_up" -f "$peers/lonnymq-original.sql" >/dev/null
            "${psql[@]}" -d "$1" \
                -c "SELECT count(lonny_up.channel_set('c' || c, 2147483647, 2147483647, 0))
                    FROM generate_series(1, $channels) c" \
                -c "SELECT count(*) FROM generate_series(1, $fill) i,
                    LATERAL lonny_up.message_create($channel, '\x00'::bytea, NULL) x" \
                -c "VACUUM ANALYZE lonny_up.message" -c "VACUUM ANALYZE lonny_up.channel" >/dev/null ;;
        prof_floor)
            "${psql[@]}" -d "$1" -c "SET client_min_messages = warning" -f "$here/../floor.sql" >/dev/null
            "${psql[@]}" -d "$1" -c "INSERT INTO floor.message (channel, content)
                SELECT $channel, '\x00'::bytea FROM generate_series(1, $fill) i" \
                -c "VACUUM ANALYZE floor.message" >/dev/null ;;
        *)
            "${psql[@]}" -d "$1" -c "CREATE EXTENSION lonnymq"
            [ "$1" = prof_lonnymq_b ] && "${psql[@]}" -d "$1" -f "$definitions" >/dev/null
            for i in $(seq "$chunks"); do
                "${psql[@]}" -d "$1" -c "SELECT count(*) FROM lonnymq.message_create_batch('bench',
                    (SELECT array_agg($channel) FROM generate_series(1, 50000) i),
                    array_fill('\x00'::bytea, ARRAY[50000]))" >/dev/null
            done
            "${psql[@]}" -d "$1" -c "VACUUM ANALYZE lonnymq.message" -c "VACUUM ANALYZE lonnymq.channel" \
                -c "VACUUM ANALYZE lonnymq.channel_hint" >/dev/null ;;
    esac
}

tables() {  # database: its message table and the sequence of its ids
    case $1 in
        prof_pgmq) echo "pgmq.q_bench pgmq.q_bench_msg_id_seq" ;;
        prof_original) echo "lonny_up.message lonny_up.message_id_seq" ;;
        prof_floor) echo "floor.message floor.message_id_seq" ;;
        *) echo "lonnymq.message lonnymq.message_id_seq" ;;
    esac
}

consumed() {  # database: messages created so far minus those still in the queue
    local table seq
    read -r table seq < <(tables "$1")
    "${psql[@]}" -d "$1" -c "SELECT (SELECT last_value FROM $seq) - (SELECT count(*) FROM $table)"
}

minor_faults() {  # pids (comma-separated): their minor page faults so far, summed
    local pid stat sum=0
    for pid in ${1//,/ }; do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || die "backend $pid ended during a round"
        stat=${stat##*) }  # (after the command name: fields from the third on)
        sum=$((sum + $(awk '{ print $8 }' <<< "$stat")))  # field 10, minflt
    done
    echo "$sum"
}

round() {  # database, system, round number: one round's samples, counted into $work
    local driver=${2%_b} table seq left  # (lonnymq_b runs lonnymq's scripts)
    read -r table seq < <(tables "$1")
    left=$("${psql[@]}" -d "$1" -c "SELECT count(*) FROM $table")
    ((left >= fill / 4)) || die "$2: $left of $fill messages left before round $3: fill more"
    local files=(-f "$scripts/${driver}_$consume.sql")
    ((lifecycle)) && files+=(-f "$scripts/${driver}_create.sql")
    PGOPTIONS="-c synchronous_commit=off" PGAPPNAME=dequeue-profile \
        "${pgbench[@]}" -T 8 -D batch="$batch" -D nchannels="$channels" -D payload='\x00' \
        -D json_payload='{"content": "AA=="}' "${files[@]}" "$1" > "$work/pgbench.log" 2>&1 &
    pgbench_pid=$!
    local pids="" before after t0 t1 faults0 faults1
    sleep 1.5  # connected, plans made
    pids=$("${psql[@]}" -d postgres -c "SELECT string_agg(pid::text, ',') FROM pg_stat_activity
                                         WHERE application_name = 'dequeue-profile' AND datname = '$1'")
    [ "$(tr ',' '\n' <<< "$pids" | grep -c .)" = "$clients" ] \
        || { cat "$work/pgbench.log" >&2; die "$2: found backends '$pids', not $clients"; }
    # The messages consumed between two counts, and the wall time between them: scaled
    # by perf_split.py to the span of the samples.
    t0=$(date +%s.%N)
    before=$(consumed "$1")
    faults0=$(minor_faults "$pids")
    perf record -q -e cpu-clock -c 250000 -g --no-buildid -p "$pids" -o "$work/perf.data" \
        -- sleep 4 > /dev/null 2> "$work/perf.log" || { cat "$work/perf.log" >&2; die "$2: perf record failed"; }
    t1=$(date +%s.%N)
    after=$(consumed "$1")
    faults1=$(minor_faults "$pids")
    kill -0 "$pgbench_pid" 2>/dev/null || die "$2: pgbench ended before the samples did (raise -T)"
    wait "$pgbench_pid" || { pgbench_pid=""; cat "$work/pgbench.log" >&2; die "$2: pgbench failed"; }
    pgbench_pid=""
    perf script -i "$work/perf.data" > "$work/stacks.txt" 2> "$work/perf.log" \
        || { cat "$work/perf.log" >&2; die "$2: perf script failed"; }
    "$py" "$here/perf_split.py" count "$work/stacks.txt" > "$work/$2-$3.json"
    [ -z "$within" ] || "$py" "$here/perf_split.py" count "$work/stacks.txt" "$within" > "$work/$2-$3-within.json"
    [ -z "$keep" ] || cp "$work/stacks.txt" "$keep/$2-$3.txt"
    rm -f "$work/stacks.txt" "$work/perf.data"
    local measured="$((after - before)):$(awk "BEGIN { print $t1 - $t0 }"):$((faults1 - faults0))"
    pooled[$2]+=" $work/$2-$3.json:$measured"
    pooled_within[$2]+=" $work/$2-$3-within.json:$measured"
}

# Every system set up first, then measured in interleaved rounds (drift on this machine
# moves every system's numbers by tens of percent within minutes), each system's rounds
# pooled.
declare -A pooled pooled_within
systems=(lonnymq)
[ -n "$definitions" ] && systems+=(lonnymq_b)
((batch == 1 && channels > 0)) && [[ $wanted = *" lonnymq_original "* ]] && systems+=(lonnymq_original)
for system in pgmq floor; do
    [[ $wanted = *" $system "* ]] && systems+=("$system")
done
declare -A database=([lonnymq]=prof_lonnymq [lonnymq_b]=prof_lonnymq_b
                     [lonnymq_original]=prof_original [pgmq]=prof_pgmq [floor]=prof_floor)
for system in "${systems[@]}"; do
    setup "${database[$system]}"
done
for r in $(seq "$rounds"); do
    for system in "${systems[@]}"; do
        round "${database[$system]}" "$system" "$r"
    done
done
for system in "${systems[@]}"; do
    # shellcheck disable=SC2086  # one word per round
    "$py" "$here/perf_split.py" report "$system" message ${pooled[$system]} > "$work/$system.txt"
    grep -v '^{' "$work/$system.txt" >> "$work/profile.txt"
    grep '^{' "$work/$system.txt" >> "$work/profile.json"
    [ -n "$within" ] || continue
    # shellcheck disable=SC2086
    "$py" "$here/perf_split.py" report "$system, within $within" message ${pooled_within[$system]} \
        > "$work/$system.txt"
    grep -v '^{' "$work/$system.txt" >> "$work/profile.txt"
    grep '^{' "$work/$system.txt" >> "$work/profile.json"
done
# What was measured: first line of the JSON.
printf '{"provenance": {"git": "%s", "lonnymq": "%s", "postgres": "%s", "perf": "%s", "date": "%s", %s}}\n' \
    "$(git -C "$here" describe --always --dirty)" \
    "$("${psql[@]}" -d prof_lonnymq -c "SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'")" \
    "$("${psql[@]}" -d postgres -c "SHOW server_version")" "$(perf --version)" "$(date -u +%FT%TZ)" \
    "\"batch\": $batch, \"lifecycle\": $lifecycle, \"within\": \"$within\", \"channels\": $channels, \"clients\": $clients, \"rounds\": $rounds, \"systems\": \"${systems[*]}\"" \
    | cat - "$work/profile.json" > "$work/profile.all.json"
mv "$work/profile.all.json" "$work/profile.json"
cat "$work/profile.txt"
mv "$work/profile.txt" "$results/profile-$name.txt"
mv "$work/profile.json" "$results/profile-$name.json"
echo "wrote $results/profile-$name.txt and .json"
