-- A MEASURING INSTRUMENT, NOT INSTALLED: what would a head pointer save a dequeue's claim?
-- The original LonnyMQ keeps each channel's head message id on the channel row and claims it
-- by key; lonnymq claims the channel's first ready message through a probe of
-- message_ready_idx (LIMIT 1 FOR UPDATE SKIP LOCKED, in a subquery of the UPDATE). This
-- times both claims in PL/pgSQL (each statement's plan cached, a fresh executor per
-- execution, as in the dequeue), one claim per channel of 100, on the same heads, in 12
-- interleaved pairs (in both orders), each claim run rolled back. It leaves out what a head
-- pointer adds: finding the next head at every claim (lonnymq's drained check already
-- probes for it) and the producers' update of the channel row when a message becomes a
-- channel's head.
--
-- It needs a database where lonnymq's queue 1 has ready messages on channels 1-100, such as
-- the prof_lonnymq that dequeue_profile.sh leaves behind (it changes nothing there):
--
--   bench/cluster start
--   bench/prototypes/dequeue_profile.sh NAME         # (any of its runs on 100 channels)
--   psql -h 127.0.0.1 -p 25439 -U postgres -d prof_lonnymq -X -q -f bench/prototypes/claim_by_key.sql
--
-- Prints µs per claim, each pair's and the means. Results: bench/README.md, "Session 19".
CREATE FUNCTION pg_temp.claim_probe() RETURNS double precision
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    v_id bigint;
BEGIN
    FOR c IN 1..100 LOOP
        UPDATE lonnymq.message m SET num_attempts = m.num_attempts + 1, locked_until_ms = 1900000030000
        WHERE m.id = (SELECT h.id FROM lonnymq.message h
                      WHERE h.queue_id = 1 AND h.channel_id = c AND h.locked_until_ms IS NULL
                        AND h.dequeue_ms <= 1900000000000
                      ORDER BY h.dequeue_ms, h.id
                      LIMIT 1
                      FOR UPDATE SKIP LOCKED)
        RETURNING m.id INTO v_id;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / 100;
END
$$;
CREATE FUNCTION pg_temp.claim_key(p_ids bigint[]) RETURNS double precision
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    v_id bigint;
    k bigint;
BEGIN
    FOREACH k IN ARRAY p_ids LOOP
        UPDATE lonnymq.message m SET num_attempts = m.num_attempts + 1, locked_until_ms = 1900000030000
        WHERE m.id = k
        RETURNING m.id INTO v_id;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / pg_catalog.cardinality(p_ids);
END
$$;
-- Each channel's head, as the probe finds it.
CREATE TEMP TABLE heads AS
SELECT array_agg(h.id ORDER BY c) AS ids
FROM generate_series(1, 100) c
CROSS JOIN LATERAL (SELECT m.id FROM lonnymq.message m
                    WHERE m.queue_id = 1 AND m.channel_id = c AND m.locked_until_ms IS NULL
                    ORDER BY m.dequeue_ms, m.id LIMIT 1) h;
-- One claim run, timed, then undone (an exception rolls its subtransaction back; the
-- variable keeps the time).
CREATE FUNCTION pg_temp.undone(p_claim text) RETURNS double precision
LANGUAGE plpgsql
AS $$
DECLARE
    v_us double precision;
BEGIN
    BEGIN
        v_us := CASE p_claim WHEN 'probe' THEN pg_temp.claim_probe()
                             ELSE pg_temp.claim_key((SELECT ids FROM heads)) END;
        RAISE EXCEPTION USING ERRCODE = 'P0001';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
    RETURN v_us;
END
$$;
CREATE TEMP TABLE timings (pair integer, claim text, us double precision);
-- A first pair unrecorded (plans made, caches warm), then 12 pairs in both orders: odd
-- ones probe first, even ones key first.
DO $$
BEGIN
    PERFORM pg_temp.undone('probe'), pg_temp.undone('key');
    FOR i IN 1..12 LOOP
        FOR j IN 0..1 LOOP
            INSERT INTO timings
            SELECT i, c.claim, pg_temp.undone(c.claim)
            FROM (VALUES (CASE WHEN (i + j) % 2 = 1 THEN 'probe' ELSE 'key' END)) c(claim);
        END LOOP;
    END LOOP;
END
$$;
\pset footer off
SELECT pair, round(max(us) FILTER (WHERE claim = 'probe')::numeric, 1) AS probe_us,
       round(max(us) FILTER (WHERE claim = 'key')::numeric, 1) AS key_us
FROM timings GROUP BY pair ORDER BY pair;
SELECT round(avg(us) FILTER (WHERE claim = 'probe')::numeric, 1) AS probe_mean_us,
       round(avg(us) FILTER (WHERE claim = 'key')::numeric, 1) AS key_mean_us,
       round((avg(us) FILTER (WHERE claim = 'key') / avg(us) FILTER (WHERE claim = 'probe'))::numeric, 2) AS key_over_probe
FROM timings;
