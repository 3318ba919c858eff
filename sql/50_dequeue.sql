-- ===========================================================================
-- Dequeue: expired locks first, then the fairest ready channel.
-- Never waits for a lock (every probe is SKIP LOCKED), so it cannot deadlock
-- and a busy row only ever sends it to the next candidate.
-- ===========================================================================

-- Delivers a message the caller has locked: the next attempt, locked until
-- p_locked_until_ms. Returns the updated row.
CREATE OR REPLACE FUNCTION lonnymq._claim(p_id bigint, p_locked_until_ms bigint) RETURNS lonnymq.message
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_message lonnymq.message;
BEGIN
    UPDATE lonnymq.message m
    SET num_attempts = m.num_attempts + 1, locked_until_ms = p_locked_until_ms
    WHERE m.id = p_id
    RETURNING m.* INTO v_message;
    RETURN v_message;
END
$$;
COMMENT ON FUNCTION lonnymq._claim(bigint, bigint) IS 'Locks a message for its next delivery.';

-- Dequeues up to max_messages messages, locking each for lock_ms. Behaves
-- like max_messages single dequeues in a row (SPEC 3.13).
CREATE OR REPLACE FUNCTION lonnymq.message_dequeue(queue text, lock_ms bigint, max_messages integer DEFAULT 1)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue lonnymq.queue;
    v_now_ms bigint;
    v_delivered integer := 0;
    v_message lonnymq.message;
    v_channel lonnymq.channel;
    v_exclusive boolean;         -- this call holds the channel row
    v_accounted boolean;
    v_next_head_ms bigint;
    v_seq bigint;
    v_free_ms bigint;            -- scheduling key of the channel-less messages
    v_free_exhausted boolean := false;
    v_recovery_exhausted boolean := false;
    v_candidates lonnymq.channel[] := '{}';  -- free channels this call holds, fairest first
    v_next integer := 1;                     -- the next of them to serve
    v_row lonnymq.channel;
    v_rounds_short boolean := false;         -- a round found fewer free channels than needed
    v_served bigint[] := '{}';               -- channels whose turn this call recorded
    -- Per channel taken from in this call: the (dequeue_ms, id) of the last
    -- message taken, so the next probe starts after it instead of walking
    -- past this call's own claims again.
    v_after_channels bigint[] := '{}';
    v_after_ms bigint[] := '{}';
    v_after_ids bigint[] := '{}';
    v_after integer;
    v_shared lonnymq.channel;                -- the held channel this call shares
    v_bulk lonnymq.message[];                -- messages claimed from it in one statement
    v_has_channels boolean;
    v_skipped bigint[] := '{}';  -- expired messages whose channel was busy
    v_tried bigint[] := '{}';    -- channels found busy or stale in this call
    v_hinted_busy bigint[];      -- busy channels with due hints: ready, maybe unrecorded
    v_emit_channel text;         -- the delivery being returned: its channel name
    v_emit_recovered boolean;    -- and whether it is a redelivery
BEGIN
    PERFORM lonnymq._check_name(message_dequeue.queue, 'queue', false);
    IF message_dequeue.lock_ms IS NULL OR message_dequeue.lock_ms < 1
       OR message_dequeue.lock_ms > 31557600000000 THEN
        PERFORM lonnymq._invalid('lock_ms must be between 1 and 1000 years');
    END IF;
    IF message_dequeue.max_messages IS NULL OR message_dequeue.max_messages < 1
       OR message_dequeue.max_messages > 10000 THEN
        PERFORM lonnymq._invalid('max_messages must be between 1 and 10000');
    END IF;

    SELECT q.* INTO v_queue FROM lonnymq.queue q WHERE q.name = message_dequeue.queue;
    IF v_queue.id IS NULL THEN
        RETURN;
    END IF;
    v_now_ms := lonnymq._now_ms();
    -- Fold in only as many channels as this call can serve (plus a little):
    -- each refreshed channel stays held until commit, and channels held by one
    -- dequeuer are passed over (or shared without a turn) by the others.
    v_hinted_busy := lonnymq._absorb_hints(v_queue.id, v_now_ms, message_dequeue.max_messages + 2);
    v_has_channels := EXISTS (SELECT 1 FROM lonnymq.channel c
                              WHERE c.queue_id = v_queue.id AND c.ready_ms IS NOT NULL)
                      OR pg_catalog.cardinality(v_hinted_busy) > 0;

    WHILE v_delivered < message_dequeue.max_messages LOOP
        -- Every path that delivers leaves this block with EXIT pick; paths
        -- that only skip or clean up CONTINUE the loop instead.
        <<pick>>
        BEGIN
            -- 1. Recovery: a lock that expired is redelivered before fresh work.
            --    Its channel slot is still counted, so limits are unaffected.
            --    Once none is found, none is looked for again in this call: a
            --    lock expiring meanwhile is served by the next call.
            IF NOT v_recovery_exhausted THEN
                SELECT m.* INTO v_message FROM lonnymq.message m
                WHERE m.queue_id = v_queue.id AND m.locked_until_ms IS NOT NULL
                  AND m.locked_until_ms <= v_now_ms AND m.id <> ALL (v_skipped)
                ORDER BY m.locked_until_ms, m.id
                LIMIT 1
                FOR UPDATE SKIP LOCKED;
                v_recovery_exhausted := v_message.id IS NULL;
            END IF;
            IF v_message.id IS NOT NULL THEN
                v_channel := NULL;
                IF v_message.channel_id IS NOT NULL THEN
                    SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = v_message.channel_id;
                END IF;
                IF v_channel.max_attempts IS NOT NULL AND v_message.num_attempts >= v_channel.max_attempts THEN
                    -- Dead-letter: the channel's locks are needed, but without waiting.
                    IF NOT lonnymq._channel_share(v_queue.id, v_channel.name, false) THEN
                        v_skipped := v_skipped || v_message.id;
                    ELSIF lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms, v_channel.max_size)
                          AND NOT EXISTS (SELECT 1 FROM lonnymq.channel c WHERE c.id = v_channel.id
                                          FOR NO KEY UPDATE SKIP LOCKED) THEN
                        v_skipped := v_skipped || v_message.id;
                    ELSE
                        PERFORM lonnymq._settle_locked(v_message, 'dead',
                            pg_catalog.format('lock expired after attempt %s of %s', v_message.num_attempts,
                                              v_channel.max_attempts));
                        PERFORM lonnymq._notify('lonnymq_dead', v_queue.name, 'dead');
                        -- The freed slot may have made a saturated channel ready.
                        v_has_channels := true;
                    END IF;
                    v_message := NULL;
                    CONTINUE;
                END IF;
                v_message := lonnymq._claim(v_message.id, v_now_ms + message_dequeue.lock_ms);
                v_emit_channel := v_channel.name;
                v_emit_recovered := true;
                EXIT pick;
            END IF;

            -- 2. The channel-less messages compete as one more channel whose last
            --    turn is kept on the queue row.
            v_free_ms := NULL;
            IF NOT v_free_exhausted THEN
                SELECT greatest(m.dequeue_ms, v_queue.nochannel_turn_ms) INTO v_free_ms
                FROM lonnymq.message m
                WHERE m.queue_id = v_queue.id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
                  AND m.dequeue_ms <= v_now_ms
                ORDER BY m.dequeue_ms, m.id
                LIMIT 1;
                -- None now: none is looked for again in this call.
                v_free_exhausted := v_free_ms IS NULL;
            END IF;

            -- 3. The channel that has waited longest, if it beats the channel-less
            --    turn. First choice: one no other transaction holds; its turn is
            --    then recorded exactly. Otherwise a held channel without
            --    accounting is shared: its messages are taken in parallel, and the
            --    holder records the turn.
            v_channel := NULL;
            v_exclusive := false;
            IF v_has_channels THEN
                -- Free channels are taken a round at a time: one walk of the
                -- index locks as many as this call still needs, fairest first.
                -- Serving them in that order is what single dequeues in a row
                -- do: a channel served gets a key (this turn) after all of
                -- them, and each still beats the channel-less turn, whose key
                -- only grows. The next round starts when they are used up.
                -- Once a round came up short, every other ready channel was
                -- held by someone else: later rounds look only at the
                -- channels this call holds, instead of walking past the held
                -- ones again for every message.
                IF v_next > pg_catalog.cardinality(v_candidates) AND NOT v_rounds_short THEN
                    -- Lock order: the channel's advisory lock (shared, tried in the
                    -- WHERE clause, which runs before the row lock), then its row.
                    SELECT coalesce(pg_catalog.array_agg(r.ch ORDER BY r.ready_ms, r.turn_seq, r.id), '{}')
                    INTO v_candidates
                    FROM (SELECT c AS ch, c.ready_ms, c.turn_seq, c.id FROM lonnymq.channel c
                          WHERE c.queue_id = v_queue.id AND c.ready_ms <= v_now_ms AND c.id <> ALL (v_tried)
                            AND (v_free_ms IS NULL
                                 OR (c.ready_ms, c.turn_seq) < (v_free_ms, v_queue.nochannel_turn_seq))
                            AND pg_catalog.pg_try_advisory_xact_lock_shared(
                                    lonnymq._lock_class(), c.lock_key)
                          ORDER BY c.ready_ms, c.turn_seq, c.id
                          LIMIT message_dequeue.max_messages - v_delivered
                          FOR NO KEY UPDATE SKIP LOCKED) r;
                    v_next := 1;
                    -- (Short because of the channel-less turn does not count.)
                    v_rounds_short := v_free_ms IS NULL
                        AND pg_catalog.cardinality(v_candidates) < message_dequeue.max_messages - v_delivered;
                ELSIF v_next > pg_catalog.cardinality(v_candidates) AND pg_catalog.cardinality(v_served) > 0 THEN
                    -- This call already holds these rows: looked up by id.
                    SELECT coalesce(pg_catalog.array_agg(c ORDER BY c.ready_ms, c.turn_seq, c.id), '{}')
                    INTO v_candidates
                    FROM lonnymq.channel c
                    WHERE c.id = ANY (v_served) AND c.ready_ms <= v_now_ms AND c.id <> ALL (v_tried);
                    v_next := 1;
                END IF;
                IF v_next <= pg_catalog.cardinality(v_candidates) THEN
                    v_channel := v_candidates[v_next];
                    v_next := v_next + 1;
                END IF;
                v_exclusive := v_channel.id IS NOT NULL;
                IF NOT v_exclusive AND v_rounds_short AND v_shared.id IS NOT NULL
                   AND v_shared.id <> ALL (v_tried) THEN
                    -- Sharing takes no turn, so the channel shared last is still
                    -- the fairest held one (checked again below).
                    v_channel := v_shared;
                ELSIF NOT v_exclusive THEN
                    SELECT c.* INTO v_channel FROM lonnymq.channel c
                    WHERE c.queue_id = v_queue.id AND c.ready_ms <= v_now_ms AND c.id <> ALL (v_tried)
                      AND (v_free_ms IS NULL
                           OR (c.ready_ms, c.turn_seq) < (v_free_ms, v_queue.nochannel_turn_seq))
                      AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
                      AND pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq._lock_class(),
                                                                      c.lock_key)
                    ORDER BY c.ready_ms, c.turn_seq, c.id
                    LIMIT 1;
                    v_shared := v_channel;
                END IF;
                IF v_channel.id IS NULL AND v_free_ms IS NULL THEN
                    -- A busy channel whose new messages only its holder has folded
                    -- in so far: its due hints say it has ready work.
                    SELECT c.* INTO v_channel FROM lonnymq.channel c
                    WHERE c.id = ANY (v_hinted_busy) AND c.id <> ALL (v_tried)
                      AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
                      AND pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq._lock_class(),
                                                                      c.lock_key)
                    ORDER BY c.last_turn_ms, c.turn_seq, c.id
                    LIMIT 1;
                END IF;
                IF NOT v_exclusive AND v_channel.id IS NOT NULL THEN
                    -- A channel about to be shared, checked again now that its
                    -- advisory lock is held: if its holder has gone meanwhile,
                    -- this call takes the row and records the turn; otherwise
                    -- it is read afresh, because a policy change that committed
                    -- after the pick's snapshot (but before the lock) may have
                    -- made it accounted, and accounted channels are never shared.
                    SELECT c.* INTO v_row FROM lonnymq.channel c
                    WHERE c.id = v_channel.id AND c.ready_ms <= v_now_ms
                      AND (v_free_ms IS NULL
                           OR (c.ready_ms, c.turn_seq) < (v_free_ms, v_queue.nochannel_turn_seq))
                    FOR NO KEY UPDATE SKIP LOCKED;
                    IF v_row.id IS NOT NULL THEN
                        v_channel := v_row;
                        v_exclusive := true;
                    ELSE
                        SELECT c.* INTO v_row FROM lonnymq.channel c WHERE c.id = v_channel.id;
                        IF v_row.id IS NULL OR lonnymq._accounted(v_row.max_concurrency, v_row.release_interval_ms,
                                                                  v_row.max_size) THEN
                            v_tried := v_tried || v_channel.id;
                            CONTINUE;
                        END IF;
                        v_channel := v_row;
                    END IF;
                END IF;
            END IF;

            v_after := pg_catalog.array_position(v_after_channels, v_channel.id);
            IF v_after IS NULL AND v_channel.id IS NOT NULL THEN
                -- First visit in this call: no bound yet.
                v_after_channels := v_after_channels || v_channel.id;
                v_after_ms := v_after_ms || NULL::bigint;
                v_after_ids := v_after_ids || NULL::bigint;
                v_after := pg_catalog.cardinality(v_after_channels);
            END IF;
            IF v_channel.id IS NOT NULL AND NOT v_exclusive AND v_rounds_short
               AND v_next > pg_catalog.cardinality(v_candidates) AND v_channel.max_attempts IS NULL
               AND message_dequeue.max_messages - v_delivered > 1 THEN
                -- Sharing a held channel with nothing of this call's own
                -- ready: single dequeues in a row would take its next
                -- messages one after another (sharing records no turn, so it
                -- stays the fairest held one). Take them in one statement.
                -- (With max_attempts, a message may have to be dead-lettered
                -- instead: those channels go message by message below.)
                WITH picked AS (
                    SELECT m.id FROM lonnymq.message m
                    WHERE m.queue_id = v_queue.id AND m.channel_id = v_channel.id
                      AND m.locked_until_ms IS NULL AND m.dequeue_ms <= v_now_ms
                      AND (v_after_ms[v_after] IS NULL
                           OR (m.dequeue_ms, m.id) > (v_after_ms[v_after], v_after_ids[v_after]))
                    ORDER BY m.dequeue_ms, m.id
                    LIMIT message_dequeue.max_messages - v_delivered
                    FOR UPDATE SKIP LOCKED
                ), claimed AS (
                    UPDATE lonnymq.message m
                    SET num_attempts = m.num_attempts + 1, locked_until_ms = v_now_ms + message_dequeue.lock_ms
                    FROM picked p WHERE m.id = p.id
                    RETURNING m.*
                )
                SELECT coalesce(pg_catalog.array_agg(k ORDER BY k.dequeue_ms, k.id), '{}') INTO v_bulk
                FROM claimed k;
                IF pg_catalog.cardinality(v_bulk) = 0 THEN
                    v_tried := v_tried || v_channel.id;
                    CONTINUE;
                END IF;
                RETURN QUERY
                SELECT k.id, v_channel.name, k.content, k.state, k.num_attempts,
                       'epoch'::timestamptz
                       + (k.dequeue_ms + k.priority::bigint * 281474976710656) * '1 millisecond'::interval,
                       false
                FROM pg_catalog.unnest(v_bulk) AS k
                ORDER BY k.dequeue_ms, k.id;
                v_delivered := v_delivered + pg_catalog.cardinality(v_bulk);
                v_message := v_bulk[pg_catalog.cardinality(v_bulk)];
                v_after_ms[v_after] := v_message.dequeue_ms;
                v_after_ids[v_after] := v_message.id;
                v_message := NULL;
                CONTINUE;
            END IF;

            IF v_channel.id IS NOT NULL THEN
                v_accounted := lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms,
                                                  v_channel.max_size);
                IF v_after_ms[v_after] IS NULL THEN
                    SELECT m.* INTO v_message FROM lonnymq.message m
                    WHERE m.queue_id = v_queue.id AND m.channel_id = v_channel.id AND m.locked_until_ms IS NULL
                    ORDER BY m.dequeue_ms, m.id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED;
                ELSE
                    -- Whatever sorts before the last message taken here is
                    -- claimed (by this call or, SKIP LOCKED anyway, by others)
                    -- or arrived since: the next call serves that.
                    SELECT m.* INTO v_message FROM lonnymq.message m
                    WHERE m.queue_id = v_queue.id AND m.channel_id = v_channel.id AND m.locked_until_ms IS NULL
                      AND (m.dequeue_ms, m.id) > (v_after_ms[v_after], v_after_ids[v_after])
                    ORDER BY m.dequeue_ms, m.id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED;
                END IF;
                IF v_message.id IS NULL OR v_message.dequeue_ms > v_now_ms THEN
                    -- Nothing to take: the key was stale (a cancel), or every ready
                    -- message is being taken by others. The holder fixes the key.
                    IF v_exclusive THEN
                        PERFORM lonnymq._channel_refresh(v_channel.id);
                    END IF;
                    v_tried := v_tried || v_channel.id;
                    v_message := NULL;
                    CONTINUE;
                END IF;
                IF v_channel.max_attempts IS NOT NULL AND v_message.num_attempts >= v_channel.max_attempts THEN
                    -- A deferred message out of attempts: dead-letter, no slot was taken.
                    PERFORM lonnymq._archive(v_message, 'dead',
                        pg_catalog.format('deferred after attempt %s of %s', v_message.num_attempts,
                                          v_channel.max_attempts));
                    DELETE FROM lonnymq.message m WHERE m.id = v_message.id;
                    IF v_exclusive THEN
                        UPDATE lonnymq.channel c
                        SET removed_count = c.removed_count + (c.max_size IS NOT NULL)::integer
                        WHERE c.id = v_channel.id;
                        PERFORM lonnymq._channel_refresh(v_channel.id);
                        -- No turn was taken: the channel keeps its place in the
                        -- round if it is still ready (single dequeues in a row
                        -- would serve it next). Otherwise a later round finds it.
                        SELECT c.* INTO v_row FROM lonnymq.channel c
                        WHERE c.id = v_channel.id AND c.ready_ms <= v_now_ms
                          AND (v_free_ms IS NULL
                               OR (c.ready_ms, c.turn_seq) < (v_free_ms, v_queue.nochannel_turn_seq));
                        IF v_row.id IS NOT NULL THEN
                            SELECT pg_catalog.array_agg(x ORDER BY x.ready_ms, x.turn_seq, x.id) INTO v_candidates
                            FROM pg_catalog.unnest(v_candidates[v_next:] || v_row) AS x;
                            v_next := 1;
                        END IF;
                    END IF;
                    PERFORM lonnymq._notify('lonnymq_dead', v_queue.name, 'dead');
                    v_message := NULL;
                    CONTINUE;
                END IF;
                v_after_ms[v_after] := v_message.dequeue_ms;
                v_after_ids[v_after] := v_message.id;
                v_message := lonnymq._claim(v_message.id, v_now_ms + message_dequeue.lock_ms);
                IF v_exclusive THEN
                    -- Messages others are taking right now still look unlocked here,
                    -- which only makes the head early: safe.
                    SELECT m.dequeue_ms INTO v_next_head_ms FROM lonnymq.message m
                    WHERE m.queue_id = v_queue.id AND m.channel_id = v_channel.id AND m.locked_until_ms IS NULL
                    ORDER BY m.dequeue_ms, m.id
                    LIMIT 1;
                    v_seq := pg_catalog.nextval('lonnymq.turn_seq');
                    IF v_channel.id <> ALL (v_served) THEN
                        v_served := v_served || v_channel.id;
                    END IF;
                    UPDATE lonnymq.channel c
                    SET locked_count = c.locked_count + v_accounted::integer,
                        last_turn_ms = v_now_ms,
                        turn_seq = v_seq,
                        head_ms = v_next_head_ms,
                        ready_ms = lonnymq._ready_ms(v_next_head_ms, v_now_ms, c.release_interval_ms,
                                                     c.locked_count + v_accounted::integer, c.max_concurrency, v_seq)
                    WHERE c.id = v_channel.id;
                END IF;
                v_emit_channel := v_channel.name;
                v_emit_recovered := false;
                EXIT pick;
            END IF;

            IF v_free_ms IS NULL THEN
                EXIT;  -- nothing ready anywhere
            END IF;
            SELECT f.* INTO v_message FROM lonnymq.message f
            WHERE f.queue_id = v_queue.id AND f.channel_id IS NULL AND f.locked_until_ms IS NULL
              AND f.dequeue_ms <= v_now_ms
            ORDER BY f.dequeue_ms, f.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            IF v_message.id IS NULL THEN
                -- Every ready channel-less message is being claimed by others.
                v_free_exhausted := true;
                CONTINUE;
            END IF;
            v_message := lonnymq._claim(v_message.id, v_now_ms + message_dequeue.lock_ms);
            IF v_has_channels THEN
                -- Record the turn only when channels compete for it, and only if
                -- the queue row is free: channel-less traffic never queues on it.
                v_seq := pg_catalog.nextval('lonnymq.turn_seq');
                UPDATE lonnymq.queue q
                SET nochannel_turn_ms = v_now_ms, nochannel_turn_seq = v_seq
                WHERE q.id = (SELECT l.id FROM lonnymq.queue l WHERE l.id = v_queue.id
                              FOR NO KEY UPDATE SKIP LOCKED);
                v_queue.nochannel_turn_ms := v_now_ms;
                v_queue.nochannel_turn_seq := v_seq;
            END IF;
            v_emit_channel := NULL;
            v_emit_recovered := false;
            EXIT pick;
        END pick;
        -- The result row, assigned column by column (RETURN QUERY would run a
        -- query per delivered message).
        id := v_message.id;
        channel := v_emit_channel;
        content := v_message.content;
        state := v_message.state;
        num_attempts := v_message.num_attempts;
        dequeue_at := 'epoch'::timestamptz
                      + (v_message.dequeue_ms + v_message.priority::bigint * 281474976710656)
                        * '1 millisecond'::interval;
        recovered := v_emit_recovered;
        RETURN NEXT;
        v_delivered := v_delivered + 1;
        v_message := NULL;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq.message_dequeue(text, bigint, integer)
    IS 'Locks and returns up to max_messages ready messages, fairly across channels.';
