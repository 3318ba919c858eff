-- A PROTOTYPE, NOT INSTALLED: _dequeue_single with _serve_channel's claim and turn inline,
-- one PL/pgSQL level and one OUT record fewer per single dequeue on channels (the claim,
-- the raise and the turn as in sql/50_dequeue.sql at 5078f61; nextval and the slot count
-- moved into the turn's update instead of their own expressions). It asks one question:
-- what does a single dequeue save when its steps are not split across functions?
--
--   bench/cluster start
--   bench/prototypes/lifecycle_pair.sh bench/prototypes/dequeue_fused_single.sql 5 s19-fused
--
-- Results: bench/README.md, "Session 19".
CREATE OR REPLACE FUNCTION lonnymq._dequeue_single(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                   p_channelless boolean,
                                                   OUT id bigint, OUT channel text, OUT content bytea,
                                                   OUT state bytea, OUT num_attempts bigint,
                                                   OUT dequeue_at timestamptz, OUT tried bigint[])
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_channel lonnymq.channel;
    v_drained boolean;
    v_head_ms bigint;
    v_raise boolean;
BEGIN
    tried := '{}'::bigint[];
    IF p_channelless THEN
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        WHERE m.id = (SELECT f.id FROM lonnymq.message f
                      WHERE f.queue_id = p_queue.id AND f.channel_id IS NULL
                        AND f.locked_until_ms IS NULL AND f.dequeue_ms <= p_now_ms
                      ORDER BY f.dequeue_ms, f.id
                      LIMIT 1
                      FOR UPDATE SKIP LOCKED)
        RETURNING m.id, m.content, m.state, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority)
        INTO id, content, state, num_attempts, dequeue_at;
        RETURN;
    END IF;
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused
    ORDER BY c.ready_ms, c.turn_seq, c.id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_channel.max_attempts IS NOT NULL THEN
        PERFORM lonnymq._dead_letter_heads(v_channel, p_now_ms, true, p_queue.name);
    END IF;
    UPDATE lonnymq.message m
    SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
    WHERE m.id = (SELECT h.id FROM lonnymq.message h
                  WHERE h.queue_id = p_queue.id AND h.channel_id = v_channel.id
                    AND h.locked_until_ms IS NULL AND h.dequeue_ms <= p_now_ms
                    AND (v_channel.max_attempts IS NULL OR h.num_attempts < v_channel.max_attempts)
                  ORDER BY h.dequeue_ms, h.id
                  LIMIT 1
                  FOR UPDATE SKIP LOCKED)
    RETURNING m.id, m.content, m.state, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority),
              NOT EXISTS (SELECT 1 FROM lonnymq.message o
                          WHERE o.queue_id = p_queue.id AND o.channel_id = v_channel.id
                            AND o.locked_until_ms IS NULL AND o.dequeue_ms <= p_now_ms
                            AND (o.dequeue_ms, o.id) > (m.dequeue_ms, m.id))
    INTO id, content, state, num_attempts, dequeue_at, v_drained;
    IF NOT FOUND THEN
        PERFORM lonnymq._channel_settle_key(v_channel, p_now_ms, true);
        tried := ARRAY[v_channel.id];
        RETURN;
    END IF;
    channel := v_channel.name;
    v_raise := v_drained AND lonnymq._take_head_lock(v_channel.lock_key);
    IF v_raise THEN
        SELECT m.dequeue_ms INTO v_head_ms FROM lonnymq.message m
        WHERE m.queue_id = p_queue.id AND m.channel_id = v_channel.id AND m.locked_until_ms IS NULL
        ORDER BY m.dequeue_ms, m.id
        LIMIT 1;
    END IF;
    UPDATE lonnymq.channel c
    SET locked_count = c.locked_count + lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)::integer,
        last_turn_ms = p_now_ms,
        turn_seq = x.seq,
        head_ms = CASE WHEN v_raise THEN v_head_ms ELSE c.head_ms END,
        ready_ms = lonnymq._ready_ms(CASE WHEN v_raise THEN v_head_ms ELSE c.head_ms END, p_now_ms,
                                     c.release_interval_ms,
                                     c.locked_count + lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)::integer,
                                     c.max_concurrency, x.seq)
    FROM (SELECT pg_catalog.nextval('lonnymq.turn_seq') AS seq) x
    WHERE c.id = v_channel.id;
END
$$;
