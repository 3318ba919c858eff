-- What bounds the Spark write: message_create_batch's per-message PL/pgSQL path, against a
-- set-based prototype of the same creation for the common case (channels without max_size,
-- no dedup keys, no dequeue_at). The prototype lives in schema lonnymq_proto of a scratch
-- database and is NOT part of the extension; it reaches into lonnymq's internals only to
-- measure what a set-based path inside message_create_batch could do.
--
--   createdb lonnymq_proto && psql -d lonnymq_proto -c 'CREATE EXTENSION lonnymq'
--   psql -d lonnymq_proto -f bench/spark/set_based_create.sql
--
-- It prints the time of each creation of 20,000 messages over 100 channels (alternating
-- the two paths, 3 rounds) and ends with lonnymq.verify(), which must return no rows.
\set ON_ERROR_STOP on
CREATE SCHEMA IF NOT EXISTS lonnymq_proto;

CREATE OR REPLACE FUNCTION lonnymq_proto.create_bulk(p_queue text, p_channels text[], p_contents bytea[])
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_queue_id integer := lonnymq._queue_id(p_queue, true);
    v_name text;
    v_now_ms bigint;
    v_count bigint;
BEGIN
    -- Channels once per distinct name, in name order, each under its shared advisory lock.
    FOR v_name IN SELECT DISTINCT n FROM pg_catalog.unnest(p_channels) n WHERE n IS NOT NULL ORDER BY n LOOP
        PERFORM lonnymq._channel_for_create(v_queue_id, v_name);
    END LOOP;
    v_now_ms := lonnymq._now_ms();
    WITH created AS (
        INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms)
        SELECT v_queue_id, c.id, u.content, v_now_ms
        FROM unnest(p_channels, p_contents) WITH ORDINALITY u(channel, content, ord)
        LEFT JOIN lonnymq.channel c ON c.queue_id = v_queue_id AND c.name = u.channel
        ORDER BY u.ord
        RETURNING channel_id, dequeue_ms
    ), hints AS (
        -- One hint per channel, with its earliest message, instead of one per message.
        INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
        SELECT v_queue_id, channel_id, pg_catalog.min(dequeue_ms) FROM created
        WHERE channel_id IS NOT NULL GROUP BY channel_id
        RETURNING 1
    )
    SELECT (SELECT pg_catalog.count(*) FROM created) INTO v_count;
    PERFORM pg_catalog.pg_notify('lonnymq',
        pg_catalog.json_build_object('queue', p_queue, 'event', 'created')::text);
    RETURN v_count;
END
$$;

CREATE TEMP TABLE rows AS
SELECT i AS ord, 'tenant_' || (i % 100) AS channel,
       pg_catalog.convert_to('{"job":"render","n":' || i || ',"payload":"' || repeat('x', 64) || '"}', 'UTF8') AS content
FROM generate_series(1, 20000) i;

\timing on
\echo message_create_batch
SELECT count(*) FROM lonnymq.message_create_batch('batch', (SELECT array_agg(channel ORDER BY ord) FROM rows), (SELECT array_agg(content ORDER BY ord) FROM rows));
\echo set-based prototype
SELECT lonnymq_proto.create_bulk('proto', (SELECT array_agg(channel ORDER BY ord) FROM rows), (SELECT array_agg(content ORDER BY ord) FROM rows));
\echo set-based prototype
SELECT lonnymq_proto.create_bulk('proto', (SELECT array_agg(channel ORDER BY ord) FROM rows), (SELECT array_agg(content ORDER BY ord) FROM rows));
\echo message_create_batch
SELECT count(*) FROM lonnymq.message_create_batch('batch', (SELECT array_agg(channel ORDER BY ord) FROM rows), (SELECT array_agg(content ORDER BY ord) FROM rows));
\echo message_create_batch
SELECT count(*) FROM lonnymq.message_create_batch('batch', (SELECT array_agg(channel ORDER BY ord) FROM rows), (SELECT array_agg(content ORDER BY ord) FROM rows));
\echo set-based prototype
SELECT lonnymq_proto.create_bulk('proto', (SELECT array_agg(channel ORDER BY ord) FROM rows), (SELECT array_agg(content ORDER BY ord) FROM rows));
\timing off
\echo verify (no rows = healthy)
SELECT * FROM lonnymq.verify();
