-- The inspection views, wait_hint_ms, and verify() catching each kind of
-- broken invariant (broken here on purpose, as superuser).
\i test/prelude.psql

-- Two messages delivered first (the only two), then more queued behind them.
SELECT count(*) FROM lonnymq.message_create_batch('shop', ARRAY['b', NULL], ARRAY['urgent', '4']::bytea[]);
SELECT count(*) FROM lonnymq.message_dequeue('shop', 60000, 2);
SELECT count(*) FROM lonnymq.message_create_batch('shop', ARRAY['a','a','b'], ARRAY['1','2','3']::bytea[]);
SELECT status FROM lonnymq.message_create('shop', 'a', 'later', delay_ms => 3600000);
SELECT status FROM lonnymq.message_create('shop', 'b', 'vip', priority => 2);
SELECT status FROM lonnymq.message_create('other', NULL, 'x');

-- Column names and shapes are part of the contract.
SELECT id, queue, channel, convert_from(content, 'UTF8') AS content, state, num_attempts,
       locked_until IS NOT NULL AS locked, priority, dedup_key
FROM lonnymq.messages ORDER BY id;
SELECT queue, channel, ready, scheduled, locked, max_concurrency, release_interval_ms, max_size, max_attempts,
       oldest_ready_ms IS NOT NULL AS has_oldest
FROM lonnymq.channel_stats ORDER BY queue, channel NULLS LAST;
SELECT * FROM lonnymq.queue_stats ORDER BY queue;
SELECT lonnymq.message_fail(id, num_attempts, 'x') FROM lonnymq.messages WHERE locked_until IS NOT NULL;
SELECT queue, archived FROM lonnymq.queue_stats ORDER BY queue;
SELECT column_name FROM information_schema.columns
WHERE table_schema = 'lonnymq' AND table_name = 'message_archive' ORDER BY ordinal_position;

-- wait_hint_ms: 0 with ready work; the nearest scheduled time otherwise.
SELECT lonnymq.wait_hint_ms('shop') AS ready_now;
SELECT count(*) FROM lonnymq.message_dequeue('shop', 7200000, 100);
SELECT lonnymq.wait_hint_ms('shop') BETWEEN 3500000 AND 3600000 AS next_in_an_hour;
SELECT lonnymq.wait_hint_ms('no-such-queue') IS NULL AS unknown_queue;


-- wait_begin: the hint of wait_hint_ms, with the session announced as waiting
-- (the waiting lock of the queue's slot, shared, held across transactions)
-- until wait_end. Producers meeting it notify: iso_wake.spec.
CREATE TEMP VIEW announced AS
SELECT objid::int AS slot FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND mode = 'ShareLock' AND classid::bigint = 1819242103;
SELECT lonnymq.wait_begin('shop') BETWEEN 3500000 AND 3600000 AS next_in_an_hour;
SELECT lonnymq.wait_begin('no-such-queue') IS NULL AS unknown_queue_waits_for_a_notify;
-- shop-33 shares shop's slot: one lock entry for both, held until both end.
SELECT lonnymq._wait_slot('shop-33') = lonnymq._wait_slot('shop') AS same_slot,
       lonnymq._wait_slot('no-such-queue') <> lonnymq._wait_slot('shop') AS other_slot;
SELECT lonnymq.wait_begin('shop-33') IS NULL AS unknown_queue_waits_for_a_notify;
SELECT array_agg(slot ORDER BY slot) = ARRAY[lonnymq._wait_slot('no-such-queue'), lonnymq._wait_slot('shop')]
       AS one_entry_per_slot
FROM announced;
SELECT lonnymq.wait_end('shop'), lonnymq.wait_end('no-such-queue');
SELECT array_agg(slot) = ARRAY[lonnymq._wait_slot('shop-33')] AS shop_33_still_waits FROM announced;
SELECT lonnymq.wait_end('shop-33');
SELECT lonnymq.wait_end('shop');  -- (nothing left to end: nothing happens)
SELECT count(*) AS none_left FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
-- A waiter on 2,000 queues holds one entry per slot, 64 at most, and a
-- producer into 2,000 queues in one transaction too (producing locks, until
-- commit): PostgreSQL's shared lock table is not theirs to fill
-- (test/system/test_lock_table.py runs both on a small one).
SELECT count(*) FILTER (WHERE h IS NULL) AS nothing_queued
FROM generate_series(1, 2000) i, lonnymq.wait_begin('many-' || i) h;
SELECT count(*) AS slots_held FROM announced;
SELECT count(lonnymq.wait_end('many-' || i)) AS ended FROM generate_series(1, 2000) i;
SELECT count(*) AS none_left FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
BEGIN;
SELECT count(*) AS created FROM generate_series(1, 2000) i, lonnymq.message_create('many-' || i, NULL, 'x') m
WHERE m.status = 'created';
SELECT count(*) AS producing_slots FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid::bigint = 1819242096;
ROLLBACK;
SELECT lonnymq.wait_begin(NULL);
SELECT count(*) AS healthy FROM lonnymq.verify();

-- verify() names each broken invariant.
BEGIN;
UPDATE lonnymq.channel SET locked_count = locked_count + 1 WHERE name = 'b';
SELECT * FROM lonnymq.verify() ORDER BY 1;
ROLLBACK;
BEGIN;
SELECT max_concurrency FROM lonnymq.channel_set('shop', 'b', max_concurrency => 5);
SELECT locked_count FROM lonnymq.channel WHERE name = 'b';
UPDATE lonnymq.channel SET locked_count = locked_count - 1 WHERE name = 'b';
SELECT * FROM lonnymq.verify() ORDER BY 1;
ROLLBACK;
BEGIN;
UPDATE lonnymq.channel SET ready_ms = NULL WHERE name = 'a';
SELECT regexp_replace(v, '[0-9]{6,}', 'N', 'g') FROM lonnymq.verify() v ORDER BY 1;
ROLLBACK;
BEGIN;
-- A message nobody can reach: the head is later than it and no hint covers it.
INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms)
SELECT c.queue_id, c.id, 'stranded', 0 FROM lonnymq.channel c WHERE c.name = 'a';
SELECT regexp_replace(v, '[0-9]{6,}', 'N', 'g') FROM lonnymq.verify() v ORDER BY 1;
ROLLBACK;
BEGIN;
DELETE FROM lonnymq.channel WHERE name = 'b';
SELECT regexp_replace(v, '(message|channel) [0-9]+', '\1 N', 'g') FROM lonnymq.verify() v ORDER BY 1;
ROLLBACK;
BEGIN;
SELECT max_size FROM lonnymq.channel_set('shop', 'a', max_size => 10);
UPDATE lonnymq.channel_admission SET admitted = admitted + 5;
SELECT * FROM lonnymq.verify() ORDER BY 1;
DELETE FROM lonnymq.channel_admission;
SELECT * FROM lonnymq.verify() ORDER BY 1;
ROLLBACK;
SELECT count(*) AS healthy_again FROM lonnymq.verify();
