-- ===========================================================================
-- Inspection: views with stable column names, wait_hint_ms, verify.
-- Views read their tables with the extension owner's rights, so GRANT SELECT
-- on a view shows its rows without opening the tables underneath. Functions
-- inside a view run with the reader's rights, though: the views therefore use
-- pg_catalog expressions only, never the revoked lonnymq helpers.
-- Every operator in a view has operands of exactly the types of a pg_catalog
-- operator (hence the ::float8 and ::numeric casts): an operator is bound once,
-- when the view is created, and an inexact match (bigint * interval) could
-- otherwise bind a look-alike with exactly those types from a writable schema.
-- (2^48 ms is _priority_step_ms(), the distance between priority levels.)
-- ===========================================================================

CREATE OR REPLACE VIEW lonnymq.messages AS
SELECT m.id, q.name AS queue, c.name AS channel, m.content, m.state, m.num_attempts,
       'epoch'::timestamptz
           + (m.dequeue_ms + m.priority::bigint * 281474976710656)::float8 * '1 millisecond'::interval
           AS dequeue_at,
       'epoch'::timestamptz + m.locked_until_ms::float8 * '1 millisecond'::interval AS locked_until,
       m.created_at, m.priority, m.dedup_key
FROM lonnymq.message m
JOIN lonnymq.queue q ON q.id = m.queue_id
LEFT JOIN lonnymq.channel c ON c.id = m.channel_id;
COMMENT ON VIEW lonnymq.messages IS 'One row per live message.';

-- Per channel, plus one row per queue (channel NULL) for channel-less messages,
-- whose paused column is the queue's.
CREATE OR REPLACE VIEW lonnymq.channel_stats AS
WITH now_ms AS (SELECT pg_catalog.floor(EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000::numeric)::bigint AS ms),
counts AS (
    SELECT m.queue_id, m.channel_id,
           pg_catalog.count(*) FILTER (WHERE m.locked_until_ms IS NULL AND m.dequeue_ms <= n.ms) AS ready,
           pg_catalog.count(*) FILTER (WHERE m.locked_until_ms IS NULL AND m.dequeue_ms > n.ms) AS scheduled,
           pg_catalog.count(*) FILTER (WHERE m.locked_until_ms IS NOT NULL) AS locked,
           pg_catalog.min(m.dequeue_ms + m.priority::bigint * 281474976710656)
               FILTER (WHERE m.locked_until_ms IS NULL AND m.dequeue_ms <= n.ms) AS oldest_ready_at_ms
    FROM lonnymq.message m CROSS JOIN now_ms n
    GROUP BY m.queue_id, m.channel_id
)
SELECT q.name AS queue, c.name AS channel,
       coalesce(k.ready, 0) AS ready,
       coalesce(k.scheduled, 0) AS scheduled,
       coalesce(k.locked, 0) AS locked,
       c.max_concurrency, c.release_interval_ms, c.max_size, c.max_attempts, c.retain_completed,
       CASE WHEN k.oldest_ready_at_ms IS NOT NULL THEN greatest(0, n.ms - k.oldest_ready_at_ms) END AS oldest_ready_ms,
       c.paused
FROM lonnymq.channel c
JOIN lonnymq.queue q ON q.id = c.queue_id
CROSS JOIN now_ms n
LEFT JOIN counts k ON k.queue_id = c.queue_id AND k.channel_id = c.id
UNION ALL
SELECT q.name, NULL, k.ready, k.scheduled, k.locked, NULL, NULL, NULL, NULL, NULL,
       CASE WHEN k.oldest_ready_at_ms IS NOT NULL THEN greatest(0, n.ms - k.oldest_ready_at_ms) END,
       q.paused
FROM counts k
JOIN lonnymq.queue q ON q.id = k.queue_id
CROSS JOIN now_ms n
WHERE k.channel_id IS NULL;
COMMENT ON VIEW lonnymq.channel_stats IS 'Ready, scheduled and locked counts with the policy of every channel.';

CREATE OR REPLACE VIEW lonnymq.queue_stats AS
SELECT q.name AS queue,
       (SELECT pg_catalog.count(*) FROM lonnymq.channel c WHERE c.queue_id = q.id) AS channels,
       coalesce(pg_catalog.sum(s.ready), 0)::bigint AS ready,
       coalesce(pg_catalog.sum(s.scheduled), 0)::bigint AS scheduled,
       coalesce(pg_catalog.sum(s.locked), 0)::bigint AS locked,
       (SELECT pg_catalog.count(*) FROM lonnymq.message_archive a WHERE a.queue = q.name) AS archived,
       q.paused
FROM lonnymq.queue q
LEFT JOIN lonnymq.channel_stats s ON s.queue = q.name
GROUP BY q.id, q.name, q.paused;
COMMENT ON VIEW lonnymq.queue_stats IS 'Totals per queue.';

-- Milliseconds until a dequeue of the queue could return something: 0 now,
-- NULL when nothing is queued. A worker's fallback sleep between wake-ups.
-- Each term is one index probe.
CREATE OR REPLACE FUNCTION lonnymq.wait_hint_ms(queue text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue_id integer;
    v_next_ms bigint;
BEGIN
    PERFORM lonnymq._check_name(wait_hint_ms.queue, 'queue', false);
    SELECT q.id INTO v_queue_id FROM lonnymq.queue q WHERE q.name = wait_hint_ms.queue AND NOT q.paused;
    IF v_queue_id IS NULL THEN
        RETURN NULL;  -- unknown or paused: nothing can be dequeued until it changes
    END IF;
    -- Model A: anything stamped is ready now; else the first due message
    -- (scheduled, or a rate-limited head) or the first lock to expire.
    v_next_ms := least(
        (SELECT v_now FROM (SELECT lonnymq._now_ms() AS v_now) n
         WHERE EXISTS (SELECT 1 FROM lonnymq.message m WHERE m.queue_id = v_queue_id AND m.vt IS NOT NULL)),
        (SELECT m.due_ms FROM lonnymq.message m
         WHERE m.queue_id = v_queue_id AND m.due_ms IS NOT NULL ORDER BY m.due_ms LIMIT 1),
        (SELECT m.locked_until_ms FROM lonnymq.message m
         WHERE m.queue_id = v_queue_id AND m.locked_until_ms IS NOT NULL
         ORDER BY m.locked_until_ms LIMIT 1));
    IF v_next_ms IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN greatest(0, v_next_ms - lonnymq._now_ms());
END
$$;
COMMENT ON FUNCTION lonnymq.wait_hint_ms(text) IS 'Milliseconds until the next message could be dequeued; NULL if none queued.';

-- Announces that the caller is about to sleep on a queue until a 'lonnymq'
-- NOTIFY for it (LISTEN lonnymq) or until the returned number of
-- milliseconds has passed, and returns that number: wait_hint_ms, or NULL
-- (nothing queued: sleep until notified). Producers notify only while a
-- consumer waits (see _notify_waiters), so a LISTEN client calls this before
-- it sleeps and wait_end when it wakes, on one connection (the announcement is
-- a session-level lock: it holds no transaction open, and ends with the session
-- if wait_end never comes). No wake-up is lost: producers that decided not to notify
-- before the announcement are waited for (at most 100 ms) before the hint
-- looks for work; if one is still in flight then, the hint is at most 100 ms,
-- so the caller looks again soon.
CREATE OR REPLACE FUNCTION lonnymq.wait_begin(queue text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key integer;
    v_patience_ms constant bigint := 100;
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    v_settled boolean;
BEGIN
    PERFORM lonnymq._check_name(wait_begin.queue, 'queue', false);
    -- Keyed by name: a consumer may wait on a queue that does not exist yet.
    v_key := pg_catalog.hashtext(wait_begin.queue);
    -- Tried: a producer checking for waiters holds it exclusively for an
    -- instant (or another role holds it): then look again soon instead.
    v_settled := pg_catalog.pg_try_advisory_lock_shared(lonnymq._waiting_lock_class(), v_key);
    IF v_settled THEN
        -- Producers in flight that skipped their NOTIFY, waited out without
        -- blocking anyone for long: a lock timeout in a subtransaction.
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', v_patience_ms::text, true);
            PERFORM pg_catalog.pg_advisory_lock(lonnymq._producing_lock_class(), v_key);
            PERFORM pg_catalog.pg_advisory_unlock(lonnymq._producing_lock_class(), v_key);
        EXCEPTION WHEN lock_not_available THEN
            v_settled := false;
        END;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    END IF;
    IF v_settled THEN
        RETURN lonnymq.wait_hint_ms(wait_begin.queue);
    END IF;
    RETURN least(coalesce(lonnymq.wait_hint_ms(wait_begin.queue), v_patience_ms), v_patience_ms);
END
$$;
COMMENT ON FUNCTION lonnymq.wait_begin(text)
    IS 'Marks the session as waiting on a queue until wait_end; returns how long to sleep at most.';

-- Ends what wait_begin announced (once per wait_begin; nothing if there is
-- nothing to end, such as when wait_begin could not announce).
CREATE OR REPLACE FUNCTION lonnymq.wait_end(queue text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key integer;
BEGIN
    PERFORM lonnymq._check_name(wait_end.queue, 'queue', false);
    v_key := pg_catalog.hashtext(wait_end.queue);
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
               WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
                 AND l.mode = 'ShareLock' AND l.objsubid = 2
                 AND l.classid = (lonnymq._waiting_lock_class())::pg_catalog.oid
                 AND l.objid = (v_key)::pg_catalog.oid) THEN
        PERFORM pg_catalog.pg_advisory_unlock_shared(lonnymq._waiting_lock_class(), v_key);
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq.wait_end(text) IS 'Ends a wait_begin announcement.';

-- Checks the invariants the fast paths rely on; one row per violation, none
-- when healthy. Scans everything: a diagnostic, not for hot paths.
CREATE OR REPLACE FUNCTION lonnymq.verify() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    WITH per_channel AS (
        SELECT m.channel_id,
               pg_catalog.count(*) FILTER (WHERE m.locked_until_ms IS NOT NULL) AS locked,
               pg_catalog.count(*) AS live,
               pg_catalog.min(m.dequeue_ms) FILTER (WHERE m.locked_until_ms IS NULL) AS true_head_ms
        FROM lonnymq.message m WHERE m.channel_id IS NOT NULL
        GROUP BY m.channel_id
    ),
    named AS (
        SELECT c.*, q.name AS queue_name,
               coalesce(p.locked, 0) AS actual_locked,
               coalesce(p.live, 0) AS actual_live,
               p.true_head_ms
        FROM lonnymq.channel c
        JOIN lonnymq.queue q ON q.id = c.queue_id
        LEFT JOIN per_channel p ON p.channel_id = c.id
    )
    SELECT pg_catalog.format('channel %s/%s: locked_count is %s, expected %s (%s messages locked, %s)',
                             n.queue_name, n.name, n.locked_count, n.expected_locked, n.actual_locked,
                             CASE WHEN n.gated THEN 'limited' ELSE 'not limited: not counted' END)
    FROM (SELECT n.*, lonnymq._gated(n.max_concurrency, n.release_interval_ms) AS gated,
                 CASE WHEN lonnymq._gated(n.max_concurrency, n.release_interval_ms)
                      THEN n.actual_locked ELSE 0 END AS expected_locked
          FROM named n) n
    WHERE n.locked_count <> n.expected_locked
    UNION ALL
    -- Model A: an unlocked message is stamped, due or parked, never two of them;
    -- parked only behind a limit or a pause, or it would be stranded.
    SELECT pg_catalog.format('message %s: both stamped and due', m.id)
    FROM lonnymq.message m WHERE m.vt IS NOT NULL AND m.due_ms IS NOT NULL
    UNION ALL
    SELECT pg_catalog.format('message %s: locked but still stamped or due', m.id)
    FROM lonnymq.message m WHERE m.locked_until_ms IS NOT NULL AND (m.vt IS NOT NULL OR m.due_ms IS NOT NULL)
    UNION ALL
    SELECT pg_catalog.format('message %s: parked in a channel without limits or pause', m.id)
    FROM lonnymq.message m LEFT JOIN lonnymq.channel c ON c.id = m.channel_id
    WHERE m.locked_until_ms IS NULL AND m.vt IS NULL AND m.due_ms IS NULL
      AND NOT coalesce(c.paused OR lonnymq._gated(c.max_concurrency, c.release_interval_ms), false)
    UNION ALL
    SELECT pg_catalog.format('channel %s/%s: %s heads', n.queue_name, n.name, h.heads)
    FROM named n CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS heads FROM lonnymq.message m
                                     WHERE m.channel_id = n.id AND m.gated AND m.locked_until_ms IS NULL) h
    WHERE n.locked_count + h.heads > coalesce(n.max_concurrency, 2147483647)
       OR (h.heads > 1 AND n.release_interval_ms > 0)
       OR (h.heads > 0 AND NOT lonnymq._gated(n.max_concurrency, n.release_interval_ms))
       OR (h.heads = 0 AND lonnymq._gated(n.max_concurrency, n.release_interval_ms) AND NOT n.paused
           AND n.locked_count < coalesce(n.max_concurrency, 2147483647)
           AND EXISTS (SELECT 1 FROM lonnymq.message m WHERE m.channel_id = n.id AND m.locked_until_ms IS NULL))
    UNION ALL
    SELECT pg_catalog.format('channel %s/%s: admission count says %s live messages but there are %s',
                             n.queue_name, n.name, a.admitted - n.removed_count, n.actual_live)
    FROM named n JOIN lonnymq.channel_admission a ON a.channel_id = n.id
    WHERE n.max_size IS NOT NULL AND a.admitted - n.removed_count <> n.actual_live
    UNION ALL
    SELECT pg_catalog.format('channel %s/%s: max_size is set but there is no admission row', n.queue_name, n.name)
    FROM named n
    WHERE n.max_size IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM lonnymq.channel_admission a WHERE a.channel_id = n.id)
    UNION ALL
    SELECT pg_catalog.format('message %s: its channel %s does not exist', m.id, m.channel_id)
    FROM lonnymq.message m
    WHERE m.channel_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM lonnymq.channel c WHERE c.id = m.channel_id)
    UNION ALL
    SELECT pg_catalog.format('message %s: its queue %s does not exist', m.id, m.queue_id)
    FROM lonnymq.message m
    WHERE NOT EXISTS (SELECT 1 FROM lonnymq.queue q WHERE q.id = m.queue_id)
    UNION ALL
    SELECT pg_catalog.format('message %s: locked but never delivered (num_attempts 0)', m.id)
    FROM lonnymq.message m
    WHERE m.locked_until_ms IS NOT NULL AND m.num_attempts < 1
    UNION ALL
    SELECT pg_catalog.format('message %s: channel belongs to another queue', m.id)
    FROM lonnymq.message m JOIN lonnymq.channel c ON c.id = m.channel_id
    WHERE c.queue_id <> m.queue_id
$$;
COMMENT ON FUNCTION lonnymq.verify() IS 'Broken invariants, one row each; empty when healthy.';
