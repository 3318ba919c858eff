-- The README GRANT recipes (docs/grants.sql, run here as
-- is): a role with no grant can do nothing; the producer can only create;
-- the consumer can only consume; the monitor can only read. Every function
-- and relation of the schema is tried as every role.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(56);

-- The recipe's group roles, created for this transaction only (everything
-- here is rolled back), and a role that is given nothing at all.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['lonnymq_producer', 'lonnymq_consumer', 'lonnymq_monitor', 'lonnymq_tap_nobody'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;
\ir ../../docs/grants.sql

-- Some state to work on, created by the owner.
SELECT (lonnymq.channel_set('q', 'c', max_concurrency => 5)).max_concurrency;
SELECT count(*) FROM lonnymq.message_create_batch('q', ARRAY['c', 'c', 'c', 'c'],
    ARRAY['m1', 'm2', 'm3', 'm4']::bytea[]);
SELECT lonnymq.message_fail(d.id, d.num_attempts, 'seed') FROM lonnymq.message_dequeue('q', 60000) d;

-- Calls every function of the schema with NULL arguments as the current
-- role and reports those that did NOT fail for lack of privilege (42501).
-- NULL arguments never change anything: each API call rejects them (22023).
-- (Sub-selects, so the planner cannot fold a STRICT call away unchecked.)
CREATE FUNCTION pg_temp.callable() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_callable text[] := '{}';
BEGIN
    FOR r IN
        SELECT p.proname,
               (SELECT string_agg(pg_catalog.format('(SELECT NULL::%s)', t::regtype), ', ' ORDER BY o)
                FROM unnest(p.proargtypes) WITH ORDINALITY u(t, o)) AS args
        FROM pg_proc p WHERE p.pronamespace = 'lonnymq'::regnamespace ORDER BY p.proname
    LOOP
        BEGIN
            EXECUTE pg_catalog.format('SELECT lonnymq.%I(%s)', r.proname, coalesce(r.args, ''));
            v_callable := v_callable || r.proname::text;
        EXCEPTION
            WHEN insufficient_privilege THEN NULL;
            WHEN OTHERS THEN v_callable := v_callable || r.proname::text;
        END;
    END LOOP;
    RETURN v_callable;
END
$$;
-- Likewise every table, view and sequence: those it can SELECT from.
CREATE FUNCTION pg_temp.readable() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_readable text[] := '{}';
BEGIN
    FOR r IN SELECT c.relname FROM pg_class c
             WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'v', 'S')
             ORDER BY c.relname
    LOOP
        BEGIN
            EXECUTE pg_catalog.format('SELECT 1 FROM lonnymq.%I LIMIT 0', r.relname);
            v_readable := v_readable || r.relname::text;
        EXCEPTION WHEN insufficient_privilege THEN NULL;
        END;
    END LOOP;
    RETURN v_readable;
END
$$;
-- Write privileges on anything in the schema, for a role.
CREATE FUNCTION pg_temp.writable(p_role name) RETURNS text[]
LANGUAGE sql AS $$
    SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}') FROM pg_class c
    WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'v', 'S')
      AND (has_table_privilege(p_role, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
           OR (c.relkind = 'S' AND has_sequence_privilege(p_role, c.oid, 'USAGE, UPDATE')))
$$;

-- ---------------------------------------------------------------------------
-- A role with nothing.
SET LOCAL ROLE lonnymq_tap_nobody;
SELECT is(pg_temp.callable(), '{}'::text[], 'nobody: every function is denied');
SELECT is(pg_temp.readable(), '{}'::text[], 'nobody: every table, view and sequence is denied');
SELECT throws_ok($$SELECT * FROM lonnymq.message_create('q', 'c', 'x')$$, '42501', NULL, 'nobody: cannot create');
SELECT throws_ok($$SELECT * FROM lonnymq.message_dequeue('q', 1000)$$, '42501', NULL, 'nobody: cannot dequeue');
SELECT throws_ok($$SELECT * FROM lonnymq.messages$$, '42501', NULL, 'nobody: cannot read messages');
SELECT throws_ok($$SELECT * FROM lonnymq.verify()$$, '42501', NULL, 'nobody: cannot verify');
RESET ROLE;
SELECT is(pg_temp.writable('lonnymq_tap_nobody'), '{}'::text[], 'nobody: can write nothing');

-- ---------------------------------------------------------------------------
-- Producer.
SET LOCAL ROLE lonnymq_producer;
SELECT is(pg_temp.callable(),
          ARRAY['_check_age', '_check_create', '_check_name', '_invalid', '_require_pg_cron', 'message_create', 'message_create_batch'],
          'producer: can call message_create(_batch) and the PUBLIC validators only');
SELECT is(pg_temp.readable(), '{}'::text[], 'producer: can read nothing');
SELECT is((SELECT status FROM lonnymq.message_create('q', 'c', 'p1')), 'created', 'producer: creates a message');
SELECT is((SELECT status FROM lonnymq.message_create(queue => 'q', channel => NULL, content => 'p2', delay_ms => 10)),
          'created', 'producer: creates a channel-less message');
SELECT results_eq($$SELECT status FROM lonnymq.message_create_batch('q', ARRAY['c', 'd'], ARRAY['p3', 'p4']::bytea[])$$,
                  $$VALUES ('created'), ('created')$$, 'producer: creates a batch');
SELECT throws_ok($$SELECT * FROM lonnymq.message_dequeue('q', 1000)$$, '42501', NULL, 'producer: cannot dequeue');
SELECT throws_ok($$SELECT lonnymq.message_cancel(1)$$, '42501', NULL, 'producer: cannot cancel');
SELECT throws_ok($$SELECT * FROM lonnymq.messages$$, '42501', NULL, 'producer: cannot read messages');
SELECT throws_ok($$SELECT * FROM lonnymq.message$$, '42501', NULL, 'producer: cannot read the message table');
SELECT throws_ok($$INSERT INTO lonnymq.message (queue_id, content, dequeue_ms) VALUES (1, 'x', 0)$$, '42501', NULL,
                 'producer: cannot insert into the message table');
SELECT throws_ok($$SELECT lonnymq.channel_set('q', 'c', max_concurrency => 100)$$, '42501', NULL,
                 'producer: cannot change a channel policy');
RESET ROLE;
SELECT is(pg_temp.writable('lonnymq_producer'), '{}'::text[], 'producer: can write no table');
SELECT is((SELECT count(*) FROM lonnymq.messages WHERE content IN ('p1', 'p2', 'p3', 'p4')), 4::bigint,
          'the producer''s messages exist');

-- ---------------------------------------------------------------------------
-- Consumer.
SET LOCAL ROLE lonnymq_consumer;
SELECT is(pg_temp.callable(),
          ARRAY['_check_age', '_check_create', '_check_name', '_invalid', '_require_pg_cron', 'message_complete',
                'message_complete_batch', 'message_defer', 'message_dequeue', 'message_fail',
                'message_heartbeat', 'wait_begin', 'wait_end', 'wait_hint_ms'],
          'consumer: can call the consuming functions and the PUBLIC validators only');
SELECT is(pg_temp.readable(), '{}'::text[], 'consumer: can read nothing');
SELECT is(lonnymq.wait_hint_ms('q'), 0::bigint, 'consumer: wait_hint_ms');
CREATE TEMP TABLE consumed ON COMMIT DROP AS SELECT * FROM lonnymq.message_dequeue('q', 60000, max_messages => 4);
SELECT is((SELECT count(*) FROM consumed), 4::bigint, 'consumer: dequeues');
SELECT is((SELECT lonnymq.message_heartbeat(id, num_attempts, 120000) FROM consumed ORDER BY id LIMIT 1),
          'extended', 'consumer: heartbeat');
SELECT is((SELECT lonnymq.message_complete(id, num_attempts) FROM consumed ORDER BY id LIMIT 1),
          'completed', 'consumer: complete');
SELECT is((SELECT lonnymq.message_defer(id, num_attempts, delay_ms => 1000) FROM consumed ORDER BY id LIMIT 1 OFFSET 1),
          'deferred', 'consumer: defer');
SELECT is((SELECT lonnymq.message_fail(id, num_attempts, 'consumer') FROM consumed ORDER BY id LIMIT 1 OFFSET 2),
          'failed', 'consumer: fail');
SELECT results_eq($$SELECT status FROM lonnymq.message_complete_batch(
                      ARRAY(SELECT id FROM consumed ORDER BY id OFFSET 3), ARRAY(SELECT num_attempts FROM consumed ORDER BY id OFFSET 3))$$,
                  $$VALUES ('completed')$$, 'consumer: complete_batch');
SELECT throws_ok($$SELECT * FROM lonnymq.message_create('q', 'c', 'x')$$, '42501', NULL, 'consumer: cannot create');
SELECT throws_ok($$SELECT * FROM lonnymq.messages$$, '42501', NULL, 'consumer: cannot read messages');
SELECT throws_ok($$SELECT * FROM lonnymq.message_archive$$, '42501', NULL, 'consumer: cannot read the archive');
SELECT throws_ok($$UPDATE lonnymq.message SET locked_until_ms = NULL$$, '42501', NULL,
                 'consumer: cannot update the message table');
SELECT throws_ok($$SELECT * FROM lonnymq.archive_requeue(1)$$, '42501', NULL, 'consumer: cannot requeue');
RESET ROLE;
SELECT is(pg_temp.writable('lonnymq_consumer'), '{}'::text[], 'consumer: can write no table');

-- ---------------------------------------------------------------------------
-- Monitor.
SET LOCAL ROLE lonnymq_monitor;
SELECT is(pg_temp.callable(), ARRAY['_check_age', '_check_create', '_check_name', '_invalid', '_require_pg_cron',
                                    'channel_summary', 'message_browse', 'periodic_summary', 'queue_summary', 'verify', 'wait_begin',
                                    'wait_end', 'wait_hint_ms'],
          'monitor: can call verify, wait_begin, wait_end, wait_hint_ms, the summaries and the PUBLIC validators only');
SELECT is(pg_temp.readable(), ARRAY['channel_stats', 'message_archive', 'messages', 'queue_stats'],
          'monitor: can read the three views and the archive only');
SELECT lives_ok($$SELECT * FROM lonnymq.messages$$, 'monitor: reads every column of messages');
SELECT lives_ok($$SELECT * FROM lonnymq.channel_stats$$, 'monitor: reads every column of channel_stats');
SELECT lives_ok($$SELECT * FROM lonnymq.queue_stats$$, 'monitor: reads every column of queue_stats');
SELECT lives_ok($$SELECT * FROM lonnymq.message_archive$$, 'monitor: reads every column of message_archive');
SELECT is((SELECT count(*) FROM lonnymq.message_archive), 2::bigint, 'monitor: sees the archived messages');
SELECT is((SELECT count(*) FROM lonnymq.verify()), 0::bigint, 'monitor: verify');
SELECT is(lonnymq.wait_hint_ms('nothing_here'), NULL::bigint, 'monitor: wait_hint_ms');
SELECT throws_ok($$SELECT * FROM lonnymq.message_dequeue('q', 1000)$$, '42501', NULL, 'monitor: cannot dequeue');
SELECT throws_ok($$SELECT * FROM lonnymq.message_create('q', 'c', 'x')$$, '42501', NULL, 'monitor: cannot create');
SELECT throws_ok($$SELECT lonnymq.archive_prune('0 seconds')$$, '42501', NULL, 'monitor: cannot prune');
SELECT lives_ok($$SELECT * FROM lonnymq.queue_summary()$$, 'monitor: queue_summary');
SELECT lives_ok($$SELECT * FROM lonnymq.channel_summary('q')$$, 'monitor: channel_summary');
SELECT lives_ok($$SELECT * FROM lonnymq.message_browse('q', 'c')$$, 'monitor: message_browse');
SELECT lives_ok($$SELECT * FROM lonnymq.periodic_summary()$$, 'monitor: periodic_summary');
SELECT throws_ok($$SELECT lonnymq.channel_pause('q', 'c')$$, '42501', NULL, 'monitor: cannot pause');
SELECT throws_ok($$DELETE FROM lonnymq.message_archive$$, '42501', NULL, 'monitor: cannot delete from the archive');
SELECT throws_ok($$SELECT * FROM lonnymq.channel$$, '42501', NULL, 'monitor: cannot read the channel table');
RESET ROLE;
SELECT is(pg_temp.writable('lonnymq_monitor'), '{}'::text[], 'monitor: can write nothing');

-- Nothing above broke an invariant.
SELECT is((SELECT count(*) FROM lonnymq.verify()), 0::bigint, 'verify() is empty');

SELECT * FROM finish();
ROLLBACK;
