-- ===========================================================================
-- Bounded inspection for dashboards and metrics. The views of 80_inspect.sql
-- count every live message; these read the channel rows and walk indexes
-- only as far as count_limit (counts stop there: "10000" means "10000 or
-- more"), so a dashboard refreshing every few seconds over a queue of
-- millions costs the database a few thousand index entries per refresh.
-- SECURITY DEFINER, grantable to a monitoring role like the views.
-- ===========================================================================

-- How many unlocked messages of a queue are due (or, p_due false, not yet),
-- counting at most p_limit: channel by channel through message_ready_idx,
-- then the channel-less ones, in one statement that stops at the limit.
CREATE OR REPLACE FUNCTION lonnymq._count_unlocked(p_queue_id integer, p_due boolean, p_now_ms bigint,
                                                   p_limit integer) RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Two statements, so that the time bound is an index condition either way.
    IF p_due THEN
        RETURN (SELECT pg_catalog.count(*) FROM (
            SELECT 1 FROM lonnymq.channel c
            CROSS JOIN LATERAL (SELECT 1 FROM lonnymq.message m
                                WHERE m.queue_id = c.queue_id AND m.channel_id = c.id
                                  AND m.locked_until_ms IS NULL AND m.dequeue_ms <= p_now_ms) x
            WHERE c.queue_id = p_queue_id
            UNION ALL
            SELECT 1 FROM lonnymq.message m
            WHERE m.queue_id = p_queue_id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
              AND m.dequeue_ms <= p_now_ms
            LIMIT p_limit) n);
    END IF;
    RETURN (SELECT pg_catalog.count(*) FROM (
        SELECT 1 FROM lonnymq.channel c
        CROSS JOIN LATERAL (SELECT 1 FROM lonnymq.message m
                            WHERE m.queue_id = c.queue_id AND m.channel_id = c.id
                              AND m.locked_until_ms IS NULL AND m.dequeue_ms > p_now_ms) x
        WHERE c.queue_id = p_queue_id
        UNION ALL
        SELECT 1 FROM lonnymq.message m
        WHERE m.queue_id = p_queue_id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
          AND m.dequeue_ms > p_now_ms
        LIMIT p_limit) n);
END
$$;
COMMENT ON FUNCTION lonnymq._count_unlocked(integer, boolean, bigint, integer)
    IS 'Bounded count of a queue''s ready or scheduled messages.';

-- Milliseconds the next message of a channel (NULL: the channel-less ones)
-- has been ready: the one dequeue would serve next. NULL when none is due.
CREATE OR REPLACE FUNCTION lonnymq._head_age_ms(p_queue_id integer, p_channel_id bigint, p_now_ms bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_head lonnymq.message;
BEGIN
    IF p_channel_id IS NULL THEN
        SELECT m.* INTO v_head FROM lonnymq.message m
        WHERE m.queue_id = p_queue_id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
          AND m.dequeue_ms <= p_now_ms
        ORDER BY m.dequeue_ms, m.id
        LIMIT 1;
    ELSE
        SELECT m.* INTO v_head FROM lonnymq.message m
        WHERE m.queue_id = p_queue_id AND m.channel_id = p_channel_id AND m.locked_until_ms IS NULL
          AND m.dequeue_ms <= p_now_ms
        ORDER BY m.dequeue_ms, m.id
        LIMIT 1;
    END IF;
    IF v_head.id IS NULL THEN
        RETURN NULL;
    END IF;
    -- A priority message is due from its creation (see _dequeue_at).
    RETURN greatest(0, p_now_ms - (v_head.dequeue_ms + v_head.priority::bigint * lonnymq._priority_step_ms()));
END
$$;
COMMENT ON FUNCTION lonnymq._head_age_ms(integer, bigint, bigint) IS 'How long the next message of a channel has been ready.';

-- One row per queue: channels, bounded counts, and the longest wait of a
-- channel's next message. Reads every channel row of every queue (one per
-- tenant), never every message.
CREATE OR REPLACE FUNCTION lonnymq.queue_summary(count_limit integer DEFAULT 10000)
RETURNS TABLE (queue text, paused boolean, channels bigint, ready bigint, scheduled bigint, locked bigint,
               archived bigint, oldest_ready_ms bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue lonnymq.queue;
    v_now_ms bigint := lonnymq._now_ms();
BEGIN
    IF queue_summary.count_limit IS NULL OR queue_summary.count_limit NOT BETWEEN 1 AND 1000000 THEN
        PERFORM lonnymq._invalid('count_limit must be between 1 and 1000000');
    END IF;
    FOR v_queue IN SELECT q.* FROM lonnymq.queue q ORDER BY q.name LOOP
        queue := v_queue.name;
        paused := v_queue.paused;
        SELECT pg_catalog.count(*), pg_catalog.max(lonnymq._head_age_ms(v_queue.id, c.id, v_now_ms))
                                        FILTER (WHERE t.head_ms <= v_now_ms)
        INTO channels, oldest_ready_ms
        FROM lonnymq.channel c JOIN lonnymq.channel_turn t ON t.channel_id = c.id WHERE c.queue_id = v_queue.id;
        oldest_ready_ms := greatest(oldest_ready_ms, lonnymq._head_age_ms(v_queue.id, NULL, v_now_ms));
        ready := lonnymq._count_unlocked(v_queue.id, true, v_now_ms, queue_summary.count_limit);
        scheduled := lonnymq._count_unlocked(v_queue.id, false, v_now_ms, queue_summary.count_limit);
        SELECT pg_catalog.count(*) INTO locked FROM (
            SELECT 1 FROM lonnymq.message m
            WHERE m.queue_id = v_queue.id AND m.locked_until_ms IS NOT NULL
            LIMIT queue_summary.count_limit) x;
        SELECT pg_catalog.count(*) INTO archived FROM (
            SELECT 1 FROM lonnymq.message_archive a WHERE a.queue = v_queue.name
            LIMIT queue_summary.count_limit) x;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq.queue_summary(integer)
    IS 'Per queue: channels, counts bounded by count_limit, oldest ready age; for dashboards.';

-- The channels of a queue, those that need attention first: saturated ones
-- (max_concurrency reached), then by how long their next message has
-- waited, then by name. Sorting reads the queue's channel rows only; the
-- counts of the max_channels returned are bounded by count_limit.
CREATE OR REPLACE FUNCTION lonnymq.channel_summary(queue text, max_channels integer DEFAULT 100,
                                                   count_limit integer DEFAULT 1000)
RETURNS TABLE (channel text, paused boolean, explicit boolean, max_concurrency integer, release_interval_ms bigint,
               max_size bigint, max_attempts integer, retain_completed boolean, in_flight bigint, ready bigint,
               scheduled bigint, live bigint, oldest_ready_ms bigint, saturated boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id integer;
    v_now_ms bigint := lonnymq._now_ms();
    v_limit integer := channel_summary.count_limit;
BEGIN
    PERFORM lonnymq._check_name(channel_summary.queue, 'queue', false);
    IF channel_summary.max_channels IS NULL OR channel_summary.max_channels NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq._invalid('max_channels must be between 1 and 10000');
    END IF;
    IF v_limit IS NULL OR v_limit NOT BETWEEN 1 AND 1000000 THEN
        PERFORM lonnymq._invalid('count_limit must be between 1 and 1000000');
    END IF;
    SELECT q.id INTO v_queue_id FROM lonnymq.queue q WHERE q.name = channel_summary.queue;
    RETURN QUERY
    SELECT c.name, c.paused, c.explicit, c.max_concurrency, c.release_interval_ms, c.max_size, c.max_attempts,
           c.retain_completed,
           CASE WHEN lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
                THEN c.t_locked::bigint
                ELSE (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq.message m
                                                      WHERE m.channel_id = c.id AND m.locked_until_ms IS NOT NULL
                                                      LIMIT v_limit) x) END,
           (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq.message m
                                             WHERE m.queue_id = c.queue_id AND m.channel_id = c.id
                                               AND m.locked_until_ms IS NULL AND m.dequeue_ms <= v_now_ms
                                             LIMIT v_limit) x),
           (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq.message m
                                             WHERE m.queue_id = c.queue_id AND m.channel_id = c.id
                                               AND m.locked_until_ms IS NULL AND m.dequeue_ms > v_now_ms
                                             LIMIT v_limit) x),
           (SELECT a.admitted - c.removed_count FROM lonnymq.channel_admission a WHERE a.channel_id = c.id),
           lonnymq._head_age_ms(c.queue_id, c.id, v_now_ms),
           c.saturated
    FROM (SELECT c.*, t.locked_count AS t_locked, t.head_ms AS t_head,
                 (c.max_concurrency IS NOT NULL AND t.locked_count >= c.max_concurrency) AS saturated
          FROM lonnymq.channel c JOIN lonnymq.channel_turn t ON t.channel_id = c.id
          WHERE c.queue_id = v_queue_id
          ORDER BY saturated DESC, t.head_ms NULLS LAST, c.name
          LIMIT channel_summary.max_channels) c
    ORDER BY c.saturated DESC, c.t_head NULLS LAST, c.name;
END
$$;
COMMENT ON FUNCTION lonnymq.channel_summary(text, integer, integer)
    IS 'Channels of a queue, saturated and longest-waiting first, with bounded counts; for dashboards.';

-- Up to max_messages live messages of one channel of a queue (channel NULL:
-- the channel-less ones), without their content: state 'ready' or
-- 'scheduled' in dequeue order, NULL for both, 'locked' by lock expiry (with
-- channel NULL: every locked message of the queue). One index range each.
CREATE OR REPLACE FUNCTION lonnymq.message_browse(queue text, channel text DEFAULT NULL, state text DEFAULT NULL,
                                                  max_messages integer DEFAULT 50)
RETURNS TABLE (id bigint, message_channel text, num_attempts bigint, dequeue_at timestamptz, locked_until timestamptz,
               created_at timestamptz, priority integer, dedup_key text, content_bytes integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id integer;
    v_channel_id bigint;
    v_now_ms bigint := lonnymq._now_ms();
    v_ids bigint[];
BEGIN
    PERFORM lonnymq._check_name(message_browse.queue, 'queue', false);
    PERFORM lonnymq._check_name(message_browse.channel, 'channel', true);
    IF message_browse.state IS NOT NULL AND message_browse.state NOT IN ('ready', 'scheduled', 'locked') THEN
        PERFORM lonnymq._invalid(pg_catalog.format('state must be ready, scheduled, locked or NULL, got %s',
                                                   message_browse.state));
    END IF;
    IF message_browse.max_messages IS NULL OR message_browse.max_messages NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq._invalid('max_messages must be between 1 and 10000');
    END IF;
    SELECT q.id INTO v_queue_id FROM lonnymq.queue q WHERE q.name = message_browse.queue;
    IF message_browse.channel IS NOT NULL THEN
        SELECT c.id INTO v_channel_id FROM lonnymq.channel c
        WHERE c.queue_id = v_queue_id AND c.name = message_browse.channel;
        IF v_channel_id IS NULL THEN
            RETURN;
        END IF;
    END IF;
    IF message_browse.state = 'locked' THEN
        SELECT pg_catalog.array_agg(x.id ORDER BY x.locked_until_ms, x.id) INTO v_ids
        FROM (SELECT m.id, m.locked_until_ms FROM lonnymq.message m
              WHERE m.queue_id = v_queue_id AND m.locked_until_ms IS NOT NULL
                AND (v_channel_id IS NULL OR m.channel_id = v_channel_id)
              ORDER BY m.locked_until_ms, m.id
              LIMIT message_browse.max_messages) x;
    ELSIF v_channel_id IS NULL THEN
        SELECT pg_catalog.array_agg(x.id ORDER BY x.dequeue_ms, x.id) INTO v_ids
        FROM (SELECT m.id, m.dequeue_ms FROM lonnymq.message m
              WHERE m.queue_id = v_queue_id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
                AND m.dequeue_ms > CASE WHEN message_browse.state = 'scheduled' THEN v_now_ms ELSE -9223372036854775807 END
                AND m.dequeue_ms <= CASE WHEN message_browse.state = 'ready' THEN v_now_ms ELSE 9223372036854775807 END
              ORDER BY m.dequeue_ms, m.id
              LIMIT message_browse.max_messages) x;
    ELSE
        SELECT pg_catalog.array_agg(x.id ORDER BY x.dequeue_ms, x.id) INTO v_ids
        FROM (SELECT m.id, m.dequeue_ms FROM lonnymq.message m
              WHERE m.queue_id = v_queue_id AND m.channel_id = v_channel_id AND m.locked_until_ms IS NULL
                AND m.dequeue_ms > CASE WHEN message_browse.state = 'scheduled' THEN v_now_ms ELSE -9223372036854775807 END
                AND m.dequeue_ms <= CASE WHEN message_browse.state = 'ready' THEN v_now_ms ELSE 9223372036854775807 END
              ORDER BY m.dequeue_ms, m.id
              LIMIT message_browse.max_messages) x;
    END IF;
    RETURN QUERY
    SELECT m.id, c.name, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority),
           'epoch'::timestamptz + m.locked_until_ms * '1 millisecond'::interval,
           m.created_at, m.priority, m.dedup_key, pg_catalog.octet_length(m.content)
    FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, n)
    JOIN lonnymq.message m ON m.id = u.id
    LEFT JOIN lonnymq.channel c ON c.id = m.channel_id
    ORDER BY u.n;
END
$$;
COMMENT ON FUNCTION lonnymq.message_browse(text, text, text, integer)
    IS 'A page of live messages of a channel, by state, without content; for dashboards.';

-- The periodic messages of every queue: a Python Worker's every(NAME) keeps
-- one message in channel 'lonnymq.every:NAME' with that same dedup key. The
-- channels come from channel_periodic_idx (periodic channels only), each
-- message from message_dedup_idx: no tenant's channel or message is read.
-- next_at is when it runs next; locked_until is set while a worker runs it;
-- state is what the worker recorded after its last run (interval, time).
-- A name without a message (cancelled) shows with message_id NULL.
CREATE OR REPLACE FUNCTION lonnymq.periodic_summary(max_rows integer DEFAULT 100)
RETURNS TABLE (queue text, name text, paused boolean, message_id bigint, num_attempts bigint, next_at timestamptz,
               locked_until timestamptz, created_at timestamptz, state bytea)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF periodic_summary.max_rows IS NULL OR periodic_summary.max_rows NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq._invalid('max_rows must be between 1 and 10000');
    END IF;
    RETURN QUERY
    SELECT q.name, pg_catalog.substr(c.name, pg_catalog.length('lonnymq.every:') + 1), c.paused OR q.paused,
           m.id, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority),
           'epoch'::timestamptz + m.locked_until_ms * '1 millisecond'::interval, m.created_at, m.state
    FROM lonnymq.channel c
    JOIN lonnymq.queue q ON q.id = c.queue_id
    LEFT JOIN lonnymq.message m
           ON m.queue_id = c.queue_id AND coalesce(m.channel_id, 0) = c.id AND m.dedup_key = c.name
    WHERE pg_catalog.starts_with(c.name, 'lonnymq.every:')
    ORDER BY q.name, c.name
    LIMIT periodic_summary.max_rows;
END
$$;
COMMENT ON FUNCTION lonnymq.periodic_summary(integer)
    IS 'The periodic messages (Worker.every) of every queue, through an index of their channels; for dashboards.';
