-- message_dequeue: scheduling, order within a channel, priority, exact
-- round-robin, fairness against back-dated and priority floods, channel-less
-- turns, concurrency and rate limits, batches, and invalid arguments.
\i test/prelude.psql
-- Dequeues n messages one call at a time and completes each: the sequence of
-- (channel:content) a single worker would see.
-- p_n single dequeues in a row, each delivery completed (unless p_complete
-- is false); the deliveries seen, "channel:content".
CREATE FUNCTION pg_temp.drain(p_queue text, p_n integer, p_complete boolean DEFAULT true) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_seen text[] := '{}';
    v_row record;
BEGIN
    FOR i IN 1 .. p_n LOOP
        SELECT * INTO v_row FROM lonnymq.message_dequeue(p_queue, 60000);
        EXIT WHEN v_row.id IS NULL;
        v_seen := v_seen || (coalesce(v_row.channel, '-') || ':' || convert_from(v_row.content, 'UTF8'));
        IF p_complete THEN
            PERFORM lonnymq.message_complete(v_row.id, v_row.num_attempts);
        END IF;
    END LOOP;
    RETURN array_to_string(v_seen, ' ');
END $$;

-- Nothing queued: an empty result, and wait_hint_ms is NULL.
SELECT count(*) FROM lonnymq.message_dequeue('empty', 1000);
SELECT lonnymq.wait_hint_ms('empty');

-- Scheduling: a future message is not dequeued before its time.
SELECT status FROM lonnymq.message_create('sched', 'a', 'in an hour', delay_ms => 3600000);
SELECT count(*) AS dequeued FROM lonnymq.message_dequeue('sched', 1000);
SELECT lonnymq.wait_hint_ms('sched') BETWEEN 3590000 AND 3600000 AS waits_about_an_hour;
SELECT status FROM lonnymq.message_create('sched', NULL, 'free in an hour', delay_ms => 3600000);
SELECT count(*) AS dequeued FROM lonnymq.message_dequeue('sched', 1000);
-- A back-dated message is ready at once.
SELECT status FROM lonnymq.message_create('sched', 'a', 'yesterday', dequeue_at => now() - interval '1 day');
SELECT lonnymq.wait_hint_ms('sched') AS wait_now;
SELECT pg_temp.drain('sched', 5) AS order_seen;

-- Order within a channel is (dequeue_at, id); one transaction keeps creation order.
BEGIN;
SELECT count(*) FROM (
    SELECT lonnymq.message_create('order', 'a', convert_to('m' || g, 'UTF8')) FROM generate_series(1, 5) g
) s;
COMMIT;
SELECT status FROM lonnymq.message_create('order', 'a', 'earliest', dequeue_at => now() - interval '1 hour');
SELECT pg_temp.drain('order', 10) AS order_seen;

-- Priority: ahead of ordinary ready messages, higher first, FIFO within a level.
SELECT count(*) FROM (
    SELECT lonnymq.message_create('prio', 'a', 'plain-1'),
           lonnymq.message_create('prio', 'a', 'p1-first', priority => 1),
           lonnymq.message_create('prio', 'a', 'p5', priority => 5),
           lonnymq.message_create('prio', 'a', 'p1-second', priority => 1),
           lonnymq.message_create('prio', 'a', 'old', dequeue_at => '2000-01-01'),
           lonnymq.message_create('prio', 'a', 'plain-2')
) s;
SELECT pg_temp.drain('prio', 10) AS order_seen;

-- Exact round-robin over backlogged channels, whatever each one's backlog.
SELECT count(*) FROM lonnymq.message_create_batch('rr',
    ARRAY['a','a','a','a','b','b','b','c','c','c','c','c'],
    ARRAY['1','2','3','4','1','2','3','1','2','3','4','5']::bytea[]);
SELECT pg_temp.drain('rr', 20) AS order_seen;

-- A channel flooded with back-dated and priority messages gets no extra turns.
SELECT count(*) FROM lonnymq.message_create_batch('fair', ARRAY['b','b','b','c','c','c'],
    ARRAY['1','2','3','1','2','3']::bytea[]);
SELECT count(*) FROM (
    SELECT lonnymq.message_create('fair', 'flood', convert_to('old' || g, 'UTF8'), dequeue_at => '1999-01-01')
    FROM generate_series(1, 3) g) s;
SELECT count(*) FROM (
    SELECT lonnymq.message_create('fair', 'flood', convert_to('p' || g, 'UTF8'), priority => 9)
    FROM generate_series(1, 3) g) s;
SELECT pg_temp.drain('fair', 20) AS order_seen;

-- Channel-less messages take their turn as one more channel.
SELECT count(*) FROM lonnymq.message_create_batch('mixed', ARRAY['a','a','a',NULL,NULL,NULL,'b','b'],
    ARRAY['1','2','3','1','2','3','1','2']::bytea[]);
SELECT pg_temp.drain('mixed', 20) AS order_seen;
-- Only channel-less messages: plain FIFO.
SELECT count(*) FROM lonnymq.message_create_batch('plain', NULL, ARRAY['1','2','3']::bytea[]);
SELECT status FROM lonnymq.message_create('plain', NULL, '0', dequeue_at => now() - interval '1 minute');
SELECT pg_temp.drain('plain', 10) AS order_seen;

-- A batch dequeue is n single dequeues: it spreads across the ready channels.
SELECT count(*) FROM lonnymq.message_create_batch('spread', ARRAY['a','a','a','a','b','b','c'],
    ARRAY['1','2','3','4','1','2','1']::bytea[]);
SELECT string_agg(channel || ':' || convert_from(content, 'UTF8'), ' ') AS batch_of_5,
       bool_and(num_attempts = 1) AS first_attempts, bool_or(recovered) AS any_recovered
FROM lonnymq.message_dequeue('spread', 60000, max_messages => 5);
SELECT count(*) AS remaining_batch FROM lonnymq.message_dequeue('spread', 60000, max_messages => 100);

-- A batch that wants more than there are free channels is n single dequeues
-- too, though it takes each channel's share in one claim (quotas): twin
-- queues, one served by a batch of 9, the other by 9 single dequeues, deliver
-- the same messages in the same order and leave the channels in the same
-- turn order. x has plenty, y one message (drained in the first round), z
-- two due and one an hour away (drained in the second). Then the same with a
-- counted channel among them (max_concurrency 3), which serves one message a
-- round, as the singles do.
CREATE FUNCTION pg_temp.twin(p_queue text, p_limited boolean) RETURNS void LANGUAGE sql AS $$
    SELECT lonnymq.channel_set(p_queue, 'w', max_concurrency => 3) WHERE p_limited;
    SELECT count(*) FROM lonnymq.message_create_batch(p_queue,
        ARRAY['x','x','x','x','x','y','z','z','w','w','w','w'],
        ARRAY['x1','x2','x3','x4','x5','y1','z1','z2','w1','w2','w3','w4']::bytea[]);
    SELECT lonnymq.message_create(p_queue, 'z', 'z3', dequeue_at => now() + interval '1 hour');
$$;
-- One batch dequeue of p_n; the deliveries as pg_temp.drain shows them.
CREATE FUNCTION pg_temp.batch(p_queue text, p_n integer) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(coalesce(d.channel, '-') || ':' || convert_from(d.content, 'UTF8'), ' ' ORDER BY d.n)
    FROM lonnymq.message_dequeue(p_queue, 60000, p_n)
         WITH ORDINALITY AS d(id, channel, content, state, num_attempts, dequeue_at, recovered, n)
$$;
CREATE FUNCTION pg_temp.turn_order(p_queue text) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(c.name || CASE WHEN c.ready_ms IS NULL THEN '(none)'
                                     WHEN c.ready_ms > lonnymq._now_ms() + 600000 THEN '(later)' ELSE '' END,
                      ' ' ORDER BY c.ready_ms NULLS LAST, c.turn_seq)
    FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id WHERE q.name = p_queue
$$;
SELECT pg_temp.twin('quota_batch', false), pg_temp.twin('quota_singles', false);
SELECT pg_temp.batch('quota_batch', 9) AS batch_of_9,
       pg_temp.drain('quota_singles', 9, false) AS nine_singles;
SELECT pg_temp.turn_order('quota_batch') AS batch_turns, pg_temp.turn_order('quota_singles') AS singles_turns;
SELECT pg_temp.twin('counted_batch', true), pg_temp.twin('counted_singles', true);
SELECT pg_temp.batch('counted_batch', 9) AS batch_of_9,
       pg_temp.drain('counted_singles', 9, false) AS nine_singles;
SELECT pg_temp.turn_order('counted_batch') AS batch_turns, pg_temp.turn_order('counted_singles') AS singles_turns;
-- Shares that differ: 7 over three busy channels are 3, 2 and 2, and the
-- turns follow each channel's last round (a's third message comes last).
SELECT count(*) FROM unnest(ARRAY['shares_batch', 'shares_singles']) q,
    lonnymq.message_create_batch(q, ARRAY['a','b','c','a','b','c','a','b','c','a'],
        ARRAY['a1','b1','c1','a2','b2','c2','a3','b3','c3','a4']::bytea[]);
SELECT pg_temp.batch('shares_batch', 7) AS batch_of_7,
       pg_temp.drain('shares_singles', 7, false) AS seven_singles;
SELECT pg_temp.turn_order('shares_batch') AS batch_turns, pg_temp.turn_order('shares_singles') AS singles_turns;
-- At REPEATABLE READ no head rises (see _take_head_lock), so a channel
-- drained before its share would come round again, tried between the
-- others' messages: there the batch takes its rounds one at a time, like the
-- singles. a has 2 messages, b 5, c 6; 8 wanted.
SELECT count(*) FROM unnest(ARRAY['rr_batch', 'rr_singles']) q,
    lonnymq.message_create_batch(q, ARRAY['a','b','c','a','b','c','b','c','b','c','b','c','c'],
        ARRAY['a1','b1','c1','a2','b2','c2','b3','c3','b4','c4','b5','c5','c6']::bytea[]);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.batch('rr_batch', 8) AS batch_of_8;
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.drain('rr_singles', 8, false) AS eight_singles;
COMMIT;
SELECT pg_temp.turn_order('rr_batch') AS batch_turns, pg_temp.turn_order('rr_singles') AS singles_turns;
-- max_attempts: x1 comes back deferred out of attempts, due before x2; the
-- next dequeue dead-letters it before delivering x2, in a batch as in single
-- dequeues (no quotas for such a channel: its dead-letter step runs every
-- round; a share claimed in one statement would deliver x1 again).
CREATE FUNCTION pg_temp.dying(p_queue text) RETURNS text LANGUAGE sql AS $$
    SELECT lonnymq.channel_set(p_queue, 'x', max_attempts => 1);
    SELECT count(*) FROM lonnymq.message_create_batch(p_queue, ARRAY['x','x','x','y'], ARRAY['x1','x2','x3','y1']::bytea[]);
    SELECT lonnymq.message_defer(d.id, d.num_attempts, dequeue_at => now() - interval '1 minute')
    FROM lonnymq.message_dequeue(p_queue, 60000, 1) d;
$$;
SELECT pg_temp.dying('dying_batch') AS batch_defer, pg_temp.dying('dying_singles') AS singles_defer;
SELECT pg_temp.batch('dying_batch', 4) AS batch_of_4,
       pg_temp.drain('dying_singles', 4, false) AS four_singles;
SELECT queue, string_agg(convert_from(content, 'UTF8') || ':' || outcome, ' ') AS archived
FROM lonnymq.message_archive WHERE queue IN ('dying_batch', 'dying_singles') GROUP BY queue ORDER BY queue;

-- max_concurrency: a saturated channel is skipped, others are served.
SELECT max_concurrency FROM lonnymq.channel_set('limits', 'one-at-a-time', max_concurrency => 1);
SELECT count(*) FROM lonnymq.message_create_batch('limits', ARRAY['one-at-a-time','one-at-a-time','one-at-a-time','other','other'],
    ARRAY['1','2','3','1','2']::bytea[]);
SELECT string_agg(channel || ':' || convert_from(content, 'UTF8'), ' ') AS all_ready_at_once
FROM lonnymq.message_dequeue('limits', 60000, max_messages => 10);
SELECT channel, locked, ready, max_concurrency FROM lonnymq.channel_stats WHERE queue = 'limits' ORDER BY channel;
-- Completing frees the slot: exactly one more becomes available.
SELECT lonnymq.message_complete(id, num_attempts) FROM lonnymq.messages
WHERE queue = 'limits' AND channel = 'one-at-a-time' AND locked_until IS NOT NULL;
SELECT string_agg(channel || ':' || convert_from(content, 'UTF8'), ' ') AS after_complete
FROM lonnymq.message_dequeue('limits', 60000, max_messages => 10);
-- Lowering the limit to 2 and back: never more than the limit in flight.
SELECT max_concurrency FROM lonnymq.channel_set('limits', 'one-at-a-time', max_concurrency => 2);
SELECT count(*) AS one_more FROM lonnymq.message_dequeue('limits', 60000, max_messages => 10);
SELECT channel, locked, ready FROM lonnymq.channel_stats WHERE queue = 'limits' AND channel = 'one-at-a-time';

-- release_interval_ms: at most one fresh dequeue per interval per channel.
SELECT release_interval_ms FROM lonnymq.channel_set('rate', 'slow', release_interval_ms => 3600000);
SELECT count(*) FROM lonnymq.message_create_batch('rate', ARRAY['slow','slow','fast','fast'],
    ARRAY['1','2','1','2']::bytea[]);
SELECT string_agg(channel || ':' || convert_from(content, 'UTF8'), ' ') AS first_pass
FROM lonnymq.message_dequeue('rate', 7200000, max_messages => 10);
SELECT lonnymq.wait_hint_ms('rate') BETWEEN 3590000 AND 3600000 AS next_release_in_an_hour;
SELECT channel, ready, locked FROM lonnymq.channel_stats WHERE queue = 'rate' ORDER BY channel;

-- A batch that dead-letters a channel's deferred head keeps serving that
-- channel in its place, exactly as single dequeues in a row do: an accounted
-- channel alone ('alone'), and three channels in rotation ('rotation').
SELECT max_attempts FROM lonnymq.channel_set('alone', 'A', max_concurrency => 10, max_attempts => 1);
SELECT status FROM lonnymq.message_create('alone', 'A', 'a1');
SELECT num_attempts FROM lonnymq.message_dequeue('alone', 60000);
SELECT lonnymq.message_defer(id, 1, dequeue_at => now() - interval '1 hour')
FROM lonnymq.messages WHERE queue = 'alone';
SELECT count(*) FROM lonnymq.message_create_batch('alone', ARRAY['A', 'A'], ARRAY['a2', 'a3']::bytea[]);
SELECT string_agg(convert_from(content, 'UTF8'), ' ') AS batch_of_three
FROM lonnymq.message_dequeue('alone', 60000, 3);
SELECT count(*) AS dead_lettered FROM lonnymq.message_archive WHERE queue = 'alone' AND outcome = 'dead';

SELECT max_attempts FROM lonnymq.channel_set('rotation', 'A', max_attempts => 1);
SELECT status FROM lonnymq.message_create('rotation', 'A', 'a1');
SELECT num_attempts FROM lonnymq.message_dequeue('rotation', 60000);
SELECT lonnymq.message_defer(id, 1, dequeue_at => now() - interval '1 hour')
FROM lonnymq.messages WHERE queue = 'rotation';
SELECT count(*) FROM lonnymq.message_create_batch('rotation', ARRAY['A','A','B','B','C','C'],
    ARRAY['a2','a3','b1','b2','c1','c2']::bytea[], dequeue_ats => array_fill(now() - interval '1 minute', ARRAY[6]));
SELECT string_agg(convert_from(content, 'UTF8'), ' ') AS batch_of_three
FROM lonnymq.message_dequeue('rotation', 60000, 3);
SELECT string_agg(convert_from(content, 'UTF8'), ' ') AS next_single
FROM lonnymq.message_dequeue('rotation', 60000, 1);

-- A channel drained by one call that serves more than 256 messages (the head
-- lock budget counts channels, not messages) still leaves the scheduler.
SELECT count(*) FROM lonnymq.message_create_batch('drained', array_fill('one'::text, ARRAY[300]),
                                                  array_fill('x'::bytea, ARRAY[300]));
SELECT count(*) FROM lonnymq.message_dequeue('drained', 60000, 300);
SELECT head_ms IS NULL AS no_head, ready_ms IS NULL AS not_scheduled
FROM lonnymq.channel WHERE queue_id = (SELECT id FROM lonnymq.queue WHERE name = 'drained');

-- Invalid arguments.
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue(NULL, 1000)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue('q', NULL)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue('q', 0)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue('q', -5)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue('q', 1000, 0)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue('q', 1000, 10001)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.message_dequeue('q', 1000, NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.wait_hint_ms(NULL)$$);

SELECT count(*) AS broken_invariants FROM lonnymq.verify();

-- The heap warmed once per session (_warm_heap): not before the first
-- dequeue, once in it, never again in the session, and again after the
-- transaction that warmed it rolled back (the setting went with it).
-- (Function counts of this transaction only: none are pending in a fresh
-- session, and pg_stat_force_next_flush, PostgreSQL 15 on, empties them at
-- the next idle.)
\c
SELECT current_setting('lonnymq.heap', true) IS NULL AS fresh_session_cold;
BEGIN;
SET LOCAL track_functions = 'all';
SELECT count(*) FROM lonnymq.message_dequeue('no such queue', 1000);
SELECT count(*) FROM lonnymq.message_dequeue('rotation', 60000, 2);
SELECT count(*) FROM lonnymq.message_dequeue('no such queue', 1000);
SELECT calls AS warmed FROM pg_stat_xact_user_functions WHERE funcname = '_warm_heap';
SELECT current_setting('lonnymq.heap', true) AS after_dequeues;
ROLLBACK;
SELECT current_setting('lonnymq.heap', true) IS DISTINCT FROM 'warm' AS rolled_back_cold;
SELECT pg_stat_force_next_flush();
BEGIN;
SET LOCAL track_functions = 'all';
SELECT count(*) FROM lonnymq.message_dequeue('no such queue', 1000);
SELECT count(*) FROM lonnymq.message_dequeue('no such queue', 1000);
SELECT calls AS warmed_again FROM pg_stat_xact_user_functions WHERE funcname = '_warm_heap';
COMMIT;
SELECT current_setting('lonnymq.heap', true) AS committed;
SELECT pg_stat_force_next_flush();
BEGIN;
SET LOCAL track_functions = 'all';
SELECT count(*) FROM lonnymq.message_dequeue('no such queue', 1000);
SELECT count(*) AS warmed_later FROM pg_stat_xact_user_functions WHERE funcname = '_warm_heap';
COMMIT;
