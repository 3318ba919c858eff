-- A bound, not a model (issue 37): the original LonnyMQ's near-empty model inside lonnymq's
-- tables and API shell, applied over an installed lonnymq as bench/lifecycle_pair.sh's B.sql.
-- message_create locks the channel row and lowers its head itself (producers wait for
-- dequeuers, as in the original); message_dequeue is four plain statements: the queue with
-- an expired-lock probe, the fairest ready channel, the claim (with the next head), the turn.
-- No hints, head locks, wake-ups, deduplication, capacity, limits, held channels or batches:
-- what is left is the least any model on these tables and this shell can run.
--
--   PAIR_SHAPE=one bench/lifecycle_pair.sh bench/bound_original_model.sql 4 bound
--   bench/lifecycle_pair.sh bench/bound_original_model.sql 4 bound-w1
--
-- Variants measured with it: the functions' SECURITY DEFINER and SETs removed (with
-- plan_cache_mode and enable_seqscan set on the database instead), and then also
-- channel_idle_idx, channel_periodic_idx and lock_key's generation dropped.

-- The 100 channels the pgbench scripts use, created the ordinary way before the create
-- below (which only serves existing channels) replaces it.
SELECT count(lonnymq.message_create('bench', 'c' || i, '\x00'::bytea)) FROM generate_series(1, 100) i;
CREATE OR REPLACE FUNCTION lonnymq.message_create(
    queue text, channel text, content bytea, dequeue_at timestamptz DEFAULT NULL,
    delay_ms bigint DEFAULT 0, priority integer DEFAULT 0, dedup_key text DEFAULT NULL,
    state bytea DEFAULT NULL, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_dequeue_ms bigint := lonnymq._now_ms();
    v_queue_id integer;
    v_channel lonnymq.channel;
BEGIN
    SELECT c.* INTO v_channel FROM lonnymq.queue q JOIN lonnymq.channel c ON c.queue_id = q.id
    WHERE q.name = message_create.queue AND c.name = message_create.channel
    FOR NO KEY UPDATE OF c;
    INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, state, dequeue_ms)
    VALUES (v_channel.queue_id, v_channel.id, message_create.content, message_create.state, v_dequeue_ms)
    RETURNING m.id INTO message_create.id;
    IF v_channel.head_ms IS NULL OR v_dequeue_ms < v_channel.head_ms THEN
        UPDATE lonnymq.channel c SET head_ms = v_dequeue_ms,
            ready_ms = lonnymq._ready_ms(v_dequeue_ms, c.last_turn_ms, c.release_interval_ms,
                                         c.locked_count, c.max_concurrency, c.turn_seq)
        WHERE c.id = v_channel.id;
    END IF;
    status := 'created';
END
$$;

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
    v_expired boolean;
    v_channel lonnymq.channel;
    v_next_ms bigint;
    v_seq bigint;
BEGIN
    IF NOT lonnymq._heap_warmed() THEN
        PERFORM lonnymq._warm_heap(1048576);
    END IF;
    SELECT q.id, EXISTS (SELECT 1 FROM lonnymq.message m WHERE m.queue_id = q.id AND m.locked_until_ms <= v_now_ms)
    INTO v_queue_id, v_expired FROM lonnymq.queue q WHERE q.name = message_dequeue.queue;
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = v_queue_id AND c.ready_ms <= v_now_ms AND NOT c.paused
    ORDER BY c.ready_ms, c.turn_seq, c.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE lonnymq.message m
    SET num_attempts = m.num_attempts + 1, locked_until_ms = v_now_ms + message_dequeue.lock_ms
    WHERE m.id = (SELECT h.id FROM lonnymq.message h
                  WHERE h.queue_id = v_queue_id AND h.channel_id = v_channel.id
                    AND h.locked_until_ms IS NULL AND h.dequeue_ms <= v_now_ms
                  ORDER BY h.dequeue_ms, h.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING m.id, m.content, m.state, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority),
              (SELECT o.dequeue_ms FROM lonnymq.message o
               WHERE o.queue_id = v_queue_id AND o.channel_id = v_channel.id AND o.locked_until_ms IS NULL
                 AND (o.dequeue_ms, o.id) > (m.dequeue_ms, m.id) ORDER BY o.dequeue_ms, o.id LIMIT 1)
    INTO id, content, state, num_attempts, dequeue_at, v_next_ms;
    v_seq := pg_catalog.nextval('lonnymq.turn_seq');
    UPDATE lonnymq.channel c
    SET last_turn_ms = v_now_ms, turn_seq = v_seq, head_ms = v_next_ms,
        ready_ms = lonnymq._ready_ms(v_next_ms, v_now_ms, c.release_interval_ms, c.locked_count,
                                     c.max_concurrency, v_seq)
    WHERE c.id = v_channel.id;
    IF id IS NOT NULL THEN
        channel := v_channel.name;
        recovered := false;
        RETURN NEXT;
    END IF;
END
$$;
