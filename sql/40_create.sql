-- ===========================================================================
-- Creating messages.
-- ===========================================================================

-- How far apart priority levels sit, in milliseconds (2^48, ~8900 years):
-- further than any two real timestamps, so priority 1 sorts ahead of every
-- ordinary message and FIFO order holds within a level.
CREATE OR REPLACE FUNCTION lonnymq._priority_step_ms() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 281474976710656
$$;
COMMENT ON FUNCTION lonnymq._priority_step_ms() IS 'Distance between priority levels in dequeue_ms.';

-- Validates the arguments that every creation path shares.
CREATE OR REPLACE FUNCTION lonnymq._check_create(p_content bytea, p_delay_ms bigint, p_priority integer, p_dedup_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_content IS NULL THEN
        PERFORM lonnymq._invalid('content must not be NULL');
    END IF;
    IF p_delay_ms IS NULL OR p_delay_ms < 0 OR p_delay_ms > 315576000000000 THEN
        PERFORM lonnymq._invalid('delay_ms must be between 0 and 10000 years');
    END IF;
    IF p_priority IS NULL OR p_priority < 0 OR p_priority > 32767 THEN
        PERFORM lonnymq._invalid('priority must be between 0 and 32767');
    END IF;
    IF p_dedup_key IS NOT NULL AND (pg_catalog.length(p_dedup_key) = 0 OR pg_catalog.length(p_dedup_key) > 512) THEN
        PERFORM lonnymq._invalid('dedup_key must be 1 to 512 characters long, or NULL');
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._check_create(bytea, bigint, integer, text) IS 'Validates message arguments.';

-- The id of the live message with this dedup key in the channel (NULL: the
-- queue's channel-less messages), if any. Keys are scoped like message_dedup_idx.
CREATE OR REPLACE FUNCTION lonnymq._live_duplicate(p_queue_id integer, p_channel_id bigint, p_dedup_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_dedup_key IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT m.id FROM lonnymq.message m
            WHERE m.queue_id = p_queue_id AND coalesce(m.channel_id, 0) = coalesce(p_channel_id, 0)
              AND m.dedup_key = p_dedup_key);
END
$$;
COMMENT ON FUNCTION lonnymq._live_duplicate(integer, bigint, text) IS 'Live message holding a dedup key in a channel.';

-- The one creation path: message_create, message_create_batch and
-- archive_requeue all come through here. Arguments are already validated.
-- p_event is the wake-up it sends when it creates (NULL: none; a caller that
-- creates many sends one itself).
-- Locks taken: the channel pinned (_pin_channel) and, for channels with a
-- max_size, their admission row; never the channel row for update.
CREATE OR REPLACE FUNCTION lonnymq._create_one(
    p_queue_id integer, p_queue text, p_channel text, p_content bytea, p_dequeue_ms bigint,
    p_priority integer, p_dedup_key text, p_state bytea, p_num_attempts bigint, p_event text,
    p_sweep boolean, OUT status text, OUT id bigint
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
    v_admitted bigint;
    v_removed bigint;
    v_dequeue_ms bigint := p_dequeue_ms;
BEGIN
    IF p_priority > 0 THEN
        v_dequeue_ms := lonnymq._now_ms() - p_priority::bigint * lonnymq._priority_step_ms();
    END IF;
    IF p_channel IS NOT NULL THEN
        v_channel := lonnymq._channel_for_create(p_queue_id, p_channel, p_sweep);
        IF v_channel.max_size IS NOT NULL THEN
            SELECT a.admitted INTO v_admitted FROM lonnymq.channel_admission a
            WHERE a.channel_id = v_channel.id FOR UPDATE;
            -- Removals committed so far; uncommitted ones count as still live,
            -- so the limit errs on the side of refusing.
            SELECT c.removed_count INTO v_removed FROM lonnymq.channel c WHERE c.id = v_channel.id;
            IF v_admitted - v_removed >= v_channel.max_size THEN
                -- Full, but a live duplicate is still reported as such.
                id := lonnymq._live_duplicate(p_queue_id, v_channel.id, p_dedup_key);
                status := CASE WHEN id IS NULL THEN 'dropped' ELSE 'deduplicated' END;
                RETURN;
            END IF;
        END IF;
    END IF;

    LOOP
        INSERT INTO lonnymq.message AS m
            (queue_id, channel_id, content, state, num_attempts, dequeue_ms, priority, dedup_key)
        VALUES (p_queue_id, v_channel.id, p_content, p_state, p_num_attempts, v_dequeue_ms, p_priority, p_dedup_key)
        ON CONFLICT (queue_id, (coalesce(channel_id, 0)), dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
        RETURNING m.id INTO id;
        EXIT WHEN id IS NOT NULL;
        id := lonnymq._live_duplicate(p_queue_id, v_channel.id, p_dedup_key);
        IF id IS NOT NULL THEN
            status := 'deduplicated';
            RETURN;
        END IF;
        -- The duplicate left between the two statements: try again.
    END LOOP;

    IF v_channel.id IS NOT NULL THEN
        IF v_channel.max_size IS NOT NULL THEN
            UPDATE lonnymq.channel_admission a SET admitted = a.admitted + 1
            WHERE a.channel_id = v_channel.id;
        END IF;
        INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
        VALUES (p_queue_id, v_channel.id, v_dequeue_ms);
    END IF;
    IF p_event IS NOT NULL THEN
        PERFORM lonnymq._notify_waiters(p_queue, p_event);
    END IF;
    status := 'created';
END
$$;
COMMENT ON FUNCTION lonnymq._create_one(integer, text, text, bytea, bigint, integer, text, bytea, bigint, text, boolean)
    IS 'Creates one validated message: created, deduplicated or dropped.';

-- Creates a message. channel NULL: a plain FIFO message with no channel.
-- Ready at coalesce(dequeue_at, now) + delay_ms; priority > 0 means "run now,
-- ahead of the channel's ordinary messages".
-- The common case (the queue and channel exist, no capacity, no duplicate)
-- is two statements: look the channel up and pin it, insert the message and
-- (rarely) its hint. Everything else goes through _create_one.
CREATE OR REPLACE FUNCTION lonnymq.message_create(
    queue text,
    channel text,
    content bytea,
    dequeue_at timestamptz DEFAULT NULL,
    delay_ms bigint DEFAULT 0,
    priority integer DEFAULT 0,
    dedup_key text DEFAULT NULL,
    state bytea DEFAULT NULL,
    OUT status text,
    OUT id bigint
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_dequeue_ms bigint;
    v_queue_id integer;
    v_channel_id bigint;
    v_head_ms bigint;
    v_max_size bigint;
    v_lock_key integer;
    v_head_held boolean;
    v_notified boolean;
BEGIN
    -- One expression decides that the arguments are valid; only when they are
    -- not do the validators run, to raise the precise error (22023).
    IF message_create.queue IS NULL OR pg_catalog.length(message_create.queue) NOT BETWEEN 1 AND 256
       OR pg_catalog.length(message_create.channel) NOT BETWEEN 1 AND 256
       OR message_create.content IS NULL
       OR message_create.delay_ms IS NULL OR message_create.delay_ms NOT BETWEEN 0 AND 315576000000000
       OR message_create.priority IS NULL OR message_create.priority NOT BETWEEN 0 AND 32767
       OR pg_catalog.length(message_create.dedup_key) NOT BETWEEN 1 AND 512
       OR (message_create.priority > 0 AND (message_create.dequeue_at IS NOT NULL OR message_create.delay_ms > 0))
       OR NOT pg_catalog.isfinite(message_create.dequeue_at) THEN
        PERFORM lonnymq._check_name(message_create.queue, 'queue', false);
        PERFORM lonnymq._check_name(message_create.channel, 'channel', true);
        PERFORM lonnymq._check_create(message_create.content, message_create.delay_ms,
                                      message_create.priority, message_create.dedup_key);
        PERFORM lonnymq._ms_of(message_create.dequeue_at, 'dequeue_at');
        PERFORM lonnymq._invalid('a priority message runs now: do not combine priority with dequeue_at or delay_ms');
    END IF;
    IF message_create.priority > 0 THEN
        v_dequeue_ms := lonnymq._now_ms() - message_create.priority::bigint * 281474976710656;
    ELSE
        v_dequeue_ms := coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM message_create.dequeue_at) * 1000)::bigint,
                                 lonnymq._now_ms()) + message_create.delay_ms;
        -- (The bound compared here, a constant; the check only runs to raise.)
        IF v_dequeue_ms > lonnymq._max_dequeue_ms() THEN
            PERFORM lonnymq._check_dequeue_ms(v_dequeue_ms);
        END IF;
    END IF;

    -- The queue and the channel, pinned (see _pin_channel; in the same
    -- statement, as a plain row lock, at READ COMMITTED): the row comes back
    -- as it is now, and neither its capacity nor its existence can change
    -- until this commits. A channel deleted or capped meanwhile goes the long
    -- way below.
    SELECT q.id, c.id, c.head_ms, c.max_size, c.lock_key
    INTO v_queue_id, v_channel_id, v_head_ms, v_max_size, v_lock_key
    FROM lonnymq.queue q
    LEFT JOIN LATERAL (SELECT c.id, c.head_ms, c.max_size, c.lock_key FROM lonnymq.channel c
                       WHERE c.queue_id = q.id AND c.name = message_create.channel
                       LIMIT 1 FOR KEY SHARE) c ON true
    WHERE q.name = message_create.queue;
    IF v_channel_id IS NOT NULL THEN
        v_head_held := lonnymq._hold_head_lock(v_lock_key);
        IF NOT lonnymq._read_committed() THEN
            -- Outside READ COMMITTED the pin must also refuse a stale row.
            SELECT c.id, c.head_ms, c.max_size INTO v_channel_id, v_head_ms, v_max_size
            FROM lonnymq._pin_channel(v_channel_id) c;
        END IF;
    END IF;
    IF v_queue_id IS NOT NULL AND (v_channel_id IS NOT NULL OR message_create.channel IS NULL) THEN
        WITH created AS (
            -- (A capped channel inserts nothing here: it only learns whether
            -- a live duplicate answers, before the admission count.)
            INSERT INTO lonnymq.message AS m
                (queue_id, channel_id, content, state, dequeue_ms, priority, dedup_key)
            SELECT v_queue_id, v_channel_id, message_create.content, message_create.state, v_dequeue_ms,
                   message_create.priority, message_create.dedup_key
            WHERE v_max_size IS NULL
            ON CONFLICT (queue_id, (coalesce(channel_id, 0)), dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
            RETURNING m.id, m.channel_id
        ), lowered AS (
            -- PROTOTYPE: the producer lowers the head itself when it can take
            -- the channel row without waiting; a hint only when it cannot.
            UPDATE lonnymq.channel c
            SET head_ms = least(c.head_ms, v_dequeue_ms),
                ready_ms = lonnymq._ready_ms(least(c.head_ms, v_dequeue_ms), c.last_turn_ms,
                                             c.release_interval_ms, c.locked_count, c.max_concurrency, c.turn_seq)
            WHERE c.id = (SELECT l.id FROM lonnymq.channel l WHERE l.id = v_channel_id
                          FOR NO KEY UPDATE SKIP LOCKED)
              AND EXISTS (SELECT 1 FROM created)
              AND (NOT v_head_held OR v_head_ms IS NULL OR v_dequeue_ms < v_head_ms)
            RETURNING c.id
        ), hinted AS (
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            SELECT v_queue_id, k.channel_id, v_dequeue_ms FROM created k
            WHERE k.channel_id IS NOT NULL AND (NOT v_head_held OR v_head_ms IS NULL OR v_dequeue_ms < v_head_ms)
              AND NOT EXISTS (SELECT 1 FROM lowered)
        )
        SELECT k.id INTO message_create.id FROM created k;
        IF message_create.id IS NOT NULL THEN
            status := 'created';
            -- (An expression, not PERFORM: no executor started, see _notify_waiters.)
            v_notified := lonnymq._notify_waiters(message_create.queue, 'created');
            RETURN;
        END IF;
        -- Nothing inserted: a live duplicate is the answer as it stands.
        id := lonnymq._live_duplicate(v_queue_id, v_channel_id, message_create.dedup_key);
        IF id IS NOT NULL THEN
            status := 'deduplicated';
            RETURN;
        END IF;
    END IF;
    -- New queue or channel, or a capacity.
    SELECT r.status, r.id INTO status, id
    FROM lonnymq._create_one(coalesce(v_queue_id, lonnymq._queue_id(message_create.queue, true)),
                             message_create.queue, message_create.channel, message_create.content,
                             v_dequeue_ms, message_create.priority, message_create.dedup_key,
                             message_create.state, 0, 'created', true) r;
END
$$;
COMMENT ON FUNCTION lonnymq.message_create(text, text, bytea, timestamptz, bigint, integer, text, bytea)
    IS 'Creates a message: (created|deduplicated|dropped, id).';

-- Creates many messages in input order, each under every per-message rule.
-- With an idempotency_key already used in this queue by a batch into the same
-- channels, creates nothing and answers duplicate_batch with the ids the
-- first call created. The elements are checked here and created as a set,
-- in a few statements (_publish, _create_set).
CREATE OR REPLACE FUNCTION lonnymq.message_create_batch(
    queue text,
    channels text[],
    contents bytea[],
    dequeue_ats timestamptz[] DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL,
    idempotency_key text DEFAULT NULL
) RETURNS TABLE (status text, id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
-- Its statements over the arrays are planned once for every size (see
-- message_complete_batch); _create_set plans its deciding statement per call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_count integer := pg_catalog.cardinality(message_create_batch.contents);
    v_names text[];
    v_bad timestamptz;
BEGIN
    -- One expression decides that the arguments are valid; only when they are
    -- not do the checks below it run, to raise the precise error (22023).
    IF message_create_batch.queue IS NULL OR pg_catalog.length(message_create_batch.queue) NOT BETWEEN 1 AND 256
       OR message_create_batch.contents IS NULL
       OR NOT (lonnymq._is_batch_array(message_create_batch.contents)
               AND lonnymq._is_batch_array(message_create_batch.channels)
               AND lonnymq._is_batch_array(message_create_batch.dequeue_ats)
               AND lonnymq._is_batch_array(message_create_batch.dedup_keys))
       OR v_count > 100000
       OR pg_catalog.cardinality(message_create_batch.channels) <> v_count
       OR pg_catalog.cardinality(message_create_batch.dequeue_ats) <> v_count
       OR pg_catalog.cardinality(message_create_batch.dedup_keys) <> v_count
       OR pg_catalog.length(message_create_batch.idempotency_key) NOT BETWEEN 1 AND 512
       OR pg_catalog.array_position(message_create_batch.contents, NULL) IS NOT NULL THEN
        PERFORM lonnymq._check_name(message_create_batch.queue, 'queue', false);
        IF message_create_batch.contents IS NULL THEN
            PERFORM lonnymq._invalid('contents must not be NULL');
        END IF;
        PERFORM lonnymq._check_array(message_create_batch.contents, 'contents');
        PERFORM lonnymq._check_array(message_create_batch.channels, 'channels');
        PERFORM lonnymq._check_array(message_create_batch.dequeue_ats, 'dequeue_ats');
        PERFORM lonnymq._check_array(message_create_batch.dedup_keys, 'dedup_keys');
        IF v_count > 100000 THEN
            PERFORM lonnymq._invalid('a batch holds at most 100000 messages');
        END IF;
        IF pg_catalog.cardinality(message_create_batch.channels) <> v_count THEN
            PERFORM lonnymq._invalid('channels must have as many elements as contents');
        END IF;
        IF pg_catalog.cardinality(message_create_batch.dequeue_ats) <> v_count THEN
            PERFORM lonnymq._invalid('dequeue_ats must have as many elements as contents');
        END IF;
        IF pg_catalog.cardinality(message_create_batch.dedup_keys) <> v_count THEN
            PERFORM lonnymq._invalid('dedup_keys must have as many elements as contents');
        END IF;
        IF pg_catalog.length(message_create_batch.idempotency_key) NOT BETWEEN 1 AND 512 THEN
            PERFORM lonnymq._invalid('idempotency_key must be 1 to 512 characters long, or NULL');
        END IF;
        PERFORM lonnymq._invalid('content must not be NULL');
    END IF;
    -- The other element checks, set-based: a batch of 100000 must not pay
    -- 100000 calls.
    -- The distinct channel names, once: the name check and every later
    -- channel lookup walk this short list, never the batch-long array.
    SELECT coalesce(pg_catalog.array_agg(DISTINCT n ORDER BY n), '{}') INTO v_names
    FROM pg_catalog.unnest(message_create_batch.channels) AS n WHERE n IS NOT NULL;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(v_names) n
               WHERE pg_catalog.length(n) = 0 OR pg_catalog.length(n) > 256) THEN
        PERFORM lonnymq._invalid('channels element must be 1 to 256 characters long');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(message_create_batch.dedup_keys) k
               WHERE pg_catalog.length(k) = 0 OR pg_catalog.length(k) > 512) THEN
        PERFORM lonnymq._invalid('dedup_key must be 1 to 512 characters long, or NULL');
    END IF;
    -- (The first element that fails either check, in ms as _publish computes
    -- them: one at the bound itself is valid and must not hide a later one.)
    SELECT t INTO v_bad FROM pg_catalog.unnest(message_create_batch.dequeue_ats) t
    WHERE CASE WHEN NOT pg_catalog.isfinite(t) THEN true
               ELSE pg_catalog.floor(EXTRACT(EPOCH FROM t) * 1000)::bigint > lonnymq._max_dequeue_ms() END
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        PERFORM lonnymq._check_dequeue_ms(lonnymq._ms_of(v_bad, 'dequeue_ats element'));
    END IF;

    RETURN QUERY SELECT s.status, s.id
                 FROM lonnymq._publish(message_create_batch.queue, message_create_batch.channels,
                                       message_create_batch.contents, message_create_batch.dequeue_ats, message_create_batch.dedup_keys,
                                       EXISTS (SELECT 1 FROM pg_catalog.unnest(message_create_batch.dedup_keys) k
                                               WHERE k IS NOT NULL),
                                       v_names, v_count, message_create_batch.idempotency_key) p,
                      ROWS FROM (pg_catalog.unnest(p.statuses), pg_catalog.unnest(p.ids)) AS s(status, id);
END
$$;
COMMENT ON FUNCTION lonnymq.message_create_batch(text, text[], bytea[], timestamptz[], text[], text)
    IS 'Creates messages in input order; an idempotency_key makes a repeat create nothing.';
