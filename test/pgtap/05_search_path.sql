-- A hostile search_path cannot change what lonnymq does (README, "Privileges").
-- A role puts its own schema first, with look-alikes of now(),
-- clock_timestamp(), floor(), coalesce(), format(), length(), hashtext(),
-- nextval(), pg_notify(), current_setting(), the advisory-lock functions, an
-- = operator for text and for bigint, and tables (and temporary tables) named
-- like lonnymq's. Every look-alike raises if it is ever called, so any use by
-- lonnymq aborts the call and its result row below is missing.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(24);

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
