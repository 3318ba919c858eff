-- A MEASURING INSTRUMENT, NOT A DEQUEUE: never installed by the extension, and wrong
-- outside the one case it handles. It answers one question: how much server CPU would a
-- single dequeue save if its control flow were rewritten as plainly as the original
-- LonnyMQ's (a handful of statements in one function, each row by its key, the delivery
-- returned from the claim), on lonnymq's own tables and indexes?
--
-- It keeps what every dequeue of bench/ab_dequeue.py's clean queue runs: the queue by
-- name, the recovery probe, the hint probe (and absorbing them), the round's channel
-- locked, its head claimed with the drained check, its turn recorded. It drops, so that
-- the number is a lower bound: redelivery of expired locks, the channel-less messages'
-- turn, the held path, dead-lettering, paused queues, accounting (locked_count), and the
-- head lock before a drained channel's head is raised (it clears the head whatever
-- producers are doing, which can strand a message: never use it on real traffic).
--
--   bench/cluster start
--   .venv/bin/python bench/ab_dequeue.py sql/50_dequeue.sql bench/prototypes/dequeue_lower_bound.sql \
--       --name s11-lower-bound
--
-- It has message_dequeue's signature and settings, so that it replaces that function and runs
-- under the same plans' settings.
--
-- Results: bench/README.md, "A lower bound for a rewrite of the dequeue's control flow".
CREATE OR REPLACE FUNCTION lonnymq.message_dequeue(queue text, lock_ms bigint, max_messages integer DEFAULT 1)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now_ms bigint := lonnymq._now_ms();
    v_queue_id integer;
    v_channel lonnymq.channel;
    v_id bigint;
    v_content bytea;
    v_state bytea;
    v_attempts bigint;
    v_dequeue_ms bigint;
    v_priority integer;
    v_drained boolean;
    v_seq bigint;
BEGIN
    SELECT q.id INTO v_queue_id FROM lonnymq.queue q WHERE q.name = message_dequeue.queue;
    PERFORM 1 FROM lonnymq.message m
    WHERE m.queue_id = v_queue_id AND m.locked_until_ms <= v_now_ms
    ORDER BY m.locked_until_ms LIMIT 1;
    IF EXISTS (SELECT 1 FROM lonnymq.channel_hint h WHERE h.queue_id = v_queue_id AND h.dequeue_ms <= v_now_ms) THEN
        PERFORM lonnymq._absorb_hints(v_queue_id, v_now_ms, 3);
    END IF;
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = v_queue_id AND c.ready_ms <= v_now_ms AND NOT c.paused
    ORDER BY c.ready_ms, c.turn_seq, c.id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED;
    IF v_channel.id IS NULL THEN
        RETURN;
    END IF;
    UPDATE lonnymq.message m
    SET num_attempts = m.num_attempts + 1, locked_until_ms = v_now_ms + lock_ms
    WHERE m.id = (SELECT h.id FROM lonnymq.message h
                  WHERE h.queue_id = v_queue_id AND h.channel_id = v_channel.id
                    AND h.locked_until_ms IS NULL AND h.dequeue_ms <= v_now_ms
                  ORDER BY h.dequeue_ms, h.id
                  LIMIT 1
                  FOR UPDATE SKIP LOCKED)
    RETURNING m.id, m.content, m.state, m.num_attempts, m.dequeue_ms, m.priority,
              NOT EXISTS (SELECT 1 FROM lonnymq.message o
                          WHERE o.queue_id = v_queue_id AND o.channel_id = v_channel.id
                            AND o.locked_until_ms IS NULL AND o.dequeue_ms <= v_now_ms
                            AND (o.dequeue_ms, o.id) > (m.dequeue_ms, m.id))
    INTO v_id, v_content, v_state, v_attempts, v_dequeue_ms, v_priority, v_drained;
    v_seq := pg_catalog.nextval('lonnymq.turn_seq');
    UPDATE lonnymq.channel c
    SET last_turn_ms = v_now_ms, turn_seq = v_seq,
        head_ms = CASE WHEN v_drained THEN NULL ELSE c.head_ms END,
        ready_ms = lonnymq._ready_ms(CASE WHEN v_drained THEN NULL ELSE c.head_ms END, v_now_ms,
                                     c.release_interval_ms, c.locked_count, c.max_concurrency, v_seq)
    WHERE c.id = v_channel.id;
    RETURN QUERY SELECT v_id, v_channel.name, v_content, v_state, v_attempts,
                        lonnymq._dequeue_at(v_dequeue_ms, v_priority), false;
END
$$;
