#!/usr/bin/env bash
# Issue 37, model A: fairness and limits under concurrent consumers (pgbench), in a database
# of its own (fa) on the benchmark cluster (BENCH_PGPORT), with this checkout's lonnymq.
#   1. fairness: 1 big channel (3,000) and 99 small ones (30 each), all backlogged; 4 consumers;
#      Jain's index over what each channel got in the first 2,000 deliveries (exact
#      round-robin gives 20 each: 1.0). Also one consumer taking batches of 10.
#   2. max_concurrency 3 on a channel of 300, 4 consumers that hold each message ~5 ms:
#      the most locked at once, sampled from another session, and verify().
#   3. release_interval_ms 50 on a channel of 100 next to a busy one: the smallest gap
#      between two of its deliveries (dequeue times as the consumers logged them).
set -euo pipefail
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PORT=${BENCH_PGPORT:-25439}
P=("$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
D=$(mktemp -d)
"${P[@]}" -d postgres -c "DROP DATABASE IF EXISTS fa" -c "CREATE DATABASE fa"
"${P[@]}" -d fa -c "CREATE EXTENSION lonnymq" -c "CREATE TABLE dlog (n bigserial, id bigint, channel text, at timestamptz)"

cat > "$D/consume.sql" <<'SQL'
WITH d AS (SELECT * FROM lonnymq.message_dequeue('fq', 30000, :batch))
INSERT INTO dlog (id, channel, at) SELECT d.id, d.channel, clock_timestamp() FROM d;
SELECT lonnymq.message_complete(m.id, m.num_attempts) FROM lonnymq.message m
WHERE m.id IN (SELECT id FROM dlog ORDER BY n DESC LIMIT :batch) AND m.locked_until_ms IS NOT NULL;
SQL
cat > "$D/hold.sql" <<'SQL'
WITH d AS (SELECT * FROM lonnymq.message_dequeue('fq', 30000, 1)),
l AS (INSERT INTO dlog (id, channel, at) SELECT d.id, d.channel, clock_timestamp() FROM d RETURNING id)
SELECT coalesce(max(id), 0) AS got FROM l
\gset
\if :got > 0
SELECT pg_sleep(0.005);
SELECT lonnymq.message_complete(:got, (SELECT m.num_attempts FROM lonnymq.message m WHERE m.id = :got));
\endif
SQL

fill() {  # fill CHANNEL COUNT
    "${P[@]}" -d fa -c "SELECT count(*) FROM lonnymq.message_create_batch('fq', array_fill('$1'::text, ARRAY[$2]), array_fill('\\x01'::bytea, ARRAY[$2]))" >/dev/null
}
reset() {
    "${P[@]}" -d fa -c "TRUNCATE lonnymq.message, lonnymq.channel, lonnymq.queue, lonnymq.channel_admission, lonnymq.message_archive, dlog"
}
jain() {  # over the first $1 deliveries
    "${P[@]}" -d fa -c "SELECT round(((sum(k))^2 / (count(*) * sum(k * k)))::numeric, 4) || ' (channels ' || count(*) || ', min ' || min(k) || ', max ' || max(k) || ', big ' || coalesce(max(k) FILTER (WHERE channel = 'big'), 0) || ')'
        FROM (SELECT channel, count(*)::float8 AS k FROM (SELECT * FROM dlog ORDER BY n LIMIT $1) f GROUP BY channel) x"
}

echo "== 1. fairness: 1 big (3000) + 99 small (30 each)"
for mode in "4 1" "1 10"; do
    set -- $mode
    reset
    fill big 3000
    for i in $(seq 1 99); do fill "s$i" 30; done
    "$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PORT" -U postgres -c "$1" -j 1 -t $((2400 / $1 / $2)) -D batch="$2" -f "$D/consume.sql" fa >/dev/null 2>&1
    echo "clients $1, batch $2: Jain over the first 2000 deliveries: $(jain 2000)"
    "${P[@]}" -d fa -c "SELECT 'verify: ' || coalesce(string_agg(v, '; '), 'healthy') FROM lonnymq.verify() v"
done

echo "== 2. max_concurrency 3 under 4 consumers"
reset
"${P[@]}" -d fa -c "SELECT 1 FROM lonnymq.channel_set('fq', 'lim', max_concurrency => 3)" >/dev/null
fill lim 300
fill other 300
"$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PORT" -U postgres -c 4 -j 1 -T 10 -f "$D/hold.sql" fa >/dev/null 2>&1 &
bench=$!
"${P[@]}" -d fa -c "DO \$\$
DECLARE v_max int := 0; v int; v_samples int := 0;
BEGIN
    WHILE v_samples < 20000 LOOP
        SELECT count(*) INTO v FROM lonnymq.message m JOIN lonnymq.channel c ON c.id = m.channel_id
        WHERE c.name = 'lim' AND m.locked_until_ms IS NOT NULL;
        v_max := greatest(v_max, v); v_samples := v_samples + 1;
    END LOOP;
    RAISE NOTICE 'most locked at once in lim (max 3): % over % samples', v_max, v_samples;
END \$\$" 2>&1 | sed 's/^.*NOTICE: *//'
wait $bench
"${P[@]}" -d fa -c "SELECT 'lim delivered: ' || count(*) FROM dlog WHERE channel = 'lim'" \
    -c "SELECT 'verify: ' || coalesce(string_agg(v, '; '), 'healthy') FROM lonnymq.verify() v"

echo "== 3. release_interval_ms 50 next to a busy channel"
reset
"${P[@]}" -d fa -c "SELECT 1 FROM lonnymq.channel_set('fq', 'rate', release_interval_ms => 50)" >/dev/null
fill rate 100
fill other 100000
"$PGBIN/pgbench" -n -h 127.0.0.1 -p "$PORT" -U postgres -c 4 -j 1 -T 6 -D batch=1 -f "$D/consume.sql" fa >/dev/null 2>&1
"${P[@]}" -d fa -c "SELECT 'rate delivered: ' || count(*) || ' in ' || round(extract(epoch FROM max(at) - min(at))::numeric, 2) || ' s; smallest gap ' || round(min(gap)::numeric, 1) || ' ms'
    FROM (SELECT at, extract(epoch FROM at - lag(at) OVER (ORDER BY at)) * 1000 AS gap FROM dlog WHERE channel = 'rate') g" \
    -c "SELECT 'verify: ' || coalesce(string_agg(v, '; '), 'healthy') FROM lonnymq.verify() v"
rm -rf "$D"
