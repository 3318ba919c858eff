-- lonnymq GRANT recipes: a producer, a consumer (a Worker) and a read-only
-- monitor. This file is their one home: everything that refers to a recipe
-- points here.
--
-- Nothing in schema lonnymq is granted to PUBLIC: a role can do nothing with
-- the queue until it is given one of these recipes. The API functions run
-- with the extension owner's rights (SECURITY DEFINER), so roles get EXECUTE
-- on the calls they need and never any privilege on the tables. LISTEN needs
-- no privilege.
--
-- Run this file as the extension owner after creating the three group roles:
--
--   CREATE ROLE lonnymq_producer NOLOGIN;
--   CREATE ROLE lonnymq_consumer NOLOGIN;
--   CREATE ROLE lonnymq_monitor NOLOGIN;
--
-- and give them to the roles your applications log in as:
--
--   GRANT lonnymq_producer TO web_app;
--   GRANT lonnymq_consumer TO worker_app;
--   GRANT lonnymq_monitor TO dashboard;
--
-- A role that does two jobs gets two recipes: a Worker that runs periodic
-- jobs (Worker.every) creates their messages, so it needs the producer's too.
-- Administration (channel policies, pause and resume, cancel, requeue,
-- prune, schedules, maintenance) is in no recipe: it stays with the extension
-- owner unless you grant it.
--
-- Each recipe starts with a line "-- <Name> (<role>): what it is for".
-- test/pgtap/03_security.sql runs this file and proves what each role can and
-- cannot do; test/system/test_security.py creates each role from its section
-- and runs what the role is for through the real clients.

-- Producer (lonnymq_producer): creates messages, alone or in batches, from
-- the application, `lonnymq send` or `lonnymq enqueue`; reads nothing.
GRANT USAGE ON SCHEMA lonnymq TO lonnymq_producer;
GRANT EXECUTE ON FUNCTION
    lonnymq.message_create(text, text, bytea, timestamptz, bigint, integer, text, bytea),
    lonnymq.message_create_batch(text, text[], bytea[], timestamptz[], text[], text)
    TO lonnymq_producer;

-- Consumer (lonnymq_consumer): runs a Worker, or any consumer of its own:
-- dequeues and settles deliveries, and, when idle, announces that it sleeps
-- (wait_begin and wait_end: producers send wake-ups only while someone
-- waits) and asks how long to sleep.
GRANT USAGE ON SCHEMA lonnymq TO lonnymq_consumer;
GRANT EXECUTE ON FUNCTION
    lonnymq.message_dequeue(text, bigint, integer),
    lonnymq.message_complete(bigint, bigint),
    lonnymq.message_complete_batch(bigint[], bigint[]),
    lonnymq.message_defer(bigint, bigint, timestamptz, bigint, bytea),
    lonnymq.message_heartbeat(bigint, bigint, bigint),
    lonnymq.message_fail(bigint, bigint, text),
    lonnymq.wait_hint_ms(text),
    lonnymq.wait_begin(text),
    lonnymq.wait_end(text)
    TO lonnymq_consumer;

-- Monitor (lonnymq_monitor): watches and changes nothing: reads the
-- inspection views, the bounded summaries and the archive, checks
-- invariants, and waits like a consumer to hear every event. That is what
-- `lonnymq status`, `lonnymq tail` and a read-only `lonnymq web` (its pages
-- and /metrics) do; `lonnymq web --role lonnymq_monitor` runs as this role.
GRANT USAGE ON SCHEMA lonnymq TO lonnymq_monitor;
GRANT SELECT ON lonnymq.messages, lonnymq.channel_stats, lonnymq.queue_stats, lonnymq.message_archive
    TO lonnymq_monitor;
GRANT EXECUTE ON FUNCTION lonnymq.verify(), lonnymq.wait_hint_ms(text), lonnymq.wait_begin(text),
    lonnymq.wait_end(text), lonnymq.queue_summary(integer), lonnymq.channel_summary(text, integer, integer),
    lonnymq.message_browse(text, text, text, integer), lonnymq.periodic_summary(integer)
    TO lonnymq_monitor;
