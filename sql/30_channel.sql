-- ===========================================================================
-- Channels: policy, deletion, and the sweep of idle implicit channels.
-- ===========================================================================

-- Resolves (creating on first use) the channel a producer writes into, and
-- pins it until commit (see _pin_channel): producers never wait for each
-- other or for dequeuers; only channel_set (capacity changes),
-- channel_delete and the sweep exclude them.
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
        INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms)
        VALUES (p_queue_id, p_channel, lonnymq._now_ms())
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
COMMENT ON FUNCTION lonnymq._channel_for_create(integer, text, boolean)
    IS 'Channel of a producer, created on first use, pinned until commit.';

-- Sets a channel's policy, creating the channel if needed. An explicit
-- channel is never swept; channel_delete removes it.
CREATE OR REPLACE FUNCTION lonnymq.channel_set(
    queue text,
    channel text,
    max_concurrency integer DEFAULT NULL,
    release_interval_ms bigint DEFAULT 0,
    max_size bigint DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    retain_completed boolean DEFAULT false
) RETURNS lonnymq.channel
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue_id integer;
    v_channel lonnymq.channel;
    v_live bigint;
BEGIN
    PERFORM lonnymq._check_name(channel_set.queue, 'queue', false);
    PERFORM lonnymq._check_name(channel_set.channel, 'channel', false);
    IF channel_set.max_concurrency IS NOT NULL AND channel_set.max_concurrency < 1 THEN
        PERFORM lonnymq._invalid('max_concurrency must be at least 1 or NULL');
    END IF;
    -- Bounded like lock_ms: a turn time plus the interval must stay a bigint.
    IF channel_set.release_interval_ms IS NULL OR channel_set.release_interval_ms < 0
       OR channel_set.release_interval_ms > 31557600000000 THEN
        PERFORM lonnymq._invalid('release_interval_ms must be between 0 and 1000 years');
    END IF;
    IF channel_set.max_size IS NOT NULL AND channel_set.max_size < 0 THEN
        PERFORM lonnymq._invalid('max_size must be 0 or more, or NULL');
    END IF;
    IF channel_set.max_attempts IS NOT NULL AND channel_set.max_attempts < 1 THEN
        PERFORM lonnymq._invalid('max_attempts must be at least 1 or NULL');
    END IF;
    IF channel_set.retain_completed IS NULL THEN
        PERFORM lonnymq._invalid('retain_completed must not be NULL');
    END IF;

    PERFORM lonnymq._require_read_committed('channel_set');
    v_queue_id := lonnymq._queue_id(channel_set.queue, true);
    INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms)
    VALUES (v_queue_id, channel_set.channel, lonnymq._now_ms())
    ON CONFLICT (queue_id, name) DO NOTHING;
    -- FOR UPDATE waits for every producer and settler in flight (they pin the
    -- row) and for a dequeuer holding it, and keeps new ones out until commit.
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = v_queue_id AND c.name = channel_set.channel
    FOR UPDATE;

    -- Model A: the channel's unlocked messages leave the schedule (parked),
    -- then go back to it under the new policy. A channel without limits:
    -- wait for claims in flight (their row locks; such a claim never waits
    -- for the channel row), then count what is locked exactly. A limited
    -- channel's claim in flight waits for this row to count its slot
    -- (_gate_next): its head is skipped, not waited for, and the count kept.
    IF lonnymq._gated(v_channel.max_concurrency, v_channel.release_interval_ms) THEN
        UPDATE lonnymq.message m SET vt = NULL, due_ms = NULL, jump = false, gated = false
        WHERE m.id IN (SELECT x.id FROM lonnymq.message x
                       WHERE x.channel_id = v_channel.id AND x.locked_until_ms IS NULL
                       FOR UPDATE SKIP LOCKED);
    ELSE
        UPDATE lonnymq.message m SET vt = NULL, due_ms = NULL, jump = false, gated = false
        WHERE m.channel_id = v_channel.id AND m.locked_until_ms IS NULL;
        UPDATE lonnymq.channel c
        SET locked_count = (SELECT pg_catalog.count(*) FROM lonnymq.message m
                            WHERE m.channel_id = c.id AND m.locked_until_ms IS NOT NULL)
        WHERE c.id = v_channel.id;
    END IF;

    IF channel_set.max_size IS NOT NULL THEN
        -- (Re)start the admission count from the exact number of live messages.
        SELECT pg_catalog.count(*) INTO v_live FROM lonnymq.message m
        WHERE m.queue_id = v_queue_id AND m.channel_id = v_channel.id;
        INSERT INTO lonnymq.channel_admission (channel_id, admitted) VALUES (v_channel.id, v_live)
        ON CONFLICT (channel_id) DO UPDATE SET admitted = EXCLUDED.admitted;
    ELSE
        DELETE FROM lonnymq.channel_admission a WHERE a.channel_id = v_channel.id;
    END IF;

    UPDATE lonnymq.channel c
    SET explicit = true,
        max_concurrency = channel_set.max_concurrency,
        release_interval_ms = channel_set.release_interval_ms,
        max_size = channel_set.max_size,
        max_attempts = channel_set.max_attempts,
        retain_completed = channel_set.retain_completed,
        removed_count = 0,
        ready_ms = NULL
    WHERE c.id = v_channel.id
    RETURNING c.* INTO v_channel;
    IF lonnymq._gated(v_channel.max_concurrency, v_channel.release_interval_ms) THEN
        PERFORM lonnymq._designate(v_channel, lonnymq._now_ms(), false);
    ELSIF NOT v_channel.paused THEN
        UPDATE lonnymq.message m SET due_ms = m.dequeue_ms
        WHERE m.channel_id = v_channel.id AND m.locked_until_ms IS NULL AND m.vt IS NULL AND m.due_ms IS NULL;
    END IF;
    RETURN v_channel;
END
$$;
COMMENT ON FUNCTION lonnymq.channel_set(text, text, integer, bigint, bigint, integer, boolean)
    IS 'Creates or updates a channel policy; NULL limits mean unlimited.';

-- Deletes an empty channel. Status: deleted, not_found, not_empty.
CREATE OR REPLACE FUNCTION lonnymq.channel_delete(queue text, channel text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue_id integer;
    v_channel lonnymq.channel;
BEGIN
    PERFORM lonnymq._check_name(channel_delete.queue, 'queue', false);
    PERFORM lonnymq._check_name(channel_delete.channel, 'channel', false);
    PERFORM lonnymq._require_read_committed('channel_delete');
    v_queue_id := lonnymq._queue_id(channel_delete.queue, false);
    IF v_queue_id IS NULL THEN
        RETURN 'not_found';
    END IF;
    -- Waits for the channel's producers and settlers in flight (see _pin_channel).
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = v_queue_id AND c.name = channel_delete.channel
    FOR UPDATE;
    IF v_channel.id IS NULL THEN
        RETURN 'not_found';
    END IF;
    IF EXISTS (SELECT 1 FROM lonnymq.message m
               WHERE m.queue_id = v_queue_id AND m.channel_id = v_channel.id AND m.locked_until_ms IS NULL)
       OR EXISTS (SELECT 1 FROM lonnymq.message m
                  WHERE m.channel_id = v_channel.id AND m.locked_until_ms IS NOT NULL) THEN
        RETURN 'not_empty';
    END IF;
    -- Leftover hints name a missing channel; dequeue discards them as it meets them.
    DELETE FROM lonnymq.channel_admission a WHERE a.channel_id = v_channel.id;
    DELETE FROM lonnymq.channel c WHERE c.id = v_channel.id;
    RETURN 'deleted';
END
$$;
COMMENT ON FUNCTION lonnymq.channel_delete(text, text) IS 'Deletes an empty channel: deleted, not_found, not_empty.';

-- Removes implicit channels that have been empty for lonnymq.channel_idle_ms
-- (default one minute). Skips, never waits for, channels in use. Returns the
-- number removed. Runs on every channel creation (two at a time) and from the
-- maintenance job.
CREATE OR REPLACE FUNCTION lonnymq.channel_sweep(max_channels integer DEFAULT 1000) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_candidate record;
    v_removed integer := 0;
    v_idle_before_ms bigint;
BEGIN
    IF channel_sweep.max_channels IS NULL OR channel_sweep.max_channels < 0 THEN
        PERFORM lonnymq._invalid('max_channels must be 0 or more');
    END IF;
    -- An older snapshot could miss a message committed since and remove its
    -- channel: outside READ COMMITTED the sweep stands aside (later ones run).
    IF NOT lonnymq._read_committed() THEN
        RETURN 0;
    END IF;
    v_idle_before_ms := lonnymq._now_ms() - lonnymq._channel_idle_ms();
    FOR v_candidate IN
        SELECT c.id, c.queue_id, c.name
        FROM lonnymq.channel c
        WHERE NOT c.explicit AND c.head_ms IS NULL AND c.locked_count = 0 AND NOT c.paused
          AND c.last_turn_ms <= v_idle_before_ms
        ORDER BY c.last_turn_ms
        LIMIT channel_sweep.max_channels
        -- (a channel pinned by a producer in flight is skipped: left be)
        FOR UPDATE SKIP LOCKED
    LOOP
        -- Committed messages whose hint is not due yet keep it alive; with the
        -- row lock held, record its head now so it stops being a candidate.
        IF EXISTS (SELECT 1 FROM lonnymq.message m
                   WHERE m.queue_id = v_candidate.queue_id AND m.channel_id = v_candidate.id
                     AND m.locked_until_ms IS NULL) THEN
            PERFORM lonnymq._channel_refresh(v_candidate.id);
            CONTINUE;
        END IF;
        -- An unaccounted channel does not count its messages in flight: look.
        CONTINUE WHEN EXISTS (SELECT 1 FROM lonnymq.message m
                              WHERE m.channel_id = v_candidate.id AND m.locked_until_ms IS NOT NULL);
        DELETE FROM lonnymq.channel c WHERE c.id = v_candidate.id;
        v_removed := v_removed + 1;
    END LOOP;
    RETURN v_removed;
END
$$;
COMMENT ON FUNCTION lonnymq.channel_sweep(integer) IS 'Removes idle empty implicit channels; returns how many.';
