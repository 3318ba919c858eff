-- The held path of 1.7 at 88dea4b (_dequeue_many reading whether a channel is
-- ready after step 0 found none free; _serve_held trying the channel as a
-- round of one, then reading it afresh, then claiming), over 1.7 as it is
-- now: the A/B of session 15. The old _dequeue_held and _serve_held have
-- other signatures than today's, so they sit beside them.
CREATE OR REPLACE FUNCTION lonnymq._serve_held(p_queue lonnymq.queue, p_channel lonnymq.channel, p_now_ms bigint,
                                               p_lock_ms bigint, p_want integer, p_channelless_ms bigint,
                                               p_raises integer,
                                               OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                               OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
    v_round record;
BEGIN
    -- Its holder may have gone meanwhile: then it is served as a free channel.
    -- (Not one of p_tried: the caller picked it among the others.)
    v_round := lonnymq._dequeue_round(p_queue, p_now_ms, p_lock_ms, 1, p_channelless_ms, '{}',
                                      ARRAY[p_channel.id], p_raises);
    ids := v_round.ids; served := v_round.served; tried := v_round.tried; raised := v_round.raised;
    IF pg_catalog.cardinality(ids) + pg_catalog.cardinality(tried) > 0 THEN
        RETURN;
    END IF;
    -- Still held. Read afresh: a policy change that committed after the pick's
    -- snapshot (but before the pin) may have made it accounted, and
    -- accounted channels are never served while held.
    SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = p_channel.id;
    IF v_channel.id IS NOT NULL AND NOT v_channel.paused
       AND NOT lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms, v_channel.max_size) THEN
        IF v_channel.max_attempts IS NOT NULL THEN
            PERFORM lonnymq._dead_letter_heads(v_channel, p_now_ms, false, p_queue.name);
        END IF;
        WITH claimed AS (
            UPDATE lonnymq.message m
            SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
            -- (By key, whatever the plan's guess of the LIMIT: see _dequeue_channelless.)
            WHERE m.id = ANY (ARRAY(SELECT s.id FROM lonnymq.message s
                                    WHERE s.queue_id = p_queue.id AND s.channel_id = v_channel.id
                                      AND s.locked_until_ms IS NULL AND s.dequeue_ms <= p_now_ms
                                      AND (v_channel.max_attempts IS NULL
                                           OR s.num_attempts < v_channel.max_attempts)
                                    ORDER BY s.dequeue_ms, s.id
                                    LIMIT p_want
                                    FOR UPDATE SKIP LOCKED))
            RETURNING m.id, m.dequeue_ms
        )
        SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.dequeue_ms, k.id), '{}') INTO ids FROM claimed k;
        IF pg_catalog.cardinality(ids) > 0 THEN
            served := ARRAY[p_channel.id];
            RETURN;
        END IF;
    END IF;
    tried := ARRAY[p_channel.id];
END
$$;

CREATE OR REPLACE FUNCTION lonnymq._dequeue_held(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                 p_want integer, p_channelless_ms bigint, p_tried bigint[],
                                                 p_hinted bigint[], p_raises integer,
                                                 OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                                 OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_held lonnymq.channel[];
    v_channel lonnymq.channel;
    v_step record;
BEGIN
    ids := '{}'; served := '{}'; tried := '{}'; raised := 0;
    -- Whether a held channel may be served depends on its current policy,
    -- which an older snapshot may not show: outside READ COMMITTED, never.
    IF NOT lonnymq._read_committed() THEN
        RETURN;
    END IF;
    -- Pinned, without waiting (see _pin_channel).
    SELECT coalesce(pg_catalog.array_agg(x.ch ORDER BY x.ready_ms, x.turn_seq, x.id), '{}') INTO v_held
    FROM (SELECT c AS ch, c.ready_ms, c.turn_seq, c.id FROM lonnymq.channel c
          WHERE c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused AND c.id <> ALL (p_tried)
            AND (p_channelless_ms IS NULL
                 OR (c.ready_ms, c.turn_seq) < (p_channelless_ms, p_queue.channelless_turn_seq))
            AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
          ORDER BY c.ready_ms, c.turn_seq, c.id
          LIMIT p_want
          FOR KEY SHARE SKIP LOCKED) x;
    IF pg_catalog.cardinality(v_held) = 0 AND p_channelless_ms IS NULL THEN
        SELECT coalesce(pg_catalog.array_agg(x.ch ORDER BY x.last_turn_ms, x.turn_seq, x.id), '{}') INTO v_held
        FROM (SELECT c AS ch, c.last_turn_ms, c.turn_seq, c.id FROM lonnymq.channel c
              WHERE c.id = ANY (p_hinted) AND c.id <> ALL (p_tried) AND NOT c.paused
                AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
              ORDER BY c.last_turn_ms, c.turn_seq, c.id
              LIMIT p_want
              FOR KEY SHARE SKIP LOCKED) x;
    END IF;
    FOREACH v_channel IN ARRAY v_held LOOP
        EXIT WHEN pg_catalog.cardinality(ids) >= p_want;
        v_step := lonnymq._serve_held(p_queue, v_channel, p_now_ms, p_lock_ms, p_want - pg_catalog.cardinality(ids),
                                      p_channelless_ms, p_raises - raised);
        ids := ids || v_step.ids;
        served := served || v_step.served;
        tried := tried || v_step.tried;
        raised := raised + v_step.raised;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lonnymq._dequeue_many(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                 p_want integer, p_channelless_ms bigint, p_expired boolean,
                                                 p_channels_ready boolean, p_hinted bigint[], p_tried bigint[],
                                                 p_held boolean, OUT ids bigint[], OUT recovered integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue lonnymq.queue := p_queue;  -- (its channel-less turn moves on below)
    v_channelless_ms bigint := p_channelless_ms;
    v_channels_ready boolean;    -- whether any channel may have something ready
    v_tried bigint[] := p_tried; -- channels taken without success: passed over
    v_served bigint[] := '{}';   -- channels this call served (it holds their rows; may repeat)
    v_only bigint[];             -- once a round came up short: look only at those
    v_held boolean := p_held;    -- the next channel step serves a held channel
    -- Head locks this call may still take: each channel tried used one.
    v_raises integer := lonnymq._head_lock_budget() - pg_catalog.cardinality(p_tried);
    v_want integer;              -- what the next step may claim
    v_locked integer;            -- channels the step took: those it served and those it tried
    v_turn_seq bigint;
    v_taken bigint[];
    v_step record;
BEGIN
    ids := '{}';
    IF p_expired THEN
        ids := lonnymq._dequeue_expired(p_queue, p_now_ms, p_lock_ms, p_want);
    END IF;
    recovered := pg_catalog.cardinality(ids);
    -- queue_pause: no fresh delivery. (Expired locks above are work handed
    -- out before the pause, redelivered as for a paused channel.)
    IF p_queue.paused OR recovered >= p_want THEN
        RETURN;
    END IF;
    -- A busy channel with due hints counts as ready for the held step.
    -- Otherwise what the caller saw, or read now when it did not look (or
    -- what it saw may have changed since: a due hint absorbed, a slot freed
    -- by a dead-lettered expired delivery).
    v_channels_ready := pg_catalog.cardinality(p_hinted) > 0 OR p_channels_ready;
    IF v_channels_ready IS NULL THEN
        v_channels_ready := EXISTS (SELECT 1 FROM lonnymq.channel c
                                    WHERE c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused);
    END IF;
    -- With no channel ready, the channel-less messages are all there is: as
    -- many as wanted, in one statement.
    IF v_channelless_ms IS NOT NULL AND NOT v_channels_ready THEN
        ids := ids || lonnymq._dequeue_channelless(p_queue, p_now_ms, p_lock_ms,
                                                   p_want - pg_catalog.cardinality(ids), NULL);
    END IF;

    WHILE v_channels_ready AND pg_catalog.cardinality(ids) < p_want LOOP
        -- Channels: a round of free ones or, once there is none and the
        -- channel-less messages had their chance, a held one.
        v_want := p_want - pg_catalog.cardinality(ids);
        IF v_held THEN
            v_step := lonnymq._dequeue_held(v_queue, p_now_ms, p_lock_ms, v_want, v_channelless_ms, v_tried,
                                            p_hinted, v_raises);
        ELSE
            v_step := lonnymq._dequeue_round(v_queue, p_now_ms, p_lock_ms, v_want, v_channelless_ms, v_tried,
                                             v_only, v_raises);
        END IF;
        ids := ids || v_step.ids;
        v_served := v_served || v_step.served;
        v_tried := v_tried || v_step.tried;
        v_raises := v_raises - v_step.raised;
        v_locked := pg_catalog.cardinality(v_step.ids) + pg_catalog.cardinality(v_step.tried);
        IF v_locked > 0 THEN
            -- A round that locked fewer channels than it wanted, and not
            -- because of the channel-less turn: every other ready channel is
            -- held by someone else. Later rounds look only at the channels
            -- this call holds instead of walking past the others again. (A
            -- round that locked as many as it wanted but found some with
            -- nothing due, "tried", says nothing about the others: the next
            -- round looks at all of them again, passing over the tried.)
            IF NOT v_held AND v_locked < v_want AND v_channelless_ms IS NULL THEN
                v_only := v_served;
            END IF;
            v_held := false;
            CONTINUE;
        END IF;
        EXIT WHEN v_held;  -- nothing ready anywhere
        IF v_channelless_ms IS NULL THEN
            v_held := true;
            CONTINUE;
        END IF;
        -- The channel-less messages' turn, against the channels: one message
        -- and its turn recorded, so every ready channel comes before it again.
        v_turn_seq := pg_catalog.nextval('lonnymq.turn_seq');
        v_taken := lonnymq._dequeue_channelless(v_queue, p_now_ms, p_lock_ms, v_want, v_turn_seq);
        ids := ids || v_taken;
        IF pg_catalog.cardinality(v_taken) = 0 THEN
            v_channelless_ms := NULL;  -- none left: the channel-less part is done
        ELSE
            v_channelless_ms := p_now_ms;
            v_queue.channelless_turn_seq := v_turn_seq;
        END IF;
    END LOOP;
END
$$;

