-- ===========================================================================
-- Internal helpers (underscore names). Not part of the API; not granted.
--
-- Helpers set no search_path of their own: they run only inside lonnymq's
-- API functions, whose pinned search_path (pg_catalog, pg_temp) then also
-- resolves theirs, and no role but the owner may execute them (99_privileges;
-- test/pgtap/03_security.sql checks both). A SET clause would cost a GUC save
-- and restore on every call (about 10 us, several calls per message) and stop
-- the planner from inlining the one-expression SQL helpers of the hot path
-- (_now_ms, _ready_ms, _accounted, _read_committed, _dequeue_at, ...) into the
-- statements that use them. The validators granted to PUBLIC do pin it.
-- ===========================================================================

-- The database clock in integer milliseconds (README, "Concepts": dequeue_at). clock_timestamp, not
-- now(): a dequeue inside a long transaction must see the real time.
CREATE OR REPLACE FUNCTION lonnymq._now_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT pg_catalog.floor(EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint
$$;
COMMENT ON FUNCTION lonnymq._now_ms() IS 'Database clock in milliseconds since the epoch.';

-- Milliseconds of a caller-supplied timestamp; infinities are rejected because
-- they cannot be scheduled and would poison the integer ordering.
CREATE OR REPLACE FUNCTION lonnymq._ms_of(p_at timestamptz, p_argument text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF NOT pg_catalog.isfinite(p_at) THEN
        RAISE EXCEPTION 'lonnymq: % must be a finite timestamp, got %', p_argument, p_at
            USING ERRCODE = '22023';
    END IF;
    RETURN pg_catalog.floor(EXTRACT(EPOCH FROM p_at) * 1000)::bigint;
END
$$;
COMMENT ON FUNCTION lonnymq._ms_of(timestamptz, text) IS 'Milliseconds of a finite timestamp, 22023 otherwise.';

-- The latest dequeue time a message may have (dequeue_at plus delay_ms):
-- the start of the year 100000. Later times would overflow the interval
-- arithmetic of the views. (A constant in SQL: inlined into the caller's
-- expression, so checking against it costs no call.)
CREATE OR REPLACE FUNCTION lonnymq._max_dequeue_ms() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 3093527980800000::bigint
$$;
COMMENT ON FUNCTION lonnymq._max_dequeue_ms() IS 'The latest dequeue time, in ms: the year 100000.';

-- Rejects a computed dequeue time beyond _max_dequeue_ms().
CREATE OR REPLACE FUNCTION lonnymq._check_dequeue_ms(p_dequeue_ms bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_dequeue_ms > lonnymq._max_dequeue_ms() THEN
        RAISE EXCEPTION 'lonnymq: dequeue_at plus delay_ms must be before the year 100000'
            USING ERRCODE = '22023';
    END IF;
    RETURN p_dequeue_ms;
END
$$;
COMMENT ON FUNCTION lonnymq._check_dequeue_ms(bigint) IS 'A dequeue time the views can show, 22023 otherwise.';

-- Raises the SQLSTATE 22023 error that every invalid argument gets (docs/statuses.md).
CREATE OR REPLACE FUNCTION lonnymq._invalid(p_message text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'lonnymq: %', p_message USING ERRCODE = '22023';
END
$$;
COMMENT ON FUNCTION lonnymq._invalid(text) IS 'Raises invalid_parameter_value (22023).';

-- Array arguments of the batch functions: one-dimensional with lower bound 1
-- (or empty, or NULL: the caller decides whether NULL is allowed). They are
-- read as a[1..n] and unnested side by side, so '[0:1]={a,b}' or a
-- two-dimensional array would silently pair the wrong elements.
-- The rule itself is a plain SQL expression, inlined where the batch
-- functions test all their arguments at once; _check_array raises its error.
CREATE OR REPLACE FUNCTION lonnymq._is_batch_array(p_array anyarray) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT coalesce(pg_catalog.array_ndims(p_array) > 1 OR pg_catalog.array_lower(p_array, 1) <> 1, false)
$$;
COMMENT ON FUNCTION lonnymq._is_batch_array(anyarray)
    IS 'Whether an array argument of a batch function has the shape it needs (or is empty or NULL).';

CREATE OR REPLACE FUNCTION lonnymq._check_array(p_array anyarray, p_argument text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF NOT lonnymq._is_batch_array(p_array) THEN
        PERFORM lonnymq._invalid(pg_catalog.format(
            '%s must be a one-dimensional array starting at index 1, got dimensions %s',
            p_argument, pg_catalog.array_dims(p_array)));
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._check_array(anyarray, text) IS 'Validates the shape of a batch array argument.';

-- An age (archive_prune's older_than, the maintenance job's retention):
-- finite, and each part (months, days, time) 0 or more. With mixed signs a
-- small-looking interval ('100000 years -36000000 days') would still leave the
-- range of timestamps when now() minus it is computed part by part.
CREATE OR REPLACE FUNCTION lonnymq._check_age(p_age interval, p_argument text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_age IS NULL OR NOT pg_catalog.isfinite(p_age)
       OR EXTRACT(YEAR FROM p_age) < 0 OR EXTRACT(MONTH FROM p_age) < 0 OR EXTRACT(DAY FROM p_age) < 0
       OR EXTRACT(HOUR FROM p_age) < 0 OR EXTRACT(MINUTE FROM p_age) < 0
       OR EXTRACT(MICROSECONDS FROM p_age) < 0 THEN
        PERFORM lonnymq._invalid(pg_catalog.format('%s must be a finite interval with no negative part',
                                                   p_argument));
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._check_age(interval, text) IS 'Validates an age interval: finite, no negative part.';

-- Queue and channel names: non-empty, bounded, printable enough for logs.
CREATE OR REPLACE FUNCTION lonnymq._check_name(p_name text, p_argument text, p_nullable boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_name IS NULL THEN
        IF NOT p_nullable THEN
            PERFORM lonnymq._invalid(pg_catalog.format('%s must not be NULL', p_argument));
        END IF;
    ELSIF pg_catalog.length(p_name) = 0 OR pg_catalog.length(p_name) > 256 THEN
        PERFORM lonnymq._invalid(pg_catalog.format('%s must be 1 to 256 characters long', p_argument));
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._check_name(text, text, boolean) IS 'Validates a queue or channel name.';

-- When a channel may next be served, or NULL when it cannot be (no known
-- head, or max_concurrency reached). greatest() with the last turn is what
-- makes dequeue fair: back-dated or priority messages never buy extra turns.
-- A channel never dequeued (turn_seq 0) has its creation time as last turn,
-- which counts for fairness but not for the rate limit.
CREATE OR REPLACE FUNCTION lonnymq._ready_ms(
    p_head_ms bigint, p_last_turn_ms bigint, p_release_interval_ms bigint,
    p_locked_count integer, p_max_concurrency integer, p_turn_seq bigint
) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_head_ms IS NULL THEN NULL
                WHEN p_max_concurrency IS NOT NULL AND p_locked_count >= p_max_concurrency THEN NULL
                WHEN p_turn_seq = 0 THEN greatest(p_head_ms, p_last_turn_ms)
                ELSE greatest(p_head_ms, p_last_turn_ms + p_release_interval_ms) END
$$;
COMMENT ON FUNCTION lonnymq._ready_ms(bigint, bigint, bigint, integer, integer, bigint)
    IS 'Scheduling key of a channel: when it may next be served, NULL if it cannot.';

-- NOTIFY with a small JSON payload. Identical payloads in one transaction are
-- delivered once by PostgreSQL, which is what coalesces batches.
CREATE OR REPLACE FUNCTION lonnymq._notify(p_listen_channel text, p_queue text, p_event text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF coalesce(pg_catalog.current_setting('lonnymq.notify', true), '') NOT IN ('off', 'false', '0') THEN
        PERFORM pg_catalog.pg_notify(p_listen_channel,
            pg_catalog.json_build_object('queue', p_queue, 'event', p_event)::text);
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._notify(text, text, text) IS 'Sends a coalescable event unless lonnymq.notify is off.';

-- Wakes consumers of a queue about new or newly ready work: a 'lonnymq' NOTIFY,
-- but only while a consumer waits on the queue's slot (wait_begin, _wait_slot),
-- because a notifying commit takes a database-wide lock through its WAL flush
-- and notifying producers serialize on it. The handshake, with no write and
-- no wait on this side: hold the slot's producing lock shared until commit
-- (tried), then see whether a consumer holds the waiting lock (tried
-- exclusively and released). A consumer about to sleep takes the waiting
-- lock, then the producing lock exclusively for a moment (waiting for
-- producers that decided not to notify to commit), and only then looks for
-- work: a message committed without a NOTIFY is one it sees. Any try failing
-- means "maybe someone waits": notify. The waiting lock is tried once before
-- the producing lock too, so that a producer that notifies anyway holds
-- nothing, and a consumer's wait is for the producers that did not notify
-- only. At REPEATABLE READ and SERIALIZABLE the same holds (the consumer
-- waits for the commit, not for a snapshot). lonnymq.notify = off: never.
-- Returns whether it notified (whether someone may wait). It returns a value
-- so that a caller can evaluate it as an expression (`x := ...`), which
-- PL/pgSQL runs without starting an executor, where PERFORM runs a query:
-- message_create, the hot path, does.
CREATE OR REPLACE FUNCTION lonnymq._notify_waiters(p_queue text, p_event text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_slot integer := lonnymq._wait_slot(p_queue);
BEGIN
    -- (CASE: the tries must run in this order, and each unlock only after a
    -- successful try.)
    IF (CASE WHEN NOT pg_catalog.pg_try_advisory_lock(lonnymq._waiting_lock_class(), v_slot)
             THEN true
             WHEN NOT pg_catalog.pg_advisory_unlock(lonnymq._waiting_lock_class(), v_slot)
             THEN true
             WHEN NOT pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq._producing_lock_class(), v_slot)
             THEN true
             WHEN pg_catalog.pg_try_advisory_lock(lonnymq._waiting_lock_class(), v_slot)
             THEN NOT pg_catalog.pg_advisory_unlock(lonnymq._waiting_lock_class(), v_slot)
             ELSE true END) THEN
        PERFORM lonnymq._notify('lonnymq', p_queue, p_event);
        RETURN true;
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION lonnymq._notify_waiters(text, text)
    IS 'NOTIFY lonnymq about a queue only while a consumer may wait on it (wait_begin); whether it did.';

-- Looks a queue up by name; with p_create, creates it on first use.
CREATE OR REPLACE FUNCTION lonnymq._queue_id(p_queue text, p_create boolean) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_id integer;
BEGIN
    SELECT q.id INTO v_id FROM lonnymq.queue q WHERE q.name = p_queue;
    IF v_id IS NULL AND p_create THEN
        INSERT INTO lonnymq.queue (name) VALUES (p_queue)
            ON CONFLICT (name) DO NOTHING RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            SELECT q.id INTO v_id FROM lonnymq.queue q WHERE q.name = p_queue;
        END IF;
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION lonnymq._queue_id(text, boolean) IS 'Queue id by name, optionally created.';

-- Milliseconds an implicit channel must stay empty before the sweep removes it.
CREATE OR REPLACE FUNCTION lonnymq._channel_idle_ms() RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_setting text := pg_catalog.current_setting('lonnymq.channel_idle_ms', true);
BEGIN
    IF v_setting IS NULL OR v_setting = '' THEN
        RETURN 60000;
    END IF;
    IF v_setting !~ '^[0-9]{1,12}$' THEN
        PERFORM lonnymq._invalid(pg_catalog.format(
            'lonnymq.channel_idle_ms must be a whole number of milliseconds, got %s', v_setting));
    END IF;
    RETURN v_setting::bigint;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_idle_ms() IS 'Idle time before an empty implicit channel is swept.';

-- A channel's head: the dequeue_ms of its earliest unlocked message, NULL
-- when it has none. Called with the channel's head lock held (see
-- _channel_raise_head); VOLATILE, so at READ COMMITTED it reads in a
-- snapshot taken after that lock, and sees every producer that held it.
CREATE OR REPLACE FUNCTION lonnymq._channel_head_ms(p_queue_id integer, p_channel_id bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_head_ms bigint;
BEGIN
    SELECT m.dequeue_ms INTO v_head_ms
    FROM lonnymq.message m
    WHERE m.queue_id = p_queue_id AND m.channel_id = p_channel_id AND m.locked_until_ms IS NULL
    ORDER BY m.dequeue_ms, m.id
    LIMIT 1;
    RETURN v_head_ms;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_head_ms(integer, bigint)
    IS 'The dequeue_ms of a channel''s earliest unlocked message, read under its head lock.';

-- Recomputes a channel's head and scheduling key from the message index.
-- The caller holds the channel row lock.
CREATE OR REPLACE FUNCTION lonnymq._channel_refresh(p_channel_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue_id integer;
    v_head_ms bigint;
BEGIN
    SELECT c.queue_id INTO v_queue_id FROM lonnymq.channel c WHERE c.id = p_channel_id;
    v_head_ms := lonnymq._channel_head_ms(v_queue_id, p_channel_id);
    UPDATE lonnymq.channel c
    SET head_ms = v_head_ms,
        ready_ms = lonnymq._ready_ms(v_head_ms, c.last_turn_ms, c.release_interval_ms,
                                     c.locked_count, c.max_concurrency, c.turn_seq)
    WHERE c.id = p_channel_id;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_refresh(bigint) IS 'Recomputes head_ms and ready_ms of a locked channel.';

-- Raises a channel's head to the earliest unlocked message, which dequeue
-- does once a channel has no due message left. A producer writes a hint only
-- when its message is earlier than the head it read, so a head raised past an
-- uncommitted message would strand it: a head may rise only while no such
-- producer is in flight. They hold the channel's head lock shared until they
-- commit; this takes it exclusively, with a try, until this transaction ends
-- (producers arriving meanwhile fail their try and write a hint: nobody
-- waits). When it is busy the head stays early, which is safe, and a later
-- dequeue tries again. Only at READ COMMITTED, where the refresh reads with a
-- snapshot taken after the lock. The caller holds the channel row.
CREATE OR REPLACE FUNCTION lonnymq._channel_raise_head(p_channel_id bigint, p_lock_key integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT lonnymq._take_head_lock(p_lock_key) THEN
        RETURN false;
    END IF;
    PERFORM lonnymq._channel_refresh(p_channel_id);
    RETURN true;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_raise_head(bigint, integer)
    IS 'Raises a drained channel head when no producer is in flight; whether it did.';

-- Folds a busy channel's due hints into one, its earliest: the head only
-- ever needs the earliest. Run by a dequeuer that cannot have the channel
-- row, so that a channel held for long (its producers write a hint per
-- message meanwhile) never leaves more than a few hints in front of other
-- channels' new work. The earliest goes back in the same transaction.
CREATE OR REPLACE FUNCTION lonnymq._collapse_hints(p_queue_id integer, p_channel_id bigint, p_now_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- The common case, one due hint: nothing to fold (one probe).
    IF (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq.channel_hint h
                                         WHERE h.channel_id = p_channel_id AND h.dequeue_ms <= p_now_ms
                                         LIMIT 2) x) < 2 THEN
        RETURN;
    END IF;
    -- By ctid, skipping hints someone else is deleting: a DELETE by channel
    -- would wait for them.
    WITH spent AS (
        DELETE FROM lonnymq.channel_hint h
        WHERE h.ctid = ANY (ARRAY(SELECT d.ctid FROM lonnymq.channel_hint d
                                  WHERE d.channel_id = p_channel_id AND d.dequeue_ms <= p_now_ms
                                  FOR UPDATE SKIP LOCKED))
        RETURNING h.dequeue_ms)
    INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
    SELECT p_queue_id, p_channel_id, pg_catalog.min(spent.dequeue_ms) FROM spent
    HAVING pg_catalog.min(spent.dequeue_ms) IS NOT NULL;
END
$$;
COMMENT ON FUNCTION lonnymq._collapse_hints(integer, bigint, bigint)
    IS 'Folds the due hints of a busy channel into its earliest one, without waiting.';

-- Folds due producer hints into channel heads, for up to p_limit channels,
-- taking channels in the order of their earliest due hint. Channels held by
-- another transaction (a dequeuer or settler about to commit, which folds
-- them in itself next time) are passed over, their hints folded into one
-- (_collapse_hints): this never waits, so dequeue never waits, and nothing
-- one tenant does leaves more than one hint of a held channel in front of
-- another tenant's ready work. Returns those busy channels: their messages
-- are ready even if no committed head says so yet, and dequeue may share them.
CREATE OR REPLACE FUNCTION lonnymq._absorb_hints(p_queue_id integer, p_now_ms bigint, p_limit integer) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel_id bigint;
    v_head_ms bigint;
    v_hint_ms bigint;
    v_seen bigint[] := '{}';
    v_busy bigint[] := '{}';
    v_refreshed integer := 0;
    v_read integer;
BEGIN
    -- Due hints in windows of 100, earliest first; a window that ends before
    -- p_limit channels were refreshed is followed by the next, past the
    -- channels seen. Every channel seen keeps at most one due hint (or those
    -- another dequeuer is folding), so the next window does not read a held
    -- channel's backlog again. Usually one window is all there is.
    <<windows>>
    LOOP
        v_read := 0;
        FOR v_channel_id IN
            SELECT h.channel_id FROM lonnymq.channel_hint h
            WHERE h.queue_id = p_queue_id AND h.dequeue_ms <= p_now_ms AND h.channel_id <> ALL (v_seen)
            ORDER BY h.dequeue_ms
            LIMIT 100
        LOOP
            v_read := v_read + 1;
            CONTINUE WHEN v_channel_id = ANY (v_seen);
            v_seen := v_seen || v_channel_id;
            SELECT c.head_ms INTO v_head_ms FROM lonnymq.channel c
            WHERE c.id = v_channel_id
            FOR NO KEY UPDATE SKIP LOCKED;
            IF FOUND THEN
                -- The head only has to be a lower bound of the earliest unlocked
                -- message: the earliest deleted hint is one for the new messages.
                -- In a backlog it is rarely earlier than the head: then the
                -- channel row is not touched at all.
                -- By ctid, skipping hints a dequeuer folding them holds
                -- (it puts their earliest back): a DELETE by channel would wait.
                WITH spent AS (
                    DELETE FROM lonnymq.channel_hint h
                    WHERE h.ctid = ANY (ARRAY(SELECT d.ctid FROM lonnymq.channel_hint d
                                              WHERE d.channel_id = v_channel_id AND d.dequeue_ms <= p_now_ms
                                              FOR UPDATE SKIP LOCKED))
                    RETURNING h.dequeue_ms)
                SELECT pg_catalog.min(spent.dequeue_ms) INTO v_hint_ms FROM spent;
                IF v_head_ms IS NULL OR v_hint_ms < v_head_ms THEN
                    UPDATE lonnymq.channel c
                    SET head_ms = least(c.head_ms, v_hint_ms),
                        ready_ms = lonnymq._ready_ms(least(c.head_ms, v_hint_ms), c.last_turn_ms,
                                                     c.release_interval_ms, c.locked_count, c.max_concurrency,
                                                     c.turn_seq)
                    WHERE c.id = v_channel_id;
                END IF;
                v_refreshed := v_refreshed + 1;
                EXIT windows WHEN v_refreshed >= p_limit;
            ELSIF EXISTS (SELECT 1 FROM lonnymq.channel c WHERE c.id = v_channel_id) THEN
                v_busy := v_busy || v_channel_id;
                PERFORM lonnymq._collapse_hints(p_queue_id, v_channel_id, p_now_ms);
            ELSE
                -- The channel was deleted: its leftover hints mean nothing.
                DELETE FROM lonnymq.channel_hint h
                WHERE h.ctid = ANY (ARRAY(SELECT d.ctid FROM lonnymq.channel_hint d
                                          WHERE d.channel_id = v_channel_id FOR UPDATE SKIP LOCKED));
            END IF;
        END LOOP;
        EXIT windows WHEN v_read < 100;
    END LOOP;
    RETURN v_busy;
END
$$;
COMMENT ON FUNCTION lonnymq._absorb_hints(integer, bigint, integer)
    IS 'Applies due channel hints without waiting; returns the channels that were busy.';

-- Copies a message into the archive with its outcome.
CREATE OR REPLACE FUNCTION lonnymq._archive(p_message lonnymq.message, p_outcome text, p_error text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    INSERT INTO lonnymq.message_archive
        (message_id, queue, channel, content, state, num_attempts, outcome, error, created_at)
    SELECT p_message.id, q.name, c.name, p_message.content, p_message.state,
           p_message.num_attempts, p_outcome, p_error, p_message.created_at
    FROM lonnymq.queue q
    LEFT JOIN lonnymq.channel c ON c.id = p_message.channel_id
    WHERE q.id = p_message.queue_id;
END
$$;
COMMENT ON FUNCTION lonnymq._archive(lonnymq.message, text, text) IS 'Archives a message with an outcome.';

-- Whether a channel keeps exact per-channel accounting. A channel with a
-- concurrency limit, a rate limit or a capacity needs its counters updated
-- under the channel row lock, which serializes its dequeues and settles.
-- Any other channel is "shared": concurrent dequeuers take its messages in
-- parallel and settles never touch its row.
CREATE OR REPLACE FUNCTION lonnymq._accounted(p_max_concurrency integer, p_release_interval_ms bigint, p_max_size bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_max_concurrency IS NOT NULL OR p_release_interval_ms > 0 OR p_max_size IS NOT NULL
$$;
COMMENT ON FUNCTION lonnymq._accounted(integer, bigint, bigint) IS 'Whether a channel policy needs exact accounting.';

-- Whether completing a message of a channel with this policy must go through
-- _settle_locked: its slot is counted (accounted) or a completed copy is
-- archived (retain_completed). Otherwise a complete only deletes the message.
-- One rule for message_complete (its one statement and its steps) and
-- message_complete_batch; a plain SQL expression, inlined where it is used.
CREATE OR REPLACE FUNCTION lonnymq._complete_needs_settle(p_retain_completed boolean, p_max_concurrency integer,
                                                          p_release_interval_ms bigint, p_max_size bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_retain_completed OR lonnymq._accounted(p_max_concurrency, p_release_interval_ms, p_max_size)
$$;
COMMENT ON FUNCTION lonnymq._complete_needs_settle(boolean, integer, bigint, bigint)
    IS 'Whether a complete of this channel''s message counts a slot or archives a copy.';

-- Whether this transaction reads with a snapshot per statement (READ
-- COMMITTED). Only then does a statement run after a lock see every change
-- committed before it, which the channel locks rely on. At REPEATABLE READ and
-- SERIALIZABLE the snapshot is the transaction's first one.
CREATE OR REPLACE FUNCTION lonnymq._read_committed() RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.current_setting('transaction_isolation') = 'read committed'
$$;
COMMENT ON FUNCTION lonnymq._read_committed() IS 'Whether the transaction is at READ COMMITTED.';

-- glibc's malloc gives memory back to the kernel whenever 128 kB or more is
-- free at the top of a backend's heap, and takes it again, as fresh zeroed
-- pages, at the next allocation. A single dequeue's executor state (several
-- btree scans of 27-43 kB each, up to three PL/pgSQL levels deep) can cross
-- that line on every call, depending on where the backend's heap happens to
-- end: the heap grown and given back again and again, 3-11 page faults per
-- dequeue (bench/README.md, "The heap given back at every dequeue"). Freeing
-- one mmapped block above the threshold makes glibc raise it for the rest of
-- the backend's life (mallopt(3), the dynamic mmap threshold: then 1 MB,
-- trimming from 2 MB on). message_dequeue does that once per session
-- (about 2 ms), remembered in the session setting lonnymq.heap; a
-- rolled-back or reset setting only means doing it again, from the heap
-- this time. No effect, and no harm, where the block does not come from
-- mmap: another allocator than glibc's, glibc's thresholds set by hand, or
-- 1 MB already free in the heap.
CREATE OR REPLACE FUNCTION lonnymq._heap_warmed() RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.current_setting('lonnymq.heap', true) IS NOT DISTINCT FROM 'warm'
$$;
COMMENT ON FUNCTION lonnymq._heap_warmed() IS 'Whether this session already warmed its heap (_warm_heap).';

CREATE OR REPLACE FUNCTION lonnymq._warm_heap(p_bytes integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- (A kB repeated: a byte repeated is a loop over every byte.)
    PERFORM pg_catalog.octet_length(pg_catalog.repeat(pg_catalog.repeat(' ', 1024), p_bytes / 1024));
    PERFORM pg_catalog.set_config('lonnymq.heap', 'warm', false);
END
$$;
COMMENT ON FUNCTION lonnymq._warm_heap(integer)
    IS 'Allocates and frees p_bytes once, so that glibc keeps this backend''s heap (see _heap_warmed).';

-- Pins a channel until commit and returns it as it is now: its row locked
-- FOR KEY SHARE, which every producer and settler of the channel takes
-- (waiting) and which only channel_set, channel_delete and the sweep conflict
-- with (FOR UPDATE, DELETE). So no policy change or deletion interleaves with
-- a half-done create or settle, while dequeuers (FOR NO KEY UPDATE) and other
-- pinners go on. Row locks need UPDATE on lonnymq.channel, which only the
-- extension's functions have: no outside role can take this lock (an advisory
-- lock, which any role may take, could be held to freeze a channel).
-- At READ COMMITTED the policy returned is the latest: channel_set locks the
-- row FOR UPDATE before it changes it, so a pin waits for it and PostgreSQL
-- then re-reads the row (a dequeue's turn, which changes no policy, is not
-- waited for, and the counters it wrote may show as the statement's snapshot
-- saw them: whoever updates the counters locks the row FOR NO KEY UPDATE
-- first, which waits and re-reads). At REPEATABLE READ and SERIALIZABLE the
-- snapshot's version may be stale (deleted by a sweep, changed by channel_set
-- or a dequeue turn) and acting on it could strand a message or miscount a
-- slot: there the lock is FOR NO KEY UPDATE, which refuses a row changed since
-- the snapshot with a serialization failure (40001): retry the transaction.
-- NULL when the channel does not exist (any more).
CREATE OR REPLACE FUNCTION lonnymq._pin_channel(p_channel_id bigint) RETURNS lonnymq.channel
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
BEGIN
    IF lonnymq._read_committed() THEN
        SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = p_channel_id FOR KEY SHARE;
    ELSE
        SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = p_channel_id FOR NO KEY UPDATE;
    END IF;
    RETURN v_channel;
END
$$;
COMMENT ON FUNCTION lonnymq._pin_channel(bigint)
    IS 'Locks a channel against policy changes and deletion until commit; returns it as it is now.';

-- Whether a producer may leave out the hint behind a channel's head (see
-- _channel_raise_head): only at READ COMMITTED, and only with the channel's
-- head lock held shared until commit, tried (a head being raised right now
-- means: write the hint).
CREATE OR REPLACE FUNCTION lonnymq._hold_head_lock(p_lock_key integer) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN lonnymq._read_committed()
                THEN pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq._head_lock_class(),
                                                                lonnymq._head_lock_slot(p_lock_key))
                ELSE false END
$$;
COMMENT ON FUNCTION lonnymq._hold_head_lock(integer) IS 'Whether a producer holds a channel head lock and may skip its hint.';

-- Whether this transaction may raise a channel's head now (see
-- _channel_raise_head): only at READ COMMITTED, and only with the head lock
-- taken exclusively, with a try, until commit.
CREATE OR REPLACE FUNCTION lonnymq._take_head_lock(p_lock_key integer) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN lonnymq._read_committed()
                THEN pg_catalog.pg_try_advisory_xact_lock(lonnymq._head_lock_class(),
                                                          lonnymq._head_lock_slot(p_lock_key))
                ELSE false END
$$;
COMMENT ON FUNCTION lonnymq._take_head_lock(integer) IS 'Whether a dequeuer holds a channel head lock and may raise it.';

-- Refuses a call that counts a channel's messages exactly (channel_set,
-- channel_delete) outside READ COMMITTED: an older snapshot misses messages
-- committed since, which no lock can bring back.
CREATE OR REPLACE FUNCTION lonnymq._require_read_committed(p_function text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT lonnymq._read_committed() THEN
        RAISE EXCEPTION 'lonnymq: % needs READ COMMITTED, not %', p_function,
            pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
            USING ERRCODE = '0A000',
                  HINT = 'It counts the channel''s messages exactly, which an older snapshot cannot.';
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._require_read_committed(text) IS 'Refuses (0A000) outside READ COMMITTED.';

-- Removes a locked message and, for an accounted channel, gives its slot
-- back (complete, fail, dead-letter). The caller holds the message row lock;
-- this pins the channel and, if accounted, locks its row for the update:
-- always message first, then channel.
CREATE OR REPLACE FUNCTION lonnymq._settle_locked(p_message lonnymq.message, p_outcome text, p_error text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
    v_accounted boolean := false;
BEGIN
    IF p_message.channel_id IS NOT NULL THEN
        v_channel := lonnymq._pin_channel(p_message.channel_id);
        v_accounted := lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms,
                                          v_channel.max_size);
        IF v_accounted THEN
            SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = v_channel.id FOR NO KEY UPDATE;
        END IF;
    END IF;
    IF p_outcome <> 'completed' OR coalesce(v_channel.retain_completed, false) THEN
        PERFORM lonnymq._archive(p_message, p_outcome, p_error);
    END IF;
    DELETE FROM lonnymq.message m WHERE m.id = p_message.id;
    IF v_accounted THEN
        UPDATE lonnymq.channel c
        SET locked_count = c.locked_count - 1,
            removed_count = c.removed_count + (c.max_size IS NOT NULL)::integer,
            ready_ms = lonnymq._ready_ms(c.head_ms, c.last_turn_ms, c.release_interval_ms,
                                         c.locked_count - 1, c.max_concurrency, c.turn_seq)
        WHERE c.id = v_channel.id;
        -- A saturated channel with waiting work just got a free slot: that
        -- work is ready now, and idle workers should hear of it.
        IF v_channel.head_ms IS NOT NULL AND v_channel.max_concurrency IS NOT NULL
           AND v_channel.locked_count >= v_channel.max_concurrency THEN
            PERFORM lonnymq._notify_waiters(q.name, 'released')
            FROM lonnymq.queue q WHERE q.id = p_message.queue_id;
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._settle_locked(lonnymq.message, text, text)
    IS 'Removes a locked message, archiving it as needed, and frees its channel slot.';
