-- Hostile input: array shapes, numeric bounds, SQLSTATEs, the scope of dedup
-- and idempotency keys. Every bad call is 22023 and changes nothing.
-- (test/system/test_hostile_calls.py makes random sequences of such calls; the
-- schema the extension installs into, and look-alike operators, are tried by
-- both install paths in test/system/test_install.py.)
\i test/prelude.psql

-- Arrays: every array argument of every batch function must be one-dimensional
-- with lower bound 1. Before, '[0:1]' channels paired tenant A's dedup key and
-- content with tenant B's channel, two-dimensional dedup keys were ignored, a
-- '[2:2]' dequeue_ats became "now", and a two-dimensional complete was 0A000.
SELECT * FROM lonnymq.message_create('arr', 'a', 'seed');
SELECT id, num_attempts FROM lonnymq.message_dequeue('arr', 60000);
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', '[0:1]={tenant-a,tenant-b}'::text[], ARRAY['for a', 'for b']::bytea[], dedup_keys => ARRAY['ka', 'kb'])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', ARRAY['a', 'b'], '[0:1]={x,y}'::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', ARRAY['a'], ARRAY['x']::bytea[], dedup_keys => ARRAY[['k']])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', ARRAY['a'], ARRAY['x']::bytea[], dedup_keys => '[2:2]={k}'::text[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', ARRAY['a'], ARRAY['x']::bytea[], dequeue_ats => '[2:2]={2030-01-01}'::timestamptz[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', ARRAY['a'], ARRAY['x']::bytea[], dequeue_ats => ARRAY[[now()]])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('arr', ARRAY[['a']], ARRAY['x']::bytea[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(ARRAY[[1]]::bigint[], ARRAY[[1]]::bigint[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch('[0:0]={1}'::bigint[], ARRAY[1]::bigint[])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(ARRAY[1]::bigint[], '[5:5]={1}'::bigint[])$$);
SELECT pg_temp.state() = :'before' AS nothing_changed;
-- Well-formed arrays still work, empty ones included.
SELECT * FROM lonnymq.message_complete_batch(ARRAY[1]::bigint[], ARRAY[1]::bigint[]);
SELECT count(*) FROM lonnymq.message_complete_batch('{}'::bigint[], '{}'::bigint[]);

-- Numeric bounds: nothing a caller can pass makes the arithmetic overflow
-- (22003). release_interval_ms had no upper bound: at bigint max the first
-- turn overflowed and every dequeue of the queue failed for every tenant.
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.channel_set('num', 'slow', release_interval_ms => 9223372036854775807)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('num', 'slow', release_interval_ms => 31557600000001)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_dequeue('num', 31557600000001)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_heartbeat(1, 1, 31557600000001)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_defer(1, 1, delay_ms => 9223372036854775807)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_defer(1, 1, dequeue_at => '294276-12-31', delay_ms => 315576000000000)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('num', 'c', 'x', dequeue_at => '294276-12-31', delay_ms => 315576000000000)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('num', 'c', 'x', delay_ms => 9223372036854775807)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create('num', 'c', 'x', priority => 2147483647)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_dequeue('num', 1000, 2147483647)$$);
SELECT pg_temp.state() = :'before' AS nothing_changed;
-- Every limit at its largest accepted value: the channel is served, once,
-- then waits its (1000-year) interval; nothing overflows.
SELECT name, max_concurrency, release_interval_ms, max_size, max_attempts
FROM lonnymq.channel_set('num', 'slow', max_concurrency => 2147483647, release_interval_ms => 31557600000000,
                         max_size => 9223372036854775807, max_attempts => 2147483647);
SELECT status FROM lonnymq.message_create_batch('num', ARRAY['slow', 'slow'], ARRAY['s1', 's2']::bytea[]);
SELECT convert_from(content, 'UTF8') AS served FROM lonnymq.message_dequeue('num', 31557600000000, 10000);
SELECT count(*) AS served_again FROM lonnymq.message_dequeue('num', 1000, 10);
SELECT lonnymq.wait_hint_ms('num') > 31000000000000 AS waits_its_interval;
SELECT lonnymq.message_heartbeat(id, num_attempts, 31557600000000) FROM lonnymq.messages
WHERE queue = 'num' AND locked_until IS NOT NULL;
SELECT lonnymq.channel_sweep(2147483647) >= 0 AS sweeps;
SELECT count(*) AS broken_invariants FROM lonnymq.verify();

-- SQLSTATEs: an archive_prune age beyond every timestamp was 22008; it is
-- simply older than anything archived. A mixed-sign age whose parts leave the
-- range of timestamps is a bad argument, like a negative one.
SELECT lonnymq.archive_prune('6800 years') AS nothing_that_old;
SELECT lonnymq.archive_prune('6000 years') AS nothing_that_old_either;
SELECT pg_temp.try($$SELECT lonnymq.archive_prune('100000 years -36000000 days')$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_prune('1 day -1 second')$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_prune('-1 month 40 days')$$);
SELECT pg_temp.try($$SELECT lonnymq.maintenance_schedule(archive_retention => '100000 years -36000000 days')$$);
-- Ages up to the largest interval there is.
SELECT lonnymq.archive_prune('300000 years') AS nothing_that_old;
SELECT lonnymq.archive_prune('178000000 years') AS nothing_that_old;
-- A dequeue time past the year 100000 is refused, so none can make the views
-- unreadable.
SELECT pg_temp.try($$SELECT lonnymq.message_create('far', NULL, 'x', dequeue_at => '294276-12-31 00:00:00+00')$$);
SELECT count(v::text) AS readable FROM lonnymq.messages v;

-- Dedup keys are scoped to the channel (a tenant): mallory's 'order-42' no
-- longer answers acme's create with mallory's id. Within a channel, and among
-- the queue's channel-less messages, a live duplicate still wins.
SELECT status FROM lonnymq.message_create('dd', 'mallory', 'm', dedup_key => 'order-42');
SELECT status FROM lonnymq.message_create('dd', 'acme', 'a', dedup_key => 'order-42');
SELECT status, id = (SELECT id FROM lonnymq.messages WHERE content = 'a') AS acme_own
FROM lonnymq.message_create('dd', 'acme', 'a again', dedup_key => 'order-42');
SELECT status FROM lonnymq.message_create('dd', NULL, 'n', dedup_key => 'order-42');
SELECT status, id = (SELECT id FROM lonnymq.messages WHERE content = 'n') AS channelless_own
FROM lonnymq.message_create('dd', NULL, 'n again', dedup_key => 'order-42');
-- The same through a batch, a capped channel, and a batch into several channels.
SELECT * FROM lonnymq.channel_set('dd', 'capped', max_size => 10) \gset ignored_
SELECT status FROM lonnymq.message_create('dd', 'capped', 'c', dedup_key => 'order-42');
SELECT b.status, b.id = m.id AS same_as_live
FROM lonnymq.message_create_batch('dd', ARRAY['acme', 'mallory', 'capped', 'new'],
                                  ARRAY['a3', 'm3', 'c3', 'n3']::bytea[],
                                  dedup_keys => ARRAY['order-42', 'order-42', 'order-42', 'order-42']) b
LEFT JOIN lonnymq.messages m ON m.id = b.id AND m.content IN ('a', 'm', 'c');
SELECT channel, count(*) FROM lonnymq.messages WHERE queue = 'dd' GROUP BY channel ORDER BY channel;

-- Idempotency keys are scoped to the queue and the channels of the batch:
-- mallory's key does not turn acme's batch into duplicate_batch; acme's own
-- retry still is one, with acme's ids.
SELECT status FROM lonnymq.message_create_batch('idem', ARRAY['mallory'], ARRAY['m']::bytea[],
                                                idempotency_key => 'nightly');
SELECT status FROM lonnymq.message_create_batch('idem', ARRAY['acme', 'acme'], ARRAY['a1', 'a2']::bytea[],
                                                idempotency_key => 'nightly');
SELECT b.status, m.channel, convert_from(m.content, 'UTF8') AS content
FROM lonnymq.message_create_batch('idem', ARRAY['acme', 'acme'], ARRAY['a1', 'a2']::bytea[],
                                  idempotency_key => 'nightly') b
JOIN lonnymq.messages m ON m.id = b.id ORDER BY m.id;
-- The scope is the set of channels, whatever their order or repetition.
SELECT DISTINCT status FROM lonnymq.message_create_batch('idem', ARRAY['b', 'a', 'b'], ARRAY['x', 'y', 'z']::bytea[],
                                                         idempotency_key => 'mixed');
SELECT DISTINCT status FROM lonnymq.message_create_batch('idem', ARRAY['a', 'b', 'a'], ARRAY['x', 'y', 'z']::bytea[],
                                                         idempotency_key => 'mixed');
SELECT count(*) AS live FROM lonnymq.messages WHERE queue = 'idem';
SELECT count(*) AS broken_invariants FROM lonnymq.verify();

-- DROP EXTENSION deletes every message with the extension's tables. The
-- guard of docs/upgrades.md (a view of the caller's own on lonnymq.message) makes a plain
-- DROP EXTENSION refuse; nothing is lost.
SELECT count(*) AS live_before FROM lonnymq.messages;
CREATE VIEW public.lonnymq_drop_guard AS SELECT m.id FROM lonnymq.message m WHERE false;
SELECT pg_temp.try('DROP EXTENSION lonnymq');
SELECT count(*) AS live_after FROM lonnymq.messages;
DROP VIEW public.lonnymq_drop_guard;
