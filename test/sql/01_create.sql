-- message_create and message_create_batch: statuses, ordering, dedup,
-- idempotency, and every invalid argument (22023, nothing changed).
\i test/prelude.psql

-- Happy path: a channel message and a channel-less one.
SELECT * FROM lonnymq.message_create('emails', 'tenant-a', 'hello');
SELECT * FROM lonnymq.message_create(queue => 'emails', channel => NULL, content => '\x00ff'::bytea);
SELECT lonnymq.message_create('emails', 'tenant-a', 'composite');
SELECT id, queue, channel, content, state, num_attempts, locked_until IS NULL AS pending,
       dequeue_at <= now() + interval '1 second' AS due
FROM lonnymq.messages ORDER BY id;
-- Channels are created on first use, implicitly.
SELECT queue, channel, ready, scheduled, locked FROM lonnymq.channel_stats ORDER BY queue, channel NULLS LAST;

-- Scheduling arguments: dequeue_at, delay_ms, both (they add up).
SELECT * FROM lonnymq.message_create('emails', 'tenant-b', 'later', dequeue_at => '2100-01-01 00:00:00+00');
SELECT * FROM lonnymq.message_create('emails', 'tenant-b', 'delayed', delay_ms => 60000);
SELECT * FROM lonnymq.message_create('emails', 'tenant-b', 'both', dequeue_at => '2100-01-01 00:00:00+00', delay_ms => 1500);
SELECT id, dequeue_at AT TIME ZONE 'UTC' AS dequeue_at_utc FROM lonnymq.messages WHERE id IN (4, 6) ORDER BY id;
SELECT (dequeue_at - created_at) BETWEEN interval '59 seconds' AND interval '70 seconds' AS delayed_a_minute
FROM lonnymq.messages WHERE id = 5;

-- Initial state is stored as given.
SELECT * FROM lonnymq.message_create('emails', 'tenant-c', 'with state', state => 'checkpoint');
SELECT state FROM lonnymq.messages WHERE id = 7;

-- Deduplication, per channel: a live message of the same channel with the same key
-- wins (another channel's does not); once it is gone the key is free.
SELECT * FROM lonnymq.message_create('emails', 'tenant-a', 'first', dedup_key => 'k1');
SELECT * FROM lonnymq.message_create('emails', 'tenant-b', 'second', dedup_key => 'k1');
SELECT * FROM lonnymq.message_create('other-queue', 'tenant-a', 'other queue', dedup_key => 'k1');
SELECT count(*) AS live_with_k1 FROM lonnymq.messages WHERE dedup_key = 'k1';
SELECT lonnymq.message_cancel(8);
SELECT * FROM lonnymq.message_create('emails', 'tenant-b', 'third', dedup_key => 'k1');
SELECT * FROM lonnymq.message_create('emails', 'tenant-a', 'fourth', dedup_key => 'k1');

-- Priority: "run now", placed ahead; dequeue_at shows the creation time.
SELECT * FROM lonnymq.message_create('emails', 'tenant-a', 'urgent', priority => 3);
SELECT id, priority, abs(extract(epoch FROM dequeue_at - now())) < 60 AS shown_as_now
FROM lonnymq.messages WHERE content = 'urgent';

-- Batches: one row per element in input order; channels may be NULL.
SELECT * FROM lonnymq.message_create_batch('batchq', ARRAY['x', 'y', NULL, 'x'],
    ARRAY['b1', 'b2', 'b3', 'b4']::bytea[]);
SELECT id, channel, convert_from(content, 'UTF8') AS content FROM lonnymq.messages
WHERE queue = 'batchq' ORDER BY id;
-- Per-element dedup keys and schedules.
SELECT * FROM lonnymq.message_create_batch('batchq', ARRAY['x', 'x', 'x'], ARRAY['d1', 'd2', 'd3']::bytea[],
    dequeue_ats => ARRAY[NULL, now() + interval '1 day', NULL]::timestamptz[],
    dedup_keys => ARRAY['dk-1', NULL, 'dk-1']);
SELECT count(*) FILTER (WHERE dequeue_at > now() + interval '23 hours') AS tomorrow FROM lonnymq.messages
WHERE queue = 'batchq';
-- channels => NULL means every message is channel-less.
SELECT * FROM lonnymq.message_create_batch('batchq', NULL, ARRAY['n1', 'n2']::bytea[]);
-- An empty batch is valid and creates nothing.
SELECT count(*) FROM lonnymq.message_create_batch('batchq', ARRAY[]::text[], ARRAY[]::bytea[]);

-- Idempotency: a repeated key creates nothing and names the first call's ids.
SELECT * FROM lonnymq.message_create_batch('batchq', ARRAY['i', 'i'], ARRAY['i1', 'i2']::bytea[],
    idempotency_key => 'load-2026-11-21');
SELECT * FROM lonnymq.message_create_batch('batchq', ARRAY['i', 'i'], ARRAY['i1', 'i2']::bytea[],
    idempotency_key => 'load-2026-11-21');
SELECT count(*) AS messages_in_i FROM lonnymq.messages WHERE channel = 'i';
-- The key is per queue.
SELECT * FROM lonnymq.message_create_batch('batchq2', ARRAY['i'], ARRAY['i1']::bytea[],
    idempotency_key => 'load-2026-11-21');

-- Invalid arguments: SQLSTATE 22023, a clear message, and no change at all.
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create(NULL, 'c', 'x')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('', 'c', 'x')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', '', 'x')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create(repeat('q', 257), 'c', 'x')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', delay_ms => -1)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', delay_ms => NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dequeue_at => 'infinity')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dequeue_at => '-infinity')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dequeue_at => '294276-12-31 00:00:00+00')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dequeue_at => '99999-12-31 00:00:00+00', delay_ms => 315576000000000)$$);
-- The bound itself is a valid dequeue time; one millisecond past it is not
-- (rolled back: the fingerprint below must not see it).
BEGIN;
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dequeue_at => '99999-12-31 23:59:59.999+00', delay_ms => 1)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dequeue_at => '99999-12-31 23:59:59.999+00', delay_ms => 2)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], ARRAY['x']::bytea[], dequeue_ats => ARRAY['100000-01-01 00:00:00+00']::timestamptz[])$$);
ROLLBACK;
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], ARRAY['x']::bytea[], dequeue_ats => ARRAY['200000-01-01']::timestamptz[])$$);
-- An element at the bound itself (valid) does not hide a later one past it.
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a', 'b'], ARRAY['x', 'y']::bytea[], dequeue_ats => ARRAY['100000-01-01 00:00:00+00', '200000-01-01']::timestamptz[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', priority => -1)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', priority => 40000)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', priority => 1, delay_ms => 5)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('q', 'c', 'x', dedup_key => '')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a', 'b'], ARRAY['x']::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], ARRAY[NULL]::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a', 'b'], ARRAY['x', 'y']::bytea[], dequeue_ats => ARRAY[now()])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a', 'b'], ARRAY['x', 'y']::bytea[], dedup_keys => ARRAY['k'])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a', ''], ARRAY['x', 'y']::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], ARRAY['x']::bytea[], dequeue_ats => ARRAY['infinity']::timestamptz[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], ARRAY['x']::bytea[], idempotency_key => '')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY[['a']], ARRAY[['x']]::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch(NULL, ARRAY['a'], ARRAY['x']::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch(pg_catalog.repeat('q', 257), ARRAY['a'], ARRAY['x']::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('q', ARRAY['a'], ARRAY['x']::bytea[], idempotency_key => pg_catalog.repeat('k', 513))$$);
SELECT pg_temp.state() = :'before' AS nothing_changed;

SELECT count(*) AS broken_invariants FROM lonnymq.verify();
