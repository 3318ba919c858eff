-- A MEASUREMENT, NOT A CHANGE TO KEEP (session 23): channel.lock_key as a plain column
-- written by the insert (here _channel_for_create's; channel_set's would need the same)
-- instead of a stored generated column, whose expression every UPDATE of a channel row
-- (a turn, a settle) sets up again at executor start (ExecInitStoredGenerated, about 1.5%
-- of a single dequeue in session 19's profile). Definitions applied over an installed 1.12:
--
--   bench/cluster start
--   bench/prototypes/consume_pair.sh bench/prototypes/lock_key_plain.sql 8 1 s23-lockkey-b1-again
--   bench/prototypes/consume_pair.sh B.sql 8 1 s23-aa-b1     # the A/A: B.sql is "SELECT 1;"
--
-- Dequeue time B/A, one client, single dequeues over 100 channels: rounds 1.06, 0.97, 0.96,
-- 0.89, 1.00, 0.96 (consume-s23-lockkey-b1.csv) and 0.98, 1.01, 0.86, 1.02, 0.94, 0.97, 0.94,
-- 0.97 (consume-s23-lockkey-b1-again.csv), medians 0.962 and 0.969; the A/A 0.95-1.03,
-- median 0.988 (consume-s23-aa-b1.csv): 2-3% below the A/A, not resolved. Not kept: a plain NOT NULL
-- column with no default breaks restoring a dump of an earlier version into this one
-- (pg_dump leaves generated columns out of the data and CREATE EXTENSION installs the
-- default version), and a trigger to fill it would be a new mechanism for 2%.
-- bench/README.md, "Session 23".
ALTER TABLE lonnymq.channel ALTER COLUMN lock_key DROP EXPRESSION;
CREATE OR REPLACE FUNCTION lonnymq._channel_for_create(p_queue_id integer, p_channel text, p_sweep boolean)
RETURNS lonnymq.channel
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
BEGIN
    -- (A channel deleted while the pin waited comes back NULL.)
    v_channel := lonnymq._pin_channel(
        (SELECT c.id FROM lonnymq.channel c WHERE c.queue_id = p_queue_id AND c.name = p_channel));
    IF v_channel.id IS NOT NULL THEN
        RETURN v_channel;
    END IF;
    -- Creation pays for removal: idle channels cannot pile up. Swept before
    -- the insert, so the new (still empty) channel is not a candidate. A
    -- batch sweeps once before taking any of its channels (p_sweep false): a
    -- later sweep could remove one it took but has not written to yet.
    IF p_sweep THEN
        PERFORM lonnymq.channel_sweep(2);
    END IF;
    LOOP
        -- A row this transaction inserts is its own until commit. One that a
        -- concurrent creator committed first is pinned instead.
        INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms, lock_key)
        VALUES (p_queue_id, p_channel, lonnymq._now_ms(), lonnymq._channel_lock_key(p_queue_id, p_channel))
        ON CONFLICT (queue_id, name) DO NOTHING
        RETURNING * INTO v_channel;
        EXIT WHEN v_channel.id IS NOT NULL;
        v_channel := lonnymq._pin_channel(
            (SELECT c.id FROM lonnymq.channel c WHERE c.queue_id = p_queue_id AND c.name = p_channel));
        EXIT WHEN v_channel.id IS NOT NULL;
    END LOOP;
    RETURN v_channel;
END
$$;
