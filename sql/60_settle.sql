-- ===========================================================================
-- Settling delivered messages. num_attempts is a fencing token (README, "Concepts": delivery and locks):
-- only the holder of the current delivery may settle it. Lock order is
-- always message row, then channel row.
-- ===========================================================================

-- Validates a delivery reference (22023) and locks its message. Returns it
-- when the caller holds the current delivery; otherwise a status
-- (not_found, state_invalid) in p_status.
CREATE OR REPLACE FUNCTION lonnymq._lock_delivery(p_id bigint, p_num_attempts bigint, OUT p_status text, OUT p_message lonnymq.message)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_id IS NULL THEN
        PERFORM lonnymq._invalid('id must not be NULL');
    END IF;
    IF p_num_attempts IS NULL OR p_num_attempts < 1 THEN
        PERFORM lonnymq._invalid('num_attempts must be the value the dequeue returned (1 or more)');
    END IF;
    SELECT m.* INTO p_message FROM lonnymq.message m WHERE m.id = p_id FOR UPDATE;
    IF p_message.id IS NULL THEN
        p_status := 'not_found';
    ELSIF p_message.locked_until_ms IS NULL OR p_message.num_attempts <> p_num_attempts THEN
        -- Not delivered, or redelivered since: the caller's attempt is stale.
        p_status := 'state_invalid';
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._lock_delivery(bigint, bigint) IS 'Validates a delivery reference, locks its message, checks the fencing token.';

-- Completes a delivered message. Status: completed, not_found, state_invalid.
-- The common case is one statement: at READ COMMITTED, a channel-less
-- message, or one whose channel neither counts slots nor archives completed
-- messages, is deleted if the delivery is current. In the order of every
-- settle: the message row locked first (the sub-select FOR UPDATE, evaluated
-- before the scan, which fetches that row by its ctid), then the channel
-- pinned (FOR KEY SHARE, as _pin_channel pins at READ COMMITTED: a
-- channel_set in flight is waited for and the policy it commits is read, so
-- an accounted or archiving channel's message is never deleted here), then
-- the delete. Pinning before locking the
-- message would close a cycle with a transaction that holds the message
-- (a redelivery) and then calls channel_set. Everything else, and a
-- delivery that is not current, deletes nothing there and takes the steps
-- after it: the message read under its lock (which tells not_found from
-- state_invalid), its channel pinned (_pin_channel, which returns its
-- policy), then the delete, or _settle_locked for channels that keep
-- counters or archive completed messages.
CREATE OR REPLACE FUNCTION lonnymq.message_complete(id bigint, num_attempts bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
AS $$
DECLARE
    v_locked_until_ms bigint;
    v_attempts bigint;
    v_channel_id bigint;
    v_channel lonnymq.channel;
    v_message lonnymq.message;
BEGIN
    IF message_complete.id IS NULL OR message_complete.num_attempts IS NULL
       OR message_complete.num_attempts < 1 THEN
        PERFORM lonnymq._lock_delivery(message_complete.id, message_complete.num_attempts);  -- raises 22023
    END IF;
    IF lonnymq._read_committed() THEN
        DELETE FROM lonnymq.message m
        -- (By the locked row's ctid, a TID scan: by id, a generic plan
        -- walked the whole of message_locked_idx, whose predicate the
        -- checks below imply and whose key does not start with id.)
        WHERE m.ctid = (SELECT l.ctid FROM lonnymq.message l WHERE l.id = message_complete.id FOR UPDATE)
          AND m.locked_until_ms IS NOT NULL
          AND m.num_attempts = message_complete.num_attempts
          AND (m.channel_id IS NULL
               OR EXISTS (SELECT 1 FROM lonnymq.channel c
                          WHERE c.id = m.channel_id
                            AND NOT lonnymq._complete_needs_settle(c.retain_completed, c.max_concurrency,
                                                                   c.release_interval_ms, c.max_size)
                          FOR KEY SHARE));
        IF FOUND THEN
            RETURN 'completed';
        END IF;
    END IF;
    SELECT m.locked_until_ms, m.num_attempts, m.channel_id
    INTO v_locked_until_ms, v_attempts, v_channel_id
    FROM lonnymq.message m
    WHERE m.id = message_complete.id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    ELSIF v_locked_until_ms IS NULL OR v_attempts <> message_complete.num_attempts THEN
        RETURN 'state_invalid';  -- not delivered, or redelivered since: a stale attempt
    END IF;
    IF v_channel_id IS NOT NULL THEN
        -- The policy as it is now, and until commit (see _pin_channel): a
        -- channel_set that committed meanwhile is seen.
        v_channel := lonnymq._pin_channel(v_channel_id);
    END IF;
    IF coalesce(lonnymq._complete_needs_settle(v_channel.retain_completed, v_channel.max_concurrency,
                                               v_channel.release_interval_ms, v_channel.max_size), false) THEN
        SELECT m.* INTO v_message FROM lonnymq.message m WHERE m.id = message_complete.id;
        PERFORM lonnymq._settle_locked(v_message, 'completed', NULL);
    ELSE
        DELETE FROM lonnymq.message m WHERE m.id = message_complete.id;
    END IF;
    RETURN 'completed';
END
$$;
COMMENT ON FUNCTION lonnymq.message_complete(bigint, bigint) IS 'Completes a delivery: completed, not_found, state_invalid.';

-- Completes many deliveries; one (id, status) row per input element, as if
-- each were a message_complete in input order. Locks all messages, then the
-- channels of those it completes, each in id order, so concurrent batches
-- cannot deadlock. Then set-based. The common case (READ COMMITTED, no
-- channel counting slots or archiving) is four statements after the checks
-- of the arguments, whatever the batch's size: the messages locked and
-- judged, their channels pinned, the completed ones deleted by their locked
-- rows' ctids, the statuses returned. Messages of accounted or archiving
-- channels go one by one through _settle_locked first.
CREATE OR REPLACE FUNCTION lonnymq.message_complete_batch(ids bigint[], num_attempts bigint[])
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
-- Its statements take arrays: a custom plan, which knows their length, looks
-- cheaper than the generic one for short ones, so the plan cache would plan
-- its statements again at every call (a batch of one cost 0.78 ms, 0.24 ms
-- with one plan for all).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_statuses text[];
    v_done bigint[];        -- the ids to complete (each once) ...
    v_done_rows tid[];      -- ... and their locked rows
    v_channels bigint[];    -- their channels
    v_settle boolean := false;  -- some of them go through _settle_locked
    v_accounted boolean := false;
    v_message lonnymq.message;
BEGIN
    -- Every argument and element checked before anything is locked or
    -- changed, by one expression; only when it fails do the checks below it
    -- run, to raise the precise error (22023). (1 <= ALL: no element NULL
    -- or below 1.)
    IF message_complete_batch.ids IS NULL OR message_complete_batch.num_attempts IS NULL
       OR NOT (lonnymq._is_batch_array(message_complete_batch.ids)
               AND lonnymq._is_batch_array(message_complete_batch.num_attempts))
       OR pg_catalog.cardinality(message_complete_batch.ids) <> pg_catalog.cardinality(message_complete_batch.num_attempts)
       OR pg_catalog.cardinality(message_complete_batch.ids) > 100000
       OR pg_catalog.array_position(message_complete_batch.ids, NULL) IS NOT NULL
       OR NOT coalesce(1 <= ALL (message_complete_batch.num_attempts), false) THEN
        IF message_complete_batch.ids IS NULL OR message_complete_batch.num_attempts IS NULL THEN
            PERFORM lonnymq._invalid('ids and num_attempts must not be NULL');
        END IF;
        PERFORM lonnymq._check_array(message_complete_batch.ids, 'ids');
        PERFORM lonnymq._check_array(message_complete_batch.num_attempts, 'num_attempts');
        IF pg_catalog.cardinality(message_complete_batch.ids) <> pg_catalog.cardinality(message_complete_batch.num_attempts) THEN
            PERFORM lonnymq._invalid('ids and num_attempts must have the same number of elements');
        END IF;
        IF pg_catalog.cardinality(message_complete_batch.ids) > 100000 THEN
            PERFORM lonnymq._invalid('a batch holds at most 100000 messages');
        END IF;
        IF pg_catalog.array_position(message_complete_batch.ids, NULL) IS NOT NULL THEN
            PERFORM lonnymq._invalid('id must not be NULL');
        END IF;
        PERFORM lonnymq._invalid('num_attempts must be the value the dequeue returned (1 or more)');
    END IF;

    -- The messages, locked in id order, and judged in the same statement
    -- from the rows the locks return, as sequential completes would judge
    -- them: an id repeated in the batch is completed by its first element
    -- whose attempt is current; earlier elements for it are stale
    -- (state_invalid), later ones find it gone (not_found).
    WITH locked AS MATERIALIZED (
        SELECT m.id, m.ctid AS row_tid, m.channel_id, m.locked_until_ms, m.num_attempts
        FROM lonnymq.message m WHERE m.id = ANY (message_complete_batch.ids)
        ORDER BY m.id FOR UPDATE
    ), judged AS (
        SELECT u.ord, u.id, l.row_tid, l.channel_id, l.id IS NOT NULL AS present,
               coalesce(l.locked_until_ms IS NOT NULL AND l.num_attempts = u.attempt, false) AS current
        FROM ROWS FROM (pg_catalog.unnest(message_complete_batch.ids),
                        pg_catalog.unnest(message_complete_batch.num_attempts))
             WITH ORDINALITY AS u(id, attempt, ord)
        LEFT JOIN locked l ON l.id = u.id
    ), first_current AS (
        SELECT j.id, pg_catalog.min(j.ord) AS ord FROM judged j WHERE j.current GROUP BY j.id
    )
    SELECT pg_catalog.array_agg(CASE WHEN NOT j.present THEN 'not_found'
                                     WHEN f.ord = j.ord THEN 'completed'
                                     WHEN f.ord < j.ord THEN 'not_found'
                                     ELSE 'state_invalid' END ORDER BY j.ord),
           pg_catalog.array_agg(j.id ORDER BY j.ord) FILTER (WHERE f.ord = j.ord),
           pg_catalog.array_agg(j.row_tid ORDER BY j.ord) FILTER (WHERE f.ord = j.ord),
           coalesce(pg_catalog.array_agg(DISTINCT j.channel_id) FILTER (WHERE f.ord = j.ord AND j.channel_id IS NOT NULL),
                    '{}')
    INTO v_statuses, v_done, v_done_rows, v_channels
    FROM judged j LEFT JOIN first_current f ON f.id = j.id;

    -- Then their channels, pinned (see _pin_channel) in id order: from here
    -- on no policy and no delivery of these messages can change under this
    -- call. At READ COMMITTED the policy read is the latest: a channel_set
    -- in flight holds the row FOR UPDATE, so the pin waits for it and then
    -- reads the row it committed.
    IF pg_catalog.cardinality(v_channels) > 0 THEN
        SELECT coalesce(pg_catalog.bool_or(lonnymq._complete_needs_settle(c.retain_completed, c.max_concurrency,
                                                                          c.release_interval_ms, c.max_size)), false),
               coalesce(pg_catalog.bool_or(lonnymq._accounted(c.max_concurrency, c.release_interval_ms,
                                                              c.max_size)), false)
        INTO v_settle, v_accounted
        FROM (SELECT c.retain_completed, c.max_concurrency, c.release_interval_ms, c.max_size
              FROM lonnymq.channel c WHERE c.id = ANY (v_channels)
              ORDER BY c.id FOR KEY SHARE) c;
        -- Those whose rows the settles will update (accounted ones), and
        -- outside READ COMMITTED every one: an older snapshot may show an old
        -- policy, and this lock refuses a stale row (40001, see _pin_channel).
        IF v_accounted OR NOT lonnymq._read_committed() THEN
            PERFORM 1 FROM lonnymq.channel c
            WHERE c.id = ANY (v_channels)
              AND (NOT lonnymq._read_committed()
                   OR lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size))
            ORDER BY c.id FOR NO KEY UPDATE;
        END IF;
    END IF;

    -- Accounted channels count their slots, archiving ones copy the message:
    -- those take the single-message path.
    IF v_settle THEN
        FOR v_message IN
            SELECT m.* FROM lonnymq.message m
            -- (Each channel by key, see message_dequeue's final read.)
            CROSS JOIN LATERAL (SELECT c.retain_completed, c.max_concurrency, c.release_interval_ms, c.max_size
                                FROM lonnymq.channel c WHERE c.id = m.channel_id LIMIT 1) c
            WHERE m.id = ANY (v_done)
              AND lonnymq._complete_needs_settle(c.retain_completed, c.max_concurrency, c.release_interval_ms,
                                                 c.max_size)
            ORDER BY m.id
        LOOP
            PERFORM lonnymq._settle_locked(v_message, 'completed', NULL);
        END LOOP;
    END IF;
    -- Everything else (unaccounted channels, channel-less messages) just goes,
    -- fetched by the rows locked above (this call's locks keep them in place;
    -- those _settle_locked removed are gone from this statement's snapshot).
    DELETE FROM lonnymq.message m WHERE m.ctid = ANY (v_done_rows);

    RETURN QUERY
    SELECT u.id, u.status
    FROM ROWS FROM (pg_catalog.unnest(message_complete_batch.ids), pg_catalog.unnest(v_statuses))
         WITH ORDINALITY AS u(id, status, ord)
    ORDER BY u.ord;
END
$$;
COMMENT ON FUNCTION lonnymq.message_complete_batch(bigint[], bigint[]) IS 'Completes many deliveries.';

-- Releases a delivery back to its channel for later, keeping num_attempts;
-- a non-NULL state replaces the saved one. Ready at coalesce(dequeue_at, now)
-- + delay_ms. Status: deferred, not_found, state_invalid.
CREATE OR REPLACE FUNCTION lonnymq.message_defer(
    id bigint,
    num_attempts bigint,
    dequeue_at timestamptz DEFAULT NULL,
    delay_ms bigint DEFAULT 0,
    state bytea DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
AS $$
DECLARE
    v_lock record;
    v_dequeue_ms bigint;
    v_queue text;
    v_channel lonnymq.channel;
BEGIN
    IF message_defer.delay_ms IS NULL OR message_defer.delay_ms < 0 OR message_defer.delay_ms > 315576000000000 THEN
        PERFORM lonnymq._invalid('delay_ms must be between 0 and 10000 years');
    END IF;
    v_dequeue_ms := lonnymq._check_dequeue_ms(
        CASE WHEN message_defer.dequeue_at IS NULL THEN lonnymq._now_ms()
             ELSE lonnymq._ms_of(message_defer.dequeue_at, 'dequeue_at') END
        + message_defer.delay_ms);
    v_lock := lonnymq._lock_delivery(message_defer.id, message_defer.num_attempts);
    IF v_lock.p_status IS NOT NULL THEN
        RETURN v_lock.p_status;
    END IF;
    -- Model A: back to unstamped, with its slot and its place decided as a
    -- new message's (_place): due at dequeue_ms (stamped then), or parked
    -- behind its channel's limit or pause.
    UPDATE lonnymq.message m
    SET locked_until_ms = NULL,
        dequeue_ms = v_dequeue_ms,
        priority = 0,
        vt = NULL, due_ms = NULL, jump = false, gated = false,
        state = coalesce(message_defer.state, m.state)
    WHERE m.id = message_defer.id;
    IF (v_lock.p_message).channel_id IS NOT NULL THEN
        v_channel := lonnymq._pin_channel((v_lock.p_message).channel_id);
        IF lonnymq._gated(v_channel.max_concurrency, v_channel.release_interval_ms) THEN
            UPDATE lonnymq.channel c SET locked_count = c.locked_count - 1 WHERE c.id = v_channel.id;
        END IF;
    END IF;
    PERFORM lonnymq._place((v_lock.p_message).queue_id, ARRAY[message_defer.id]);
    SELECT q.name INTO v_queue FROM lonnymq.queue q WHERE q.id = (v_lock.p_message).queue_id;
    PERFORM lonnymq._notify_waiters(v_queue, 'deferred');
    RETURN 'deferred';
END
$$;
COMMENT ON FUNCTION lonnymq.message_defer(bigint, bigint, timestamptz, bigint, bytea)
    IS 'Reschedules a delivery, keeping attempts: deferred, not_found, state_invalid.';

-- Extends the lock of the current delivery; never shortens it.
-- Status: extended, not_found, state_invalid.
CREATE OR REPLACE FUNCTION lonnymq.message_heartbeat(id bigint, num_attempts bigint, lock_ms bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
AS $$
DECLARE
    v_lock record;
BEGIN
    IF message_heartbeat.lock_ms IS NULL OR message_heartbeat.lock_ms < 1
       OR message_heartbeat.lock_ms > 31557600000000 THEN
        PERFORM lonnymq._invalid('lock_ms must be between 1 and 1000 years');
    END IF;
    v_lock := lonnymq._lock_delivery(message_heartbeat.id, message_heartbeat.num_attempts);
    IF v_lock.p_status IS NOT NULL THEN
        RETURN v_lock.p_status;
    END IF;
    UPDATE lonnymq.message m
    SET locked_until_ms = greatest(m.locked_until_ms, lonnymq._now_ms() + message_heartbeat.lock_ms)
    WHERE m.id = message_heartbeat.id;
    RETURN 'extended';
END
$$;
COMMENT ON FUNCTION lonnymq.message_heartbeat(bigint, bigint, bigint)
    IS 'Extends the lock of the current delivery: extended, not_found, state_invalid.';

-- Gives up on a delivery: moves it to the archive as failed.
-- Status: failed, not_found, state_invalid.
CREATE OR REPLACE FUNCTION lonnymq.message_fail(id bigint, num_attempts bigint, error text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
AS $$
DECLARE
    v_lock record;
    v_queue text;
BEGIN
    v_lock := lonnymq._lock_delivery(message_fail.id, message_fail.num_attempts);
    IF v_lock.p_status IS NOT NULL THEN
        RETURN v_lock.p_status;
    END IF;
    PERFORM lonnymq._settle_locked(v_lock.p_message, 'failed', message_fail.error);
    SELECT q.name INTO v_queue FROM lonnymq.queue q WHERE q.id = (v_lock.p_message).queue_id;
    PERFORM lonnymq._notify('lonnymq_dead', v_queue, 'failed');
    RETURN 'failed';
END
$$;
COMMENT ON FUNCTION lonnymq.message_fail(bigint, bigint, text) IS 'Archives a delivery as failed: failed, not_found, state_invalid.';

-- Removes a pending message. Status: cancelled, locked (in flight: settle it
-- instead), not_found.
CREATE OR REPLACE FUNCTION lonnymq.message_cancel(id bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
AS $$
DECLARE
    v_message lonnymq.message;
    v_channel lonnymq.channel;
BEGIN
    IF message_cancel.id IS NULL THEN
        PERFORM lonnymq._invalid('id must not be NULL');
    END IF;
    SELECT m.* INTO v_message FROM lonnymq.message m WHERE m.id = message_cancel.id FOR UPDATE;
    IF v_message.id IS NULL THEN
        RETURN 'not_found';
    END IF;
    IF v_message.locked_until_ms IS NOT NULL THEN
        RETURN 'locked';
    END IF;
    -- The channel head may now be early; dequeue corrects an early head when
    -- it meets it. Only a capacity count needs the channel row.
    IF v_message.channel_id IS NOT NULL THEN
        v_channel := lonnymq._pin_channel(v_message.channel_id);
        IF v_channel.max_size IS NOT NULL THEN
            UPDATE lonnymq.channel c SET removed_count = c.removed_count + 1 WHERE c.id = v_channel.id;
        END IF;
    END IF;
    DELETE FROM lonnymq.message m WHERE m.id = v_message.id;
    IF v_message.gated THEN
        -- A limited channel's head left: the next one is designated.
        SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = v_message.channel_id FOR NO KEY UPDATE;
        PERFORM lonnymq._designate(v_channel, lonnymq._now_ms(), false);
    END IF;
    RETURN 'cancelled';
END
$$;
COMMENT ON FUNCTION lonnymq.message_cancel(bigint) IS 'Removes a pending message: cancelled, locked, not_found.';
