-- ===========================================================================
-- Operator controls: pause and resume a channel or a whole queue.
-- A paused channel leaves channel_ready_idx (its predicate says NOT paused)
-- and a paused queue is seen in the queue row message_dequeue reads anyway,
-- so pausing adds no probe to dequeue (SPEC 3.10, 3.15). Work handed out
-- before the pause finishes: it settles normally, and an expired lock is
-- redelivered as usual. Producers keep enqueueing.
-- ===========================================================================

-- Sets a channel's paused flag. The row lock waits for a dequeue or settle of
-- the channel in progress (they hold the row briefly); a dequeue that starts
-- later rechecks the flag when it locks the row, so none serves the channel
-- once this commits. Nothing else changes: ready_ms is kept, so resuming
-- puts the channel back exactly where it was in the rotation.
CREATE OR REPLACE FUNCTION lonnymq._channel_set_paused(p_queue text, p_channel text, p_paused boolean) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue_id integer;
    v_channel lonnymq.channel;
BEGIN
    PERFORM lonnymq._check_name(p_queue, 'queue', false);
    PERFORM lonnymq._check_name(p_channel, 'channel', false);
    v_queue_id := lonnymq._queue_id(p_queue, false);
    -- Model A: FOR UPDATE first, like channel_set: waits for producers in
    -- flight (their pins), whose messages the park below must see.
    PERFORM 1 FROM lonnymq.channel c WHERE c.queue_id = v_queue_id AND c.name = p_channel FOR UPDATE;
    UPDATE lonnymq.channel c SET paused = p_paused
    WHERE c.queue_id = v_queue_id AND c.name = p_channel
    RETURNING c.* INTO v_channel;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    -- Model A: a paused channel's messages are parked (unstamped), so the
    -- claim never meets them; resuming puts them back (due: stamped by the
    -- next dequeue; a limited channel: its head designated). Linear in the
    -- channel's messages, on pause and resume only. (A claim in flight is
    -- skipped, not waited for: it delivers that one message.)
    UPDATE lonnymq.message m SET vt = NULL, due_ms = NULL, jump = false, gated = false
    WHERE m.id IN (SELECT x.id FROM lonnymq.message x
                   WHERE x.channel_id = v_channel.id AND x.locked_until_ms IS NULL
                   FOR UPDATE SKIP LOCKED);
    IF NOT p_paused THEN
        IF lonnymq._gated(v_channel.max_concurrency, v_channel.release_interval_ms) THEN
            PERFORM lonnymq._designate(v_channel, lonnymq._now_ms(), false);
        ELSE
            UPDATE lonnymq.message m SET due_ms = m.dequeue_ms
            WHERE m.channel_id = v_channel.id AND m.locked_until_ms IS NULL AND m.vt IS NULL AND m.due_ms IS NULL;
        END IF;
    END IF;
    IF NOT p_paused THEN
        -- Idle workers sleep until told: its waiting work is ready again.
        PERFORM lonnymq._notify('lonnymq', p_queue, 'resumed');
    END IF;
    RETURN CASE WHEN p_paused THEN 'paused' ELSE 'resumed' END;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_set_paused(text, text, boolean) IS 'Pauses or resumes a channel.';

-- Stops dequeue from serving a channel. Status: paused, not_found.
CREATE OR REPLACE FUNCTION lonnymq.channel_pause(queue text, channel text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN lonnymq._channel_set_paused(channel_pause.queue, channel_pause.channel, true);
END
$$;
COMMENT ON FUNCTION lonnymq.channel_pause(text, text) IS 'Stops serving a channel: paused, not_found.';

-- Serves a paused channel again. Status: resumed, not_found.
CREATE OR REPLACE FUNCTION lonnymq.channel_resume(queue text, channel text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN lonnymq._channel_set_paused(channel_resume.queue, channel_resume.channel, false);
END
$$;
COMMENT ON FUNCTION lonnymq.channel_resume(text, text) IS 'Serves a paused channel again: resumed, not_found.';

-- Sets a queue's paused flag. Dequeue never waits for the queue row (it
-- records the channel-less turn with SKIP LOCKED), so this never blocks it.
-- A dequeue whose snapshot predates the commit may still finish its delivery.
CREATE OR REPLACE FUNCTION lonnymq._queue_set_paused(p_queue text, p_paused boolean) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM lonnymq._check_name(p_queue, 'queue', false);
    UPDATE lonnymq.queue q SET paused = p_paused WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF NOT p_paused THEN
        PERFORM lonnymq._notify('lonnymq', p_queue, 'resumed');
    END IF;
    RETURN CASE WHEN p_paused THEN 'paused' ELSE 'resumed' END;
END
$$;
COMMENT ON FUNCTION lonnymq._queue_set_paused(text, boolean) IS 'Pauses or resumes a queue.';

-- Stops dequeue from serving a whole queue. Status: paused, not_found.
CREATE OR REPLACE FUNCTION lonnymq.queue_pause(queue text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN lonnymq._queue_set_paused(queue_pause.queue, true);
END
$$;
COMMENT ON FUNCTION lonnymq.queue_pause(text) IS 'Stops serving a queue: paused, not_found.';

-- Serves a paused queue again. Status: resumed, not_found.
CREATE OR REPLACE FUNCTION lonnymq.queue_resume(queue text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN lonnymq._queue_set_paused(queue_resume.queue, false);
END
$$;
COMMENT ON FUNCTION lonnymq.queue_resume(text) IS 'Serves a paused queue again: resumed, not_found.';
