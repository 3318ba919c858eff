-- lonnymq GRANT recipes: a producer, a consumer and a read-only monitor.
--
-- Nothing in schema lonnymq is granted to PUBLIC: a role can do nothing with
-- the queue until it is given one of these recipes. The API functions run
-- with the extension owner's rights (SECURITY DEFINER), so roles get EXECUTE
-- on the calls they need and never any privilege on the tables.
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
--
-- test/pgtap/03_security.sql runs this very file and proves what each role can
-- and cannot do.

-- Producer: creates messages (alone or in batches), reads nothing.
GRANT USAGE ON SCHEMA lonnymq TO lonnymq_producer;
GRANT EXECUTE ON FUNCTION
    lonnymq.message_create(text, text, bytea, timestamptz, bigint, integer, text, bytea),
    lonnymq.message_create_batch(text, text[], bytea[], timestamptz[], text[], text)
    TO lonnymq_producer;

-- Consumer: dequeues and settles deliveries, and asks how long to sleep.
-- LISTEN lonnymq needs no privilege.
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

-- Monitor: reads the inspection views, the bounded summaries (what the
-- dashboard and its /metrics read) and the archive, checks invariants;
-- changes nothing. `lonnymq web --role lonnymq_monitor` runs as this role.
GRANT USAGE ON SCHEMA lonnymq TO lonnymq_monitor;
GRANT SELECT ON lonnymq.messages, lonnymq.channel_stats, lonnymq.queue_stats, lonnymq.message_archive
    TO lonnymq_monitor;
GRANT EXECUTE ON FUNCTION lonnymq.verify(), lonnymq.wait_hint_ms(text), lonnymq.wait_begin(text),
    lonnymq.wait_end(text), lonnymq.queue_summary(integer), lonnymq.channel_summary(text, integer, integer),
    lonnymq.message_browse(text, text, text, integer), lonnymq.periodic_summary(integer)
    TO lonnymq_monitor;
