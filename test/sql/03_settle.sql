-- complete, complete_batch, defer, heartbeat, fail, cancel: every status,
-- the fencing token, lock expiry and recovery, max_attempts dead-lettering.
\i test/prelude.psql
-- Sleeps just past a lock of p_ms milliseconds: lock expiry without timing races.
CREATE FUNCTION pg_temp.expire(p_ms integer) RETURNS void LANGUAGE sql AS $$
    SELECT pg_sleep((p_ms + 20) / 1000.0)
$$;

SELECT count(*) FROM lonnymq.message_create_batch('work', ARRAY['a','a','a','b','b','b'],
    ARRAY['a1','a2','a3','b1','b2','b3']::bytea[]);

-- complete: completed, then not_found; a pending (undelivered) message is state_invalid.
SELECT id, channel, num_attempts FROM lonnymq.message_dequeue('work', 60000);
SELECT lonnymq.message_complete(1, 1);
SELECT lonnymq.message_complete(1, 1);
SELECT lonnymq.message_complete(2, 0 + 1) AS pending_message;
SELECT lonnymq.message_complete(999, 1) AS unknown_id;
-- A wrong attempt count is refused and changes nothing.
SELECT id, num_attempts FROM lonnymq.message_dequeue('work', 60000);
SELECT pg_temp.state() AS before \gset
SELECT lonnymq.message_complete(4, 2) AS wrong_attempt;
SELECT lonnymq.message_defer(4, 2) AS wrong_attempt;
SELECT lonnymq.message_heartbeat(4, 2, 1000) AS wrong_attempt;
SELECT lonnymq.message_fail(4, 2) AS wrong_attempt;
SELECT pg_temp.state() = :'before' AS nothing_changed;

-- defer: releases the lock and the slot, keeps attempts, saves state.
SELECT status FROM lonnymq.message_create('defer', 'd', 'job');
SELECT status FROM lonnymq.message_create('defer', 'd', 'next');
SELECT id AS job, num_attempts FROM lonnymq.message_dequeue('defer', 60000) \gset
SELECT lonnymq.message_defer(:job, 1, delay_ms => 3600000, state => 'step-1');
SELECT num_attempts, state, locked_until IS NULL AS unlocked, dequeue_at > now() + interval '59 minutes' AS later
FROM lonnymq.messages WHERE id = :job;
SELECT channel, locked, ready, scheduled FROM lonnymq.channel_stats WHERE queue = 'defer';
SELECT lonnymq.message_defer(:job, 1) AS not_locked_any_more;
-- The slot is free again: the next message is served while the job waits.
SELECT convert_from(content, 'UTF8') AS content FROM lonnymq.message_dequeue('defer', 60000);
-- A defer into the past is ready at once, ahead of later messages; a NULL
-- state keeps the saved one.
SELECT lonnymq.message_complete(id, num_attempts) FROM lonnymq.messages WHERE content = 'next';
SELECT status FROM lonnymq.message_create('defer', 'd', 'after');
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms - 7200000 WHERE id = :job;  -- test-only time travel
SELECT status FROM lonnymq.message_create('defer', 'd', 'hint');  -- its hint makes dequeue re-read the head
SELECT convert_from(content, 'UTF8') AS content, num_attempts, state FROM lonnymq.message_dequeue('defer', 60000);
SELECT lonnymq.message_defer(:job, 2, dequeue_at => now() - interval '1 day');
SELECT convert_from(content, 'UTF8') AS content, num_attempts, state FROM lonnymq.message_dequeue('defer', 60000);

-- heartbeat: extends the current attempt's lock, never shortens it.
SELECT locked_until AS lock_before FROM lonnymq.messages WHERE id = :job \gset
SELECT lonnymq.message_heartbeat(:job, 3, 1);
SELECT locked_until = :'lock_before' AS not_shortened FROM lonnymq.messages WHERE id = :job;
SELECT lonnymq.message_heartbeat(:job, 3, 7200000);
SELECT locked_until > now() + interval '119 minutes' AS extended FROM lonnymq.messages WHERE id = :job;
SELECT lonnymq.message_heartbeat(id, 1, 1000) AS pending_message FROM lonnymq.messages WHERE content = 'after';
SELECT lonnymq.message_heartbeat(999, 1, 1000) AS unknown_id;

-- fail: archives the delivery with its error and frees the slot.
SELECT lonnymq.message_fail(:job, 3, 'boom');
SELECT queue, channel, convert_from(content, 'UTF8') AS content, state, num_attempts, outcome, error
FROM lonnymq.message_archive WHERE message_id = :job;
SELECT lonnymq.message_fail(:job, 3) AS again;
SELECT channel, locked FROM lonnymq.channel_stats WHERE queue = 'defer';

-- cancel: pending messages only.
SELECT id AS pending FROM lonnymq.messages WHERE content = 'after' \gset
SELECT lonnymq.message_cancel(:pending);
SELECT lonnymq.message_cancel(:pending);
SELECT id AS flying FROM lonnymq.message_dequeue('defer', 60000) \gset
SELECT lonnymq.message_cancel(:flying) AS in_flight;
SELECT count(*) AS left_in_defer FROM lonnymq.messages WHERE queue = 'defer';

-- Lock expiry: the next dequeue redelivers, recovered, with the next attempt;
-- the slot stays counted; the old attempt can no longer settle.
SELECT max_concurrency FROM lonnymq.channel_set('expiry', 'c', max_concurrency => 1);
SELECT status FROM lonnymq.message_create('expiry', 'c', 'e1');
SELECT status FROM lonnymq.message_create('expiry', 'c', 'e2');
SELECT convert_from(content, 'UTF8') AS content, num_attempts, recovered FROM lonnymq.message_dequeue('expiry', 1);
SELECT pg_temp.expire(1);
SELECT channel, locked, ready FROM lonnymq.channel_stats WHERE queue = 'expiry';
SELECT lonnymq.wait_hint_ms('expiry') AS wait_recovery;
SELECT convert_from(content, 'UTF8') AS content, num_attempts, recovered
FROM lonnymq.message_dequeue('expiry', 60000, max_messages => 5);
SELECT id AS e1 FROM lonnymq.messages WHERE content = 'e1' \gset
SELECT lonnymq.message_complete(:e1, 1) AS stale_complete;
SELECT lonnymq.message_defer(:e1, 1) AS stale_defer;
SELECT lonnymq.message_heartbeat(:e1, 1, 60000) AS stale_heartbeat;
SELECT lonnymq.message_complete(:e1, 2) AS current_complete;
SELECT channel, locked, ready FROM lonnymq.channel_stats WHERE queue = 'expiry';
-- An expired lock that was not redelivered yet may still be settled by its holder.
SELECT convert_from(content, 'UTF8') AS content, num_attempts FROM lonnymq.message_dequeue('expiry', 1);
SELECT pg_temp.expire(1);
SELECT lonnymq.message_complete(id, 1) AS late_but_current FROM lonnymq.messages WHERE content = 'e2';

-- max_attempts: a message whose next delivery would exceed it is dead-lettered.
SELECT max_attempts FROM lonnymq.channel_set('poison', 'p', max_attempts => 2);
SELECT status FROM lonnymq.message_create('poison', 'p', 'crashes');
SELECT status FROM lonnymq.message_create('poison', 'p', 'fine');
SELECT convert_from(content, 'UTF8') AS content, num_attempts FROM lonnymq.message_dequeue('poison', 1);
SELECT pg_temp.expire(1);
SELECT convert_from(content, 'UTF8') AS content, num_attempts, recovered FROM lonnymq.message_dequeue('poison', 1);
SELECT pg_temp.expire(1);
-- Attempt 3 would exceed 2: dead-lettered; the rest of the channel keeps flowing.
SELECT convert_from(content, 'UTF8') AS content, num_attempts, recovered FROM lonnymq.message_dequeue('poison', 60000);
SELECT convert_from(content, 'UTF8') AS content, outcome, num_attempts, error FROM lonnymq.message_archive
WHERE queue = 'poison';
SELECT channel, locked, ready FROM lonnymq.channel_stats WHERE queue = 'poison';
-- A deferred message out of attempts is dead-lettered when its turn comes.
SELECT status FROM lonnymq.message_create('poison', 'p', 'defers');
SELECT id AS d, num_attempts AS n FROM lonnymq.message_dequeue('poison', 60000) \gset
SELECT lonnymq.message_defer(:d, :n);
SELECT id AS d, num_attempts AS n FROM lonnymq.message_dequeue('poison', 60000) \gset
SELECT lonnymq.message_defer(:d, :n);
SELECT count(*) AS delivered FROM lonnymq.message_dequeue('poison', 60000);
SELECT convert_from(content, 'UTF8') AS content, outcome, num_attempts FROM lonnymq.message_archive
WHERE queue = 'poison' ORDER BY id;

-- The same with an accounted channel (a concurrency limit): the dead letter
-- gives its slot back.
SELECT max_attempts FROM lonnymq.channel_set('poison2', 'p', max_concurrency => 1, max_attempts => 1);
SELECT status FROM lonnymq.message_create('poison2', 'p', 'crashes');
SELECT status FROM lonnymq.message_create('poison2', 'p', 'next');
SELECT convert_from(content, 'UTF8') AS content, num_attempts FROM lonnymq.message_dequeue('poison2', 1);
SELECT pg_temp.expire(1);
SELECT channel, locked, ready FROM lonnymq.channel_stats WHERE queue = 'poison2';
SELECT convert_from(content, 'UTF8') AS content, num_attempts, recovered FROM lonnymq.message_dequeue('poison2', 60000);
SELECT outcome, num_attempts FROM lonnymq.message_archive WHERE queue = 'poison2';
SELECT name, locked_count FROM lonnymq.channel c WHERE name = 'p' AND queue_id = (SELECT id FROM lonnymq.queue WHERE name = 'poison2');

-- A shared channel that gets a limit while messages are in flight counts them.
SELECT count(*) FROM lonnymq.message_create_batch('switch', ARRAY['s','s','s'], ARRAY['1','2','3']::bytea[]);
SELECT count(*) AS in_flight FROM lonnymq.message_dequeue('switch', 60000, 2);
SELECT max_concurrency FROM lonnymq.channel_set('switch', 's', max_concurrency => 2);
SELECT locked_count FROM lonnymq.channel WHERE name = 's';
SELECT count(*) AS saturated FROM lonnymq.message_dequeue('switch', 60000);
SELECT lonnymq.message_complete(id, num_attempts) FROM lonnymq.messages WHERE queue = 'switch' AND content = '1';
SELECT convert_from(content, 'UTF8') AS freed_slot FROM lonnymq.message_dequeue('switch', 60000);
SELECT max_concurrency FROM lonnymq.channel_set('switch', 's');
SELECT locked_count FROM lonnymq.channel WHERE name = 's';

-- complete_batch: one status per element, in input order.
SELECT count(*) FROM lonnymq.message_create_batch('batch', ARRAY['x','y','x'], ARRAY['1','2','3']::bytea[]);
SELECT count(*) FROM lonnymq.message_dequeue('batch', 60000, 3);
SELECT * FROM lonnymq.message_complete_batch(
    (SELECT array_agg(id ORDER BY id) || ARRAY[999::bigint] FROM lonnymq.messages WHERE queue = 'batch'),
    ARRAY[1, 2, 1, 1]::bigint[]) ORDER BY 1;
SELECT count(*) AS still_live FROM lonnymq.messages WHERE queue = 'batch';
SELECT channel, locked FROM lonnymq.channel_stats WHERE queue = 'batch' ORDER BY channel;

-- complete_batch mixes every kind of message and behaves as completes in input
-- order: an accounted channel (its slot comes back), an archiving channel (the
-- completed copy is kept), a shared channel and a channel-less message (just
-- deleted); a repeated id with a stale attempt before the current one.
SELECT max_concurrency FROM lonnymq.channel_set('mixed', 'capped', max_concurrency => 5);
SELECT retain_completed FROM lonnymq.channel_set('mixed', 'kept', retain_completed => true);
SELECT count(*) FROM lonnymq.message_create_batch('mixed', ARRAY['capped', 'kept', 'plain', NULL],
                                                  ARRAY['c', 'k', 'p', 'n']::bytea[]);
CREATE TEMP TABLE mixed AS SELECT * FROM lonnymq.message_dequeue('mixed', 60000, 4);
SELECT count(*) AS delivered FROM mixed;
-- Second delivery of 'p' so that attempt 1 is stale.
SELECT lonnymq.message_defer(id, 1) FROM mixed WHERE content = 'p';
SELECT count(*) AS redelivered FROM lonnymq.message_dequeue('mixed', 60000, 1);
SELECT convert_from(m.content, 'UTF8') AS content, r.status
FROM lonnymq.message_complete_batch(
    (SELECT array_agg(id ORDER BY content) FROM mixed) || (SELECT id FROM mixed WHERE content = 'p')
                                                       || (SELECT id FROM mixed WHERE content = 'c'),
    (SELECT array_agg(num_attempts ORDER BY content) FROM mixed) || ARRAY[2, 1]::bigint[])
    WITH ORDINALITY AS r(id, status, ord)
JOIN mixed m ON m.id = r.id ORDER BY r.ord;
SELECT count(*) AS still_live FROM lonnymq.messages WHERE queue = 'mixed';
SELECT channel, locked FROM lonnymq.channel_stats WHERE queue = 'mixed' ORDER BY channel;
SELECT channel, convert_from(content, 'UTF8') AS content, outcome FROM lonnymq.message_archive
WHERE queue = 'mixed' ORDER BY channel;

-- message_complete, every kind of message: a channel-less one and one of a
-- channel without limits are deleted in one statement (at READ COMMITTED);
-- an accounted channel's gives its slot back and an archiving channel's is
-- kept, which that statement must leave to the steps after it; a stale
-- attempt of a plain channel changes nothing. At REPEATABLE READ every
-- complete takes the steps (the one statement's pin is READ COMMITTED's).
SELECT max_concurrency FROM lonnymq.channel_set('single', 'capped', max_concurrency => 5);
SELECT retain_completed FROM lonnymq.channel_set('single', 'kept', retain_completed => true);
SELECT count(*) FROM lonnymq.message_create_batch('single', ARRAY['capped', 'kept', 'plain', NULL, 'plain'],
                                                  ARRAY['c', 'k', 'p', 'n', 'r']::bytea[]);
CREATE TEMP TABLE single AS SELECT * FROM lonnymq.message_dequeue('single', 60000, 5);
SELECT channel, locked FROM lonnymq.channel_stats WHERE queue = 'single' ORDER BY channel;
SELECT lonnymq.message_complete(id, num_attempts + 1) AS stale FROM single WHERE content = 'p';
SELECT count(*) AS still_locked FROM lonnymq.messages WHERE queue = 'single' AND locked_until IS NOT NULL;
SELECT convert_from(content, 'UTF8') AS content, lonnymq.message_complete(id, num_attempts)
FROM single WHERE content <> 'r' ORDER BY content;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT lonnymq.message_complete(id, num_attempts) AS repeatable_read FROM single WHERE content = 'r';
COMMIT;
SELECT count(*) AS still_live FROM lonnymq.messages WHERE queue = 'single';
SELECT channel, locked FROM lonnymq.channel_stats WHERE queue = 'single' ORDER BY channel;
SELECT channel, convert_from(content, 'UTF8') AS content, outcome FROM lonnymq.message_archive
WHERE queue = 'single' ORDER BY channel;
SELECT count(*) AS broken FROM lonnymq.verify();

-- Invalid arguments: 22023 and nothing changed.
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.message_complete(NULL, 1)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete(1, NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete(1, 0)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_defer(1, 1, delay_ms => -1)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_defer(1, 1, dequeue_at => 'infinity')$$);
SELECT pg_temp.try($$SELECT lonnymq.message_heartbeat(1, 1, 0)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_heartbeat(1, 1, NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_fail(NULL, 1)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_cancel(NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(ARRAY[1], ARRAY[1, 2])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(NULL, ARRAY[1])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(ARRAY[1, NULL], ARRAY[1, 1])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(ARRAY[1], ARRAY[0])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(ARRAY[1, 2], ARRAY[1, NULL])$$);
SELECT pg_temp.try($$SELECT lonnymq.message_complete_batch(pg_catalog.array_fill(1::bigint, ARRAY[100001]),
                                                           pg_catalog.array_fill(1::bigint, ARRAY[100001]))$$);
SELECT pg_temp.state() = :'before' AS nothing_changed;

SELECT count(*) AS broken_invariants FROM lonnymq.verify();
