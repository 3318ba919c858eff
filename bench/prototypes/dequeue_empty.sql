-- A MEASURING INSTRUMENT, NOT A DEQUEUE: never installed. A message_dequeue that reads
-- nothing and returns one constant row, so that bench/ab_dequeue.py against it shows what
-- the harness itself costs per call (the call, its transaction, psycopg):
--
--   .venv/bin/python bench/ab_dequeue.py sql/50_dequeue.sql bench/prototypes/dequeue_empty.sql \
--       --rounds 3 --name s11-empty
--
-- Results: bench/README.md, "A lower bound for a rewrite of the dequeue's control flow".
CREATE OR REPLACE FUNCTION lonnymq.message_dequeue(queue text, lock_ms bigint, max_messages integer DEFAULT 1)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT 1::bigint, 'c'::text, '\x00'::bytea, NULL::bytea, 1::bigint, now(), false;
END
$$;
