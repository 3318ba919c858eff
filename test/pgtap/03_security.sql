-- Security, all of it that SQL can show (docs/privileges.md), in three
-- parts, each on a fresh install inside one rolled-back transaction:
-- 1. the catalog: pinned search_path, definer's rights, no grants;
-- 2. the GRANT recipes, tried function by function and relation by relation;
-- 3. a hostile search_path.
-- What a restricted role can do through the real clients (the Python
-- client, a worker, the CLI, the dashboard; each recipe created from its
-- own section of docs/grants.sql) is in test/system/test_security.py;
-- attacks on the install paths are in test/system/test_install.py.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(94);

-- 1. The catalog: every function pins search_path to
-- pg_catalog, pg_temp;
-- the API runs as its owner (SECURITY DEFINER) so roles need only EXECUTE,
-- except the pg_cron calls, which run as the caller on purpose (a cron job
-- must never get more rights than whoever scheduled it); nothing in the
-- schema is open to PUBLIC except the five argument validators.

-- search_path: pinned, exactly these two schemas, pg_temp last (unquoted:
-- 'pg_catalog, pg_temp' quoted would be a single schema name).
-- Every function another role can reach (the API, the validators granted to
-- PUBLIC) and the generated column's key function pin it. Internal helpers do
-- not (see sql/20_internal.sql: a SET clause costs a GUC save and restore per
-- call and stops inlining): they run only inside those, under their pinned
-- path, so no role but the owner may execute them. The only other settings
-- allowed change no result: plan_cache_mode = force_generic_plan (one plan
-- for statements over arrays, see message_complete_batch) and
-- enable_seqscan = off (plans by key whatever the tables' size when planned,
-- see design.md).
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace
       AND (p.proname NOT LIKE '\_%' OR has_function_privilege('public', p.oid, 'EXECUTE')
            OR p.proname = '_channel_lock_key')
       AND (p.proconfig[1] IS DISTINCT FROM 'search_path=pg_catalog, pg_temp'
            OR NOT p.proconfig[2:] <@ ARRAY['plan_cache_mode=force_generic_plan', 'enable_seqscan=off'])),
    NULL, 'every function others can call sets search_path = pg_catalog, pg_temp and nothing else '
          '(but how it plans)');
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace
       AND p.proconfig IS NULL
       AND (p.prosecdef OR has_function_privilege('public', p.oid, 'EXECUTE') OR p.proname NOT LIKE '\_%')),
    NULL, 'functions without a pinned search_path are internal: invoker''s rights, closed to PUBLIC');
SELECT cmp_ok((SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'lonnymq'::regnamespace),
              '>=', 40::bigint, 'and there are functions to check');

-- SECURITY DEFINER on the API, INVOKER on the pg_cron calls.
SELECT is(
    (SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND p.proname NOT LIKE '\_%'
       AND p.proname NOT IN ('schedule_set', 'schedule_delete', 'maintenance_schedule', 'maintenance_unschedule')
       AND NOT p.prosecdef),
    NULL, 'every API function except the pg_cron ones is SECURITY DEFINER');
SELECT is(
    (SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND p.prosecdef
       AND (p.proname LIKE '\_%'
            OR p.proname IN ('schedule_set', 'schedule_delete', 'maintenance_schedule', 'maintenance_unschedule'))),
    NULL, 'internal helpers and pg_cron calls are SECURITY INVOKER');
-- Internal helpers are only reachable through the API (no EXECUTE for
-- anyone but the owner), apart from the validators below.
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text)
     FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND a.grantee <> p.proowner),
    ARRAY['lonnymq._check_age(interval,text)', 'lonnymq._check_create(bytea,bigint,integer,text)',
          'lonnymq._check_name(text,text,boolean)', 'lonnymq._invalid(text)', 'lonnymq._require_pg_cron()'],
    'only the five validators are executable by anyone but the owner');
SELECT is(
    (SELECT array_agg(DISTINCT a.grantee::regrole::text) FROM pg_proc p,
            aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND a.grantee <> p.proowner),
    ARRAY['-'], 'and those are granted to PUBLIC (grantee 0) only');
-- The validators cannot be used to do anything: they only raise or return.
SELECT is((SELECT array_agg(p.provolatile::text ORDER BY p.proname) FROM pg_proc p
           WHERE p.pronamespace = 'lonnymq'::regnamespace
             AND p.proname IN ('_invalid', '_check_name', '_check_create')),
          ARRAY['i', 'i', 'i'], 'the PUBLIC validators are immutable');

-- Tables, views and sequences: no PUBLIC privilege at all, nor any grant to
-- anyone but the owner on a fresh install.
SELECT is(
    (SELECT array_agg(c.relname::text || ':' || a.privilege_type ORDER BY c.relname, a.privilege_type)
     FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char",
                                                                c.relowner))) a
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'm', 'p')
       AND a.grantee <> c.relowner),
    NULL, 'no privilege on any table, view or sequence for anyone but the owner');
SELECT is(
    (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'v', 'S') AND a.grantee = 0),
    NULL, 'nothing in the schema is granted to PUBLIC');
-- Column privileges too.
SELECT is(
    (SELECT count(*) FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND t.attacl IS NOT NULL),
    0::bigint, 'no column-level grants');

-- The schema: USAGE only for the owner.
SELECT is(
    (SELECT array_agg(a.grantee::regrole::text || ':' || a.privilege_type)
     FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
     WHERE n.nspname = 'lonnymq' AND a.grantee <> n.nspowner),
    NULL, 'schema lonnymq grants nothing to PUBLIC');
-- Every function says what it is for (COMMENT ON FUNCTION).
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL),
    NULL, 'every function has a comment');

-- The control file: not superuser-only, not trusted.
SELECT is((SELECT array_agg(DISTINCT e.extowner::regrole::text) FROM pg_extension e WHERE e.extname = 'lonnymq'),
          ARRAY[current_user::text], 'the extension belongs to its installer');

-- 2. The GRANT recipes, on a fresh install.
SET client_min_messages = warning;
DROP EXTENSION lonnymq CASCADE;
RESET client_min_messages;
CREATE EXTENSION lonnymq;

-- The GRANT recipes (docs/grants.sql, run here as
-- is): a role with no grant can do nothing; the producer can only create;
-- the consumer can only consume; the monitor can only read. Every function
-- and relation of the schema is tried as every role.

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

-- 3. A hostile search_path, on a fresh install (its ids start at 1).
SET client_min_messages = warning;
DROP EXTENSION lonnymq CASCADE;
RESET client_min_messages;
CREATE EXTENSION lonnymq;

-- A hostile search_path cannot change what lonnymq does (docs/privileges.md).
-- A role puts its own schema first, with look-alikes of now(),
-- clock_timestamp(), floor(), coalesce(), format(), length(), hashtext(),
-- nextval(), pg_notify(), current_setting(), the advisory-lock functions, an
-- = operator for text and for bigint, and tables (and temporary tables) named
-- like lonnymq's. Every look-alike raises if it is ever called, so any use by
-- lonnymq aborts the call and its result row below is missing.

CREATE ROLE lonnymq_tap_hostile NOLOGIN;
GRANT USAGE ON SCHEMA lonnymq TO lonnymq_tap_hostile;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = 'lonnymq'::regnamespace AND p.proname NOT LIKE '\_%' AND p.prosecdef
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO lonnymq_tap_hostile', f);
    END LOOP;
END
$$;
GRANT SELECT ON lonnymq.message_archive TO lonnymq_tap_hostile;
CREATE SCHEMA hostile AUTHORIZATION lonnymq_tap_hostile;
-- What the hostile role's calls return, recorded without any comparison
-- (its operators are in force while it runs).
CREATE TEMP TABLE results (label text, value text);
GRANT ALL ON results TO lonnymq_tap_hostile;

SET LOCAL ROLE lonnymq_tap_hostile;
CREATE FUNCTION hostile.hijacked() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hijacked: lonnymq called a hostile look-alike';
END
$$;
CREATE FUNCTION hostile.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT NULL::timestamptz WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT NULL::timestamptz WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.floor(double precision) RETURNS double precision LANGUAGE sql AS $$ SELECT 0::float8 WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.floor(numeric) RETURNS numeric LANGUAGE sql AS $$ SELECT 0::numeric WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile."coalesce"(text, text) RETURNS text LANGUAGE sql AS $$ SELECT 'x' WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.format(text, text) RETURNS text LANGUAGE sql AS $$ SELECT 'x' WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.length(text) RETURNS integer LANGUAGE sql AS $$ SELECT 1 WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.hashtext(text) RETURNS integer LANGUAGE sql AS $$ SELECT 1 WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.nextval(regclass) RETURNS bigint LANGUAGE sql AS $$ SELECT 1::bigint WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.pg_notify(text, text) RETURNS void LANGUAGE sql AS $$ SELECT WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'off' WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.cardinality(anyarray) RETURNS integer LANGUAGE sql AS $$ SELECT 0 WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.isfinite(timestamptz) RETURNS boolean LANGUAGE sql AS $$ SELECT true WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.pg_advisory_xact_lock_shared(integer, integer) RETURNS void LANGUAGE sql AS $$ SELECT WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.pg_advisory_xact_lock(integer, integer) RETURNS void LANGUAGE sql AS $$ SELECT WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.pg_try_advisory_xact_lock(integer, integer) RETURNS boolean LANGUAGE sql AS $$ SELECT true WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.text_eq(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT hostile.hijacked() $$;
CREATE FUNCTION hostile.bigint_eq(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT hostile.hijacked() $$;
CREATE FUNCTION hostile.bigint_lt(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT hostile.hijacked() $$;
CREATE OPERATOR hostile.= (FUNCTION = hostile.text_eq, LEFTARG = text, RIGHTARG = text);
CREATE OPERATOR hostile.= (FUNCTION = hostile.bigint_eq, LEFTARG = bigint, RIGHTARG = bigint);
CREATE OPERATOR hostile.< (FUNCTION = hostile.bigint_lt, LEFTARG = bigint, RIGHTARG = bigint);
CREATE OPERATOR hostile.<= (FUNCTION = hostile.bigint_lt, LEFTARG = bigint, RIGHTARG = bigint);
CREATE TABLE hostile.message (id bigint, queue_id integer, channel_id bigint, content bytea);
CREATE TABLE hostile.channel (id bigint, queue_id integer, name text);
CREATE TABLE hostile.queue (id integer, name text);
INSERT INTO hostile.message VALUES (1, 1, 1, 'decoy');
CREATE TEMP TABLE message (id bigint, queue_id integer, channel_id bigint, content bytea);
CREATE TEMP TABLE channel_hint (queue_id integer, channel_id bigint, dequeue_ms bigint);
INSERT INTO pg_temp.message VALUES (1, 1, 1, 'decoy');

SET LOCAL search_path = hostile, pg_catalog, pg_temp;
-- From here on an error must not end the script: a failed call just leaves
-- its result row missing.
\set ON_ERROR_STOP 0
\set ON_ERROR_ROLLBACK on
INSERT INTO pg_temp.results SELECT 'channel_set', row(max_concurrency, max_size)::text
    FROM lonnymq.channel_set(queue => 'q1', channel => 'c', max_concurrency => 2, max_size => 10);
INSERT INTO pg_temp.results SELECT 'create q1', status FROM lonnymq.message_create('q1', 'c', 'a', dedup_key => 'k1');
INSERT INTO pg_temp.results SELECT 'create q1 other key', status FROM lonnymq.message_create('q1', 'c', 'a2', dedup_key => 'k2');
INSERT INTO pg_temp.results SELECT 'create q1 same key', status FROM lonnymq.message_create('q1', 'c', 'a3', dedup_key => 'k1');
INSERT INTO pg_temp.results SELECT 'create q2', status FROM lonnymq.message_create('q2', 'c', 'b');
-- (In its own queue: which of a new channel and a channel-less message
-- created in the same millisecond goes first is a tie.)
INSERT INTO pg_temp.results SELECT 'create q4 no channel', status FROM lonnymq.message_create('q4', NULL, 'b2');
INSERT INTO pg_temp.results SELECT 'batch q2', string_agg(status, ',')
    FROM lonnymq.message_create_batch('q2', ARRAY['c', 'd'], ARRAY['b3', 'b4']::bytea[]);
INSERT INTO pg_temp.results SELECT 'wait_hint_ms q1', lonnymq.wait_hint_ms('q1')::text;
INSERT INTO pg_temp.results SELECT 'dequeue q2', convert_from(content, 'UTF8') || '/' || num_attempts
    FROM lonnymq.message_dequeue('q2', 60000);
INSERT INTO pg_temp.results SELECT 'complete wrong id', lonnymq.message_complete(1000000, 1);
INSERT INTO pg_temp.results SELECT 'complete wrong attempt', lonnymq.message_complete(d.id, 7)
    FROM lonnymq.message_dequeue('q1', 60000) d;
INSERT INTO pg_temp.results SELECT 'heartbeat', lonnymq.message_heartbeat(3, 1, 60000);
INSERT INTO pg_temp.results SELECT 'defer', lonnymq.message_defer(3, 1, delay_ms => 3600000);
INSERT INTO pg_temp.results SELECT 'complete q1', lonnymq.message_complete(1, 1);
INSERT INTO pg_temp.results SELECT 'fail', lonnymq.message_fail(d.id, d.num_attempts, 'e')
    FROM lonnymq.message_dequeue('q2', 60000) d;
INSERT INTO pg_temp.results SELECT 'cancel', lonnymq.message_cancel(2);
INSERT INTO pg_temp.results SELECT 'verify', count(*)::text FROM lonnymq.verify();
\set ON_ERROR_STOP 1
\set ON_ERROR_ROLLBACK off
RESET search_path;
RESET ROLE;

SELECT is((SELECT value FROM results WHERE label = 'channel_set'), '(2,10)', 'channel_set');
SELECT is((SELECT value FROM results WHERE label = 'create q1'), 'created', 'message_create');
SELECT is((SELECT value FROM results WHERE label = 'create q1 other key'), 'created',
          'a different dedup key is not a duplicate (text = is pg_catalog''s)');
SELECT is((SELECT value FROM results WHERE label = 'create q1 same key'), 'deduplicated', 'the same dedup key is');
SELECT is((SELECT value FROM results WHERE label = 'create q2'), 'created', 'message_create in another queue');
SELECT is((SELECT value FROM results WHERE label = 'create q4 no channel'), 'created', 'channel-less message_create');
SELECT is((SELECT value FROM results WHERE label = 'batch q2'), 'created,created', 'message_create_batch');
SELECT is((SELECT value FROM results WHERE label = 'wait_hint_ms q1'), '0', 'wait_hint_ms');
SELECT is((SELECT string_agg(value, ',') FROM results WHERE label = 'dequeue q2'), 'b/1',
          'message_dequeue serves the named queue only (text = is pg_catalog''s)');
SELECT is((SELECT value FROM results WHERE label = 'complete wrong id'), 'not_found',
          'complete of an unknown id is not_found (bigint = is pg_catalog''s)');
SELECT is((SELECT value FROM results WHERE label = 'complete wrong attempt'), 'state_invalid', 'the fencing token holds');
SELECT is((SELECT value FROM results WHERE label = 'heartbeat'), 'extended', 'message_heartbeat');
SELECT is((SELECT value FROM results WHERE label = 'defer'), 'deferred', 'message_defer');
SELECT is((SELECT value FROM results WHERE label = 'complete q1'), 'completed', 'message_complete');
SELECT is((SELECT value FROM results WHERE label = 'fail'), 'failed', 'message_fail');
SELECT is((SELECT value FROM results WHERE label = 'cancel'), 'cancelled', 'message_cancel');
SELECT is((SELECT value FROM results WHERE label = 'verify'), '0', 'verify() is empty');

-- The clock was the database's, not the look-alikes'.
SELECT ok((SELECT bool_and(created_at BETWEEN now() - interval '1 minute' AND now() + interval '1 minute'
                           AND dequeue_at BETWEEN now() - interval '1 minute' AND now() + interval '2 hours')
           FROM lonnymq.messages),
          'creation and schedule times come from the real clock');
-- The decoys were not touched, lonnymq's own tables were used.
SELECT is((SELECT count(*) FROM hostile.message), 1::bigint, 'the hostile message table is untouched');
-- Ids are fresh in this transaction: a=1, a2=2, (a3, a duplicate, takes
-- none), b=3, b2=4, b3=5, b4=6. a completed, a2 cancelled, b deferred;
-- channel d (never served) had waited longest in q2 when the second dequeue
-- came, so b4 was failed.
SELECT is((SELECT array_agg(convert_from(content, 'UTF8') ORDER BY id) FROM lonnymq.message WHERE queue_id IN
               (SELECT id FROM lonnymq.queue WHERE name IN ('q1', 'q2', 'q4'))),
          ARRAY['b', 'b2', 'b3'], 'the live messages are the expected ones');
SELECT is((SELECT array_agg(convert_from(content, 'UTF8') || ':' || outcome) FROM lonnymq.message_archive),
          ARRAY['b4:failed'], 'the failed message is archived');

-- And with an empty search_path (nothing but pg_catalog, implicitly), as a
-- role that is not the owner: the API works when called qualified.
SET LOCAL ROLE lonnymq_tap_hostile;
SET LOCAL search_path = '';
CREATE TEMP TABLE empty_path AS
SELECT (SELECT status FROM lonnymq.message_create('q3', 'c', 'e1')) AS created,
       (SELECT pg_catalog.count(*) FROM lonnymq.message_dequeue('q3', 60000)) AS dequeued;
RESET search_path;
RESET ROLE;
SELECT is((SELECT created FROM empty_path), 'created', 'empty search_path: message_create');
SELECT is((SELECT dequeued FROM empty_path), 1::bigint, 'empty search_path: message_dequeue');
SELECT is((SELECT count(*) FROM lonnymq.verify()), 0::bigint, 'verify() is empty at the end');

SELECT * FROM finish();
ROLLBACK;
