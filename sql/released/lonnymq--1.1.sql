-- lonnymq: a multi-tenant message queue inside PostgreSQL.
-- Built from sql/*.sql by `make scripts`; edit those files, not the generated script.
\echo Use "CREATE EXTENSION lonnymq" to load this file. \quit
-- ===========================================================================
-- Advisory lock keys of channels. Defined before the tables: the channel
-- table keeps its key in a generated column (see 10_tables.sql).
-- ===========================================================================

-- The advisory-lock key of a channel. Producers hold it shared until commit;
-- whoever deletes a channel or changes its capacity takes it exclusively, so
-- no uncommitted message can be stranded by either.
CREATE OR REPLACE FUNCTION lonnymq._channel_lock_key(p_queue_id integer, p_channel text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.hashtext(p_queue_id::text || '/' || p_channel);
END
$$;
COMMENT ON FUNCTION lonnymq._channel_lock_key(integer, text) IS 'Advisory lock key of a channel.';

-- The first advisory-lock key word: every lonnymq lock lives in this class.
CREATE OR REPLACE FUNCTION lonnymq._lock_class() RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 1819176557;  -- the bytes of 'lonm'
END
$$;
COMMENT ON FUNCTION lonnymq._lock_class() IS 'Advisory lock class of lonnymq.';
-- ===========================================================================
-- Tables. Times are integer milliseconds since the epoch (the "_ms" columns):
-- priority messages sort ahead of every real timestamp, which timestamptz
-- cannot express, and integer comparison keeps the hot indexes small.
-- ===========================================================================

-- One row per queue name, created on first use. Holds the turn of the queue's
-- channel-less messages, which compete with channels as one more channel.
CREATE SEQUENCE lonnymq.queue_id_seq AS integer;
CREATE TABLE lonnymq.queue (
    id integer NOT NULL DEFAULT pg_catalog.nextval('lonnymq.queue_id_seq') PRIMARY KEY,
    name text NOT NULL UNIQUE,
    nochannel_turn_ms bigint NOT NULL DEFAULT 0,
    nochannel_turn_seq bigint NOT NULL DEFAULT 0
);
ALTER SEQUENCE lonnymq.queue_id_seq OWNED BY lonnymq.queue.id;
COMMENT ON TABLE lonnymq.queue IS 'Queues by name; created on first use, never removed automatically.';

-- Source of turn numbers: breaks ties between channels whose turns fall in the
-- same millisecond, so round-robin stays exact. Non-transactional, never locks.
CREATE SEQUENCE lonnymq.turn_seq;

-- A channel: a virtual queue inside a queue, usually one per tenant.
-- Producers never update this row (see docs/design.md): dequeuers, settlers
-- and channel_set own it, so a busy producer cannot turn dequeuers away.
CREATE SEQUENCE lonnymq.channel_id_seq;
CREATE TABLE lonnymq.channel (
    id bigint NOT NULL DEFAULT pg_catalog.nextval('lonnymq.channel_id_seq') PRIMARY KEY,
    queue_id integer NOT NULL,
    name text NOT NULL,
    -- explicit: configured through channel_set; implicit ones are swept when idle.
    explicit boolean NOT NULL DEFAULT false,
    max_concurrency integer,
    release_interval_ms bigint NOT NULL DEFAULT 0,
    max_size bigint,
    max_attempts integer,
    retain_completed boolean NOT NULL DEFAULT false,
    -- messages of this channel currently locked (in flight), expired locks
    -- included. Kept only while the channel is accounted (see _accounted()).
    locked_count integer NOT NULL DEFAULT 0,
    -- messages removed since max_size was set; live = admitted - removed_count.
    removed_count bigint NOT NULL DEFAULT 0,
    -- dequeue_ms of the earliest unlocked message, as last seen by a dequeuer;
    -- never later than the truth unless a channel_hint covers the difference.
    head_ms bigint,
    -- the last fresh dequeue: time and tie-breaking turn number.
    last_turn_ms bigint NOT NULL,
    turn_seq bigint NOT NULL DEFAULT 0,
    -- when the channel may next be served; NULL when empty or saturated.
    -- greatest(head_ms, last_turn_ms + release_interval_ms): see _ready_ms().
    ready_ms bigint,
    -- the channel's advisory lock key, computed once: dequeue tries the lock
    -- of every candidate row it walks, and a function call per row costs more
    -- than the walk.
    lock_key integer NOT NULL GENERATED ALWAYS AS (lonnymq._channel_lock_key(queue_id, name)) STORED,
    UNIQUE (queue_id, name)
) WITH (fillfactor = 70);
ALTER SEQUENCE lonnymq.channel_id_seq OWNED BY lonnymq.channel.id;
COMMENT ON TABLE lonnymq.channel IS 'Channels with their policy and scheduling state.';

-- The fair scheduler: the channel that has waited longest is the first entry.
CREATE INDEX channel_ready_idx ON lonnymq.channel (queue_id, ready_ms, turn_seq, id)
    WHERE ready_ms IS NOT NULL;
-- Candidates for the idle-channel sweep.
CREATE INDEX channel_idle_idx ON lonnymq.channel (last_turn_ms)
    WHERE NOT explicit AND head_ms IS NULL AND locked_count = 0;

-- Live messages: pending, scheduled or locked.
CREATE SEQUENCE lonnymq.message_id_seq;
CREATE TABLE lonnymq.message (
    id bigint NOT NULL DEFAULT pg_catalog.nextval('lonnymq.message_id_seq') PRIMARY KEY,
    queue_id integer NOT NULL,
    channel_id bigint,
    content bytea NOT NULL,
    state bytea,
    num_attempts bigint NOT NULL DEFAULT 0,
    -- not before this time; for priority > 0, creation time minus priority steps.
    dequeue_ms bigint NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    -- NULL while pending; the lock expiry while in flight.
    locked_until_ms bigint,
    dedup_key text,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
) WITH (fillfactor = 90);
ALTER SEQUENCE lonnymq.message_id_seq OWNED BY lonnymq.message.id;
COMMENT ON TABLE lonnymq.message IS 'Live messages; read them through the lonnymq.messages view.';

-- Unlocked messages in (dequeue_ms, id) order per channel.
CREATE INDEX message_ready_idx ON lonnymq.message (queue_id, channel_id, dequeue_ms, id)
    WHERE locked_until_ms IS NULL AND channel_id IS NOT NULL;
-- Unlocked channel-less messages in (dequeue_ms, id) order. A separate index:
-- "channel_id IS NULL" does not fix a column for ordering purposes, so the
-- index above cannot return them in order and the planner would sort them all.
CREATE INDEX message_free_idx ON lonnymq.message (queue_id, dequeue_ms, id)
    WHERE locked_until_ms IS NULL AND channel_id IS NULL;
-- Locked messages by expiry: the recovery probe of every dequeue.
CREATE INDEX message_locked_idx ON lonnymq.message (queue_id, locked_until_ms, id)
    WHERE locked_until_ms IS NOT NULL;
-- Locked messages by channel: whether a channel without accounting is in use.
CREATE INDEX message_channel_locked_idx ON lonnymq.message (channel_id)
    WHERE locked_until_ms IS NOT NULL;
-- At most one live message per (queue, dedup_key).
CREATE UNIQUE INDEX message_dedup_idx ON lonnymq.message (queue_id, dedup_key)
    WHERE dedup_key IS NOT NULL;

-- Insert-only notes from producers: "this channel may have a new earliest
-- message". Dequeuers fold them into channel.head_ms. They replace the
-- producer-side channel update that would otherwise lock the channel row
-- until the producer commits.
CREATE TABLE lonnymq.channel_hint (
    queue_id integer NOT NULL,
    channel_id bigint NOT NULL,
    dequeue_ms bigint NOT NULL
);
CREATE INDEX channel_hint_due_idx ON lonnymq.channel_hint (queue_id, dequeue_ms);
-- Whoever refreshes a channel deletes all of its due hints at once.
CREATE INDEX channel_hint_channel_idx ON lonnymq.channel_hint (channel_id, dequeue_ms);
COMMENT ON TABLE lonnymq.channel_hint IS 'Pending head updates written by producers, consumed by dequeue.';

-- Admission counter of channels with max_size. Only producers update it (and
-- serialize on it, which exact capacity requires); consumers count removals
-- on the channel row instead, so they never wait for a producer.
CREATE TABLE lonnymq.channel_admission (
    channel_id bigint PRIMARY KEY,
    admitted bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE lonnymq.channel_admission IS 'Messages admitted into channels that have a max_size.';

-- Idempotency keys of message_create_batch and the ids that batch created.
CREATE TABLE lonnymq.batch (
    queue_id integer NOT NULL,
    idempotency_key text NOT NULL,
    message_ids bigint[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue_id, idempotency_key)
);
CREATE INDEX batch_created_idx ON lonnymq.batch (created_at);
COMMENT ON TABLE lonnymq.batch IS 'Idempotency keys of message_create_batch; pruned by archive_prune.';

-- Terminal messages: failed, dead-lettered, and completed where retained.
-- Names are copied, not referenced, so the archive outlives swept channels.
CREATE SEQUENCE lonnymq.message_archive_id_seq;
CREATE TABLE lonnymq.message_archive (
    id bigint NOT NULL DEFAULT pg_catalog.nextval('lonnymq.message_archive_id_seq') PRIMARY KEY,
    message_id bigint NOT NULL,
    queue text NOT NULL,
    channel text,
    content bytea NOT NULL,
    state bytea,
    num_attempts bigint NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('completed', 'failed', 'dead')),
    error text,
    created_at timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER SEQUENCE lonnymq.message_archive_id_seq OWNED BY lonnymq.message_archive.id;
CREATE INDEX message_archive_archived_idx ON lonnymq.message_archive (archived_at);
CREATE INDEX message_archive_queue_idx ON lonnymq.message_archive (queue, archived_at);
COMMENT ON TABLE lonnymq.message_archive IS 'Terminal messages: failed, dead (max_attempts) and retained completed.';

-- Queue state is user data: pg_dump must carry it (a dump would otherwise
-- restore an empty queue). Sequences too, so restored ids do not collide.
SELECT pg_catalog.pg_extension_config_dump('lonnymq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.channel', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.message', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.channel_hint', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.channel_admission', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.batch', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.message_archive', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.message_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.message_archive_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.turn_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lonnymq.channel_id_seq', '');
-- ===========================================================================
-- Internal helpers (underscore names). Not part of the API; not granted.
-- ===========================================================================

-- The database clock in integer milliseconds (SPEC 3.1). clock_timestamp, not
-- now(): a dequeue inside a long transaction must see the real time.
-- Helpers are PL/pgSQL, not SQL: a pinned search_path stops SQL functions
-- from being inlined, and called from PL/pgSQL they would be planned anew on
-- every call, while PL/pgSQL caches its plans for the session.
CREATE OR REPLACE FUNCTION lonnymq._now_ms() RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.floor(EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
END
$$;
COMMENT ON FUNCTION lonnymq._now_ms() IS 'Database clock in milliseconds since the epoch.';

-- Milliseconds of a caller-supplied timestamp; infinities are rejected because
-- they cannot be scheduled and would poison the integer ordering.
CREATE OR REPLACE FUNCTION lonnymq._ms_of(p_at timestamptz, p_argument text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
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

-- Rejects a computed dequeue time (dequeue_at plus delay_ms) beyond the year
-- 100000: later times would overflow the interval arithmetic of the views.
CREATE OR REPLACE FUNCTION lonnymq._check_dequeue_ms(p_dequeue_ms bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_dequeue_ms > 3093527980800000 THEN
        RAISE EXCEPTION 'lonnymq: dequeue_at plus delay_ms must be before the year 100000'
            USING ERRCODE = '22023';
    END IF;
    RETURN p_dequeue_ms;
END
$$;
COMMENT ON FUNCTION lonnymq._check_dequeue_ms(bigint) IS 'A dequeue time the views can show, 22023 otherwise.';

-- Raises the SQLSTATE 22023 error that every invalid argument gets (SPEC 3.11).
CREATE OR REPLACE FUNCTION lonnymq._invalid(p_message text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'lonnymq: %', p_message USING ERRCODE = '22023';
END
$$;
COMMENT ON FUNCTION lonnymq._invalid(text) IS 'Raises invalid_parameter_value (22023).';

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
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_head_ms IS NULL THEN
        RETURN NULL;
    ELSIF p_max_concurrency IS NOT NULL AND p_locked_count >= p_max_concurrency THEN
        RETURN NULL;
    ELSIF p_turn_seq = 0 THEN
        RETURN greatest(p_head_ms, p_last_turn_ms);
    END IF;
    RETURN greatest(p_head_ms, p_last_turn_ms + p_release_interval_ms);
END
$$;
COMMENT ON FUNCTION lonnymq._ready_ms(bigint, bigint, bigint, integer, integer, bigint)
    IS 'Scheduling key of a channel: when it may next be served, NULL if it cannot.';

-- NOTIFY with a small JSON payload. Identical payloads in one transaction are
-- delivered once by PostgreSQL, which is what coalesces batches.
CREATE OR REPLACE FUNCTION lonnymq._notify(p_channel text, p_queue text, p_event text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(pg_catalog.current_setting('lonnymq.notify', true), '') NOT IN ('off', 'false', '0') THEN
        PERFORM pg_catalog.pg_notify(p_channel,
            pg_catalog.json_build_object('queue', p_queue, 'event', p_event)::text);
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._notify(text, text, text) IS 'Sends a coalescable event unless lonnymq.notify is off.';

-- Looks a queue up by name; with p_create, creates it on first use.
CREATE OR REPLACE FUNCTION lonnymq._queue_id(p_queue text, p_create boolean) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
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
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
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

-- Recomputes a channel's head and scheduling key from the message index.
-- The caller holds the channel row lock.
CREATE OR REPLACE FUNCTION lonnymq._channel_refresh(p_channel_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue_id integer;
    v_head_ms bigint;
BEGIN
    SELECT c.queue_id INTO v_queue_id FROM lonnymq.channel c WHERE c.id = p_channel_id;
    SELECT m.dequeue_ms INTO v_head_ms
    FROM lonnymq.message m
    WHERE m.queue_id = v_queue_id AND m.channel_id = p_channel_id AND m.locked_until_ms IS NULL
    ORDER BY m.dequeue_ms, m.id
    LIMIT 1;
    UPDATE lonnymq.channel c
    SET head_ms = v_head_ms,
        ready_ms = lonnymq._ready_ms(v_head_ms, c.last_turn_ms, c.release_interval_ms,
                                     c.locked_count, c.max_concurrency, c.turn_seq)
    WHERE c.id = p_channel_id;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_refresh(bigint) IS 'Recomputes head_ms and ready_ms of a locked channel.';

-- Folds due producer hints into channel heads, for up to p_limit channels.
-- Channels held by another transaction (a dequeuer or settler about to
-- commit, which folds them in itself next time) are passed over, with their
-- hints: this never waits, so dequeue never waits. Returns those busy
-- channels: their messages are ready even if no committed head says so yet,
-- and dequeue may share them. How many hints it reads past busy channels is
-- bounded by what was produced while they were held (at most 10000).
CREATE OR REPLACE FUNCTION lonnymq._absorb_hints(p_queue_id integer, p_now_ms bigint, p_limit integer) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_channel_id bigint;
    v_head_ms bigint;
    v_hint_ms bigint;
    v_seen bigint[] := '{}';
    v_busy bigint[] := '{}';
    v_refreshed integer := 0;
BEGIN
    FOR v_channel_id IN
        SELECT h.channel_id FROM lonnymq.channel_hint h
        WHERE h.queue_id = p_queue_id AND h.dequeue_ms <= p_now_ms
        ORDER BY h.dequeue_ms
        LIMIT 10000
    LOOP
        CONTINUE WHEN v_channel_id = ANY (v_seen);
        v_seen := v_seen || v_channel_id;
        -- Lock order: the channel's advisory lock (shared), then its row.
        SELECT c.head_ms INTO v_head_ms FROM lonnymq.channel c
        WHERE c.id = v_channel_id
          AND pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq._lock_class(),
                                                          c.lock_key)
        FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            -- The head only has to be a lower bound of the earliest unlocked
            -- message: the earliest deleted hint is one for the new messages.
            -- In a backlog it is rarely earlier than the head: then the
            -- channel row is not touched at all.
            WITH spent AS (
                DELETE FROM lonnymq.channel_hint h
                WHERE h.channel_id = v_channel_id AND h.dequeue_ms <= p_now_ms
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
            EXIT WHEN v_refreshed >= p_limit;
        ELSIF EXISTS (SELECT 1 FROM lonnymq.channel c WHERE c.id = v_channel_id) THEN
            v_busy := v_busy || v_channel_id;
        ELSE
            -- The channel was deleted: its leftover hints mean nothing.
            DELETE FROM lonnymq.channel_hint h WHERE h.channel_id = v_channel_id;
        END IF;
    END LOOP;
    RETURN v_busy;
END
$$;
COMMENT ON FUNCTION lonnymq._absorb_hints(integer, bigint, integer)
    IS 'Applies due channel hints without waiting; returns the channels that were busy.';

-- Copies a message into the archive with its outcome.
CREATE OR REPLACE FUNCTION lonnymq._archive(p_message lonnymq.message, p_outcome text, p_error text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
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
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN p_max_concurrency IS NOT NULL OR p_release_interval_ms > 0 OR p_max_size IS NOT NULL;
END
$$;
COMMENT ON FUNCTION lonnymq._accounted(integer, bigint, bigint) IS 'Whether a channel policy needs exact accounting.';

-- Takes a channel's advisory lock in shared mode until commit: waiting (for
-- producers and settlers) or trying (for dequeue, which never waits). Held by
-- everyone who changes a channel's messages; channel_set, channel_delete and
-- the sweep take it exclusively, so a policy change or a deletion never
-- interleaves with a half-done create, claim or settle.
CREATE OR REPLACE FUNCTION lonnymq._channel_share(p_queue_id integer, p_channel text, p_wait boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_wait THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq._lock_class(),
            lonnymq._channel_lock_key(p_queue_id, p_channel));
        RETURN true;
    END IF;
    RETURN pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq._lock_class(),
        lonnymq._channel_lock_key(p_queue_id, p_channel));
END
$$;
COMMENT ON FUNCTION lonnymq._channel_share(integer, text, boolean) IS 'Shared advisory lock of a channel.';

-- The channel of a message being settled, read under the channel's shared
-- advisory lock (taken here, held until commit), so its policy cannot change
-- before the settle commits. The caller holds the message row lock.
CREATE OR REPLACE FUNCTION lonnymq._channel_of_settle(p_message lonnymq.message) RETURNS lonnymq.channel
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_channel lonnymq.channel;
BEGIN
    SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = p_message.channel_id;
    PERFORM lonnymq._channel_share(p_message.queue_id, v_channel.name, true);
    -- Read again under the lock: a policy change that committed meanwhile shows.
    SELECT c.* INTO v_channel FROM lonnymq.channel c WHERE c.id = p_message.channel_id;
    RETURN v_channel;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_of_settle(lonnymq.message) IS 'Channel of a settle, under its shared lock.';

-- Removes a locked message and, for an accounted channel, gives its slot
-- back (complete, fail, dead-letter). The caller holds the message row lock;
-- this takes the channel's shared advisory lock and, if accounted, its row:
-- always message first, then channel.
CREATE OR REPLACE FUNCTION lonnymq._settle_locked(p_message lonnymq.message, p_outcome text, p_error text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_channel lonnymq.channel;
    v_accounted boolean := false;
BEGIN
    IF p_message.channel_id IS NOT NULL THEN
        v_channel := lonnymq._channel_of_settle(p_message);
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
            PERFORM lonnymq._notify('lonnymq', q.name, 'released')
            FROM lonnymq.queue q WHERE q.id = p_message.queue_id;
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._settle_locked(lonnymq.message, text, text)
    IS 'Removes a locked message, archiving it as needed, and frees its channel slot.';
-- ===========================================================================
-- Channels: policy, deletion, and the sweep of idle implicit channels.
-- ===========================================================================

-- Resolves (creating on first use) the channel a producer writes into, and
-- takes the channel's advisory lock in shared mode until commit. Shared
-- holders never wait for each other; only channel_set (capacity changes),
-- channel_delete and the sweep take it exclusively.
CREATE OR REPLACE FUNCTION lonnymq._channel_for_create(p_queue_id integer, p_channel text, p_sweep boolean)
RETURNS lonnymq.channel
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_channel lonnymq.channel;
BEGIN
    PERFORM lonnymq._channel_share(p_queue_id, p_channel, true);
    -- Read after the lock: a fresh snapshot sees any sweep that just committed.
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = p_queue_id AND c.name = p_channel;
    IF v_channel.id IS NULL THEN
        -- Creation pays for removal: idle channels cannot pile up. Swept
        -- before the insert, so the new (still empty) channel is not a
        -- candidate. A batch sweeps once before taking any of its channels
        -- (p_sweep false): a later sweep could remove one it took but has not
        -- written to yet.
        IF p_sweep THEN
            PERFORM lonnymq.channel_sweep(2);
        END IF;
        INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms)
        VALUES (p_queue_id, p_channel, lonnymq._now_ms())
        ON CONFLICT (queue_id, name) DO NOTHING
        RETURNING * INTO v_channel;
        IF v_channel.id IS NULL THEN
            SELECT c.* INTO v_channel FROM lonnymq.channel c
            WHERE c.queue_id = p_queue_id AND c.name = p_channel;
        END IF;
    END IF;
    RETURN v_channel;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_for_create(integer, text, boolean)
    IS 'Channel of a producer, created on first use, with its shared advisory lock.';

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
    IF channel_set.release_interval_ms IS NULL OR channel_set.release_interval_ms < 0 THEN
        PERFORM lonnymq._invalid('release_interval_ms must be 0 or more');
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

    v_queue_id := lonnymq._queue_id(channel_set.queue, true);
    -- Exclusive: waits for producers in flight, so a capacity count taken
    -- below includes every message that will ever commit before it.
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq._lock_class(),
        lonnymq._channel_lock_key(v_queue_id, channel_set.channel));
    INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms)
    VALUES (v_queue_id, channel_set.channel, lonnymq._now_ms())
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = v_queue_id AND c.name = channel_set.channel
    FOR NO KEY UPDATE;

    -- No producer, dequeuer or settler of this channel is in flight now (they
    -- hold the advisory lock shared), so counts taken here are exact.
    IF lonnymq._accounted(channel_set.max_concurrency, channel_set.release_interval_ms, channel_set.max_size)
       AND NOT lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms, v_channel.max_size) THEN
        -- Accounting starts: count the messages already in flight.
        UPDATE lonnymq.channel c
        SET locked_count = (SELECT pg_catalog.count(*) FROM lonnymq.message m
                            WHERE m.channel_id = c.id AND m.locked_until_ms IS NOT NULL)
        WHERE c.id = v_channel.id;
    ELSIF NOT lonnymq._accounted(channel_set.max_concurrency, channel_set.release_interval_ms, channel_set.max_size) THEN
        UPDATE lonnymq.channel c SET locked_count = 0 WHERE c.id = v_channel.id;
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
        ready_ms = lonnymq._ready_ms(c.head_ms, c.last_turn_ms, channel_set.release_interval_ms,
                                     c.locked_count, channel_set.max_concurrency, c.turn_seq)
    WHERE c.id = v_channel.id
    RETURNING c.* INTO v_channel;
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
    v_queue_id := lonnymq._queue_id(channel_delete.queue, false);
    IF v_queue_id IS NULL THEN
        RETURN 'not_found';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq._lock_class(),
        lonnymq._channel_lock_key(v_queue_id, channel_delete.channel));
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
    v_idle_before_ms := lonnymq._now_ms() - lonnymq._channel_idle_ms();
    FOR v_candidate IN
        SELECT c.id, c.queue_id, c.name
        FROM lonnymq.channel c
        WHERE NOT c.explicit AND c.head_ms IS NULL AND c.locked_count = 0
          AND c.last_turn_ms <= v_idle_before_ms
        ORDER BY c.last_turn_ms
        LIMIT channel_sweep.max_channels
        FOR UPDATE SKIP LOCKED
    LOOP
        -- A producer in flight holds the shared lock: leave that channel be.
        CONTINUE WHEN NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq._lock_class(),
            lonnymq._channel_lock_key(v_candidate.queue_id, v_candidate.name));
        -- Committed messages whose hint is not due yet keep it alive; with the
        -- row lock held, record its head now so it stops being a candidate.
        IF EXISTS (SELECT 1 FROM lonnymq.message m
                   WHERE m.queue_id = v_candidate.queue_id AND m.channel_id = v_candidate.id
                     AND m.locked_until_ms IS NULL) THEN
            PERFORM lonnymq._channel_refresh(v_candidate.id);
            CONTINUE;
        END IF;
        -- A shared channel does not count its messages in flight: look.
        CONTINUE WHEN EXISTS (SELECT 1 FROM lonnymq.message m
                              WHERE m.channel_id = v_candidate.id AND m.locked_until_ms IS NOT NULL);
        DELETE FROM lonnymq.channel c WHERE c.id = v_candidate.id;
        v_removed := v_removed + 1;
    END LOOP;
    RETURN v_removed;
END
$$;
COMMENT ON FUNCTION lonnymq.channel_sweep(integer) IS 'Removes idle empty implicit channels; returns how many.';
-- ===========================================================================
-- Creating messages.
-- ===========================================================================

-- How far apart priority levels sit, in milliseconds (2^48, ~8900 years):
-- further than any two real timestamps, so priority 1 sorts ahead of every
-- ordinary message and FIFO order holds within a level.
CREATE OR REPLACE FUNCTION lonnymq._priority_step_ms() RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 281474976710656;
END
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

-- The id of the live message with this dedup key in the queue, if any.
CREATE OR REPLACE FUNCTION lonnymq._live_duplicate(p_queue_id integer, p_dedup_key text) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_dedup_key IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT m.id FROM lonnymq.message m WHERE m.queue_id = p_queue_id AND m.dedup_key = p_dedup_key);
END
$$;
COMMENT ON FUNCTION lonnymq._live_duplicate(integer, text) IS 'Live message holding a dedup key.';

-- The one creation path: message_create, message_create_batch and
-- archive_requeue all come through here. Arguments are already validated.
-- Locks taken: the channel's advisory lock (shared) and, for channels with a
-- max_size, their admission row; never the channel row itself.
CREATE OR REPLACE FUNCTION lonnymq._create_one(
    p_queue_id integer, p_queue text, p_channel text, p_content bytea, p_dequeue_ms bigint,
    p_priority integer, p_dedup_key text, p_state bytea, p_num_attempts bigint, p_event text,
    p_sweep boolean, OUT status text, OUT id bigint
)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
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
                id := lonnymq._live_duplicate(p_queue_id, p_dedup_key);
                status := CASE WHEN id IS NULL THEN 'dropped' ELSE 'deduplicated' END;
                RETURN;
            END IF;
        END IF;
    END IF;

    LOOP
        INSERT INTO lonnymq.message AS m
            (queue_id, channel_id, content, state, num_attempts, dequeue_ms, priority, dedup_key)
        VALUES (p_queue_id, v_channel.id, p_content, p_state, p_num_attempts, v_dequeue_ms, p_priority, p_dedup_key)
        ON CONFLICT (queue_id, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
        RETURNING m.id INTO id;
        EXIT WHEN id IS NOT NULL;
        id := lonnymq._live_duplicate(p_queue_id, p_dedup_key);
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
    PERFORM lonnymq._notify('lonnymq', p_queue, p_event);
    status := 'created';
END
$$;
COMMENT ON FUNCTION lonnymq._create_one(integer, text, text, bytea, bigint, integer, text, bytea, bigint, text, boolean)
    IS 'Creates one validated message: created, deduplicated or dropped.';

-- Creates a message. channel NULL: a plain FIFO message with no channel.
-- Ready at coalesce(dequeue_at, now) + delay_ms; priority > 0 means "run now,
-- ahead of the channel's ordinary messages".
-- The common case (the queue and channel exist, no capacity, no duplicate)
-- is three statements: look the channel up, take its shared advisory lock,
-- insert the message and its hint. Everything else goes through _create_one.
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
AS $$
#variable_conflict use_column
DECLARE
    v_dequeue_ms bigint;
    v_queue_id integer;
    v_channel_id bigint;
    v_lock_key integer;
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
        v_dequeue_ms := lonnymq._check_dequeue_ms(
            coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM message_create.dequeue_at) * 1000)::bigint,
                     lonnymq._now_ms()) + message_create.delay_ms);
    END IF;

    SELECT q.id, c.id, c.lock_key INTO v_queue_id, v_channel_id, v_lock_key
    FROM lonnymq.queue q
    LEFT JOIN lonnymq.channel c ON c.queue_id = q.id AND c.name = message_create.channel
    WHERE q.name = message_create.queue;
    IF v_channel_id IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq._lock_class(), v_lock_key);
    END IF;
    IF v_queue_id IS NOT NULL AND (v_channel_id IS NOT NULL OR message_create.channel IS NULL) THEN
        -- A fresh snapshot, taken after the lock: a channel that a sweep or
        -- channel_delete removed meanwhile is not found, and neither is one
        -- that channel_set capped; both go the long way below.
        WITH target AS (
            SELECT c.id FROM lonnymq.channel c WHERE c.id = v_channel_id AND c.max_size IS NULL
            UNION ALL
            SELECT NULL WHERE v_channel_id IS NULL
        ), created AS (
            INSERT INTO lonnymq.message AS m
                (queue_id, channel_id, content, state, dequeue_ms, priority, dedup_key)
            SELECT v_queue_id, t.id, message_create.content, message_create.state, v_dequeue_ms,
                   message_create.priority, message_create.dedup_key
            FROM target t
            ON CONFLICT (queue_id, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
            RETURNING m.id, m.channel_id
        ), hinted AS (
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            SELECT v_queue_id, k.channel_id, v_dequeue_ms FROM created k WHERE k.channel_id IS NOT NULL
        )
        SELECT k.id INTO message_create.id FROM created k;
        IF message_create.id IS NOT NULL THEN
            status := 'created';
            PERFORM lonnymq._notify('lonnymq', message_create.queue, 'created');
            RETURN;
        END IF;
        -- Nothing inserted: a live duplicate is the answer as it stands.
        id := lonnymq._live_duplicate(v_queue_id, message_create.dedup_key);
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
-- With an idempotency_key already used in this queue, creates nothing and
-- answers duplicate_batch with the ids the first call created. Batches
-- without dedup keys and without capped channels take a set-based path (one
-- INSERT, one hint per channel); the others go message by message.
CREATE OR REPLACE FUNCTION lonnymq.message_create_batch(
    queue text,
    channels text[],
    contents bytea[],
    dequeue_ats timestamptz[] DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL,
    idempotency_key text DEFAULT NULL
) RETURNS TABLE (status text, id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer := pg_catalog.cardinality(message_create_batch.contents);
    v_queue_id integer;
    v_now_ms bigint;
    v_ids bigint[] := '{}';
    v_previous bigint[];
    v_result record;
    v_names text[];
    v_name text;
    v_bad timestamptz;
    i integer;
BEGIN
    PERFORM lonnymq._check_name(message_create_batch.queue, 'queue', false);
    IF message_create_batch.contents IS NULL THEN
        PERFORM lonnymq._invalid('contents must not be NULL');
    END IF;
    IF pg_catalog.array_ndims(message_create_batch.contents) > 1 THEN
        PERFORM lonnymq._invalid('contents must be a one-dimensional array');
    END IF;
    IF v_count > 100000 THEN
        PERFORM lonnymq._invalid('a batch holds at most 100000 messages');
    END IF;
    IF message_create_batch.channels IS NOT NULL
       AND pg_catalog.cardinality(message_create_batch.channels) <> v_count THEN
        PERFORM lonnymq._invalid('channels must have as many elements as contents');
    END IF;
    IF message_create_batch.dequeue_ats IS NOT NULL
       AND pg_catalog.cardinality(message_create_batch.dequeue_ats) <> v_count THEN
        PERFORM lonnymq._invalid('dequeue_ats must have as many elements as contents');
    END IF;
    IF message_create_batch.dedup_keys IS NOT NULL
       AND pg_catalog.cardinality(message_create_batch.dedup_keys) <> v_count THEN
        PERFORM lonnymq._invalid('dedup_keys must have as many elements as contents');
    END IF;
    IF message_create_batch.idempotency_key IS NOT NULL
       AND (pg_catalog.length(message_create_batch.idempotency_key) = 0
            OR pg_catalog.length(message_create_batch.idempotency_key) > 512) THEN
        PERFORM lonnymq._invalid('idempotency_key must be 1 to 512 characters long, or NULL');
    END IF;
    -- Element checks, set-based: a batch of 100000 must not pay 100000 calls.
    IF pg_catalog.array_position(message_create_batch.contents, NULL) IS NOT NULL THEN
        PERFORM lonnymq._invalid('content must not be NULL');
    END IF;
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
    SELECT t INTO v_bad FROM pg_catalog.unnest(message_create_batch.dequeue_ats) t
    WHERE NOT pg_catalog.isfinite(t) OR t >= '100000-01-01 00:00:00+00'::timestamptz
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        PERFORM lonnymq._check_dequeue_ms(lonnymq._ms_of(v_bad, 'dequeue_ats element'));
    END IF;

    v_queue_id := lonnymq._queue_id(message_create_batch.queue, true);
    IF message_create_batch.idempotency_key IS NOT NULL THEN
        INSERT INTO lonnymq.batch AS b (queue_id, idempotency_key)
        VALUES (v_queue_id, message_create_batch.idempotency_key)
        ON CONFLICT (queue_id, idempotency_key) DO NOTHING;
        IF NOT FOUND THEN
            SELECT b.message_ids INTO v_previous FROM lonnymq.batch b
            WHERE b.queue_id = v_queue_id AND b.idempotency_key = message_create_batch.idempotency_key;
            RETURN QUERY SELECT 'duplicate_batch'::text, v_previous[g]
                         FROM pg_catalog.generate_series(1, v_count) AS g;
            RETURN;
        END IF;
    END IF;

    -- New channels pay for the sweep of idle ones, once, before any is taken.
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(v_names) AS n
               WHERE NOT EXISTS (
                   SELECT 1 FROM lonnymq.channel c WHERE c.queue_id = v_queue_id AND c.name = n)) THEN
        PERFORM lonnymq.channel_sweep(2);
    END IF;
    -- Take every channel (creating new ones) in name order first: two batches
    -- that create the same new channels then cannot wait on each other in a cycle.
    FOREACH v_name IN ARRAY v_names LOOP
        PERFORM lonnymq._channel_for_create(v_queue_id, v_name, false);
    END LOOP;
    v_now_ms := lonnymq._now_ms();

    IF NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(message_create_batch.dedup_keys) k WHERE k IS NOT NULL) THEN
        IF NOT EXISTS (SELECT 1 FROM lonnymq.channel c
                       WHERE c.queue_id = v_queue_id AND c.name = ANY (v_names)
                         AND c.max_size IS NOT NULL) THEN
            -- The set-based path. Ids follow input order (the INSERT draws them
            -- in ORDER BY order), so sorting them restores the input order.
            WITH created AS (
                INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, dequeue_ms)
                SELECT v_queue_id, c.id, u.content,
                       coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM u.dequeue_at) * 1000)::bigint, v_now_ms)
                FROM ROWS FROM (pg_catalog.unnest(message_create_batch.channels),
                                pg_catalog.unnest(message_create_batch.contents),
                                pg_catalog.unnest(message_create_batch.dequeue_ats))
                     WITH ORDINALITY AS u(channel, content, dequeue_at, ord)
                LEFT JOIN lonnymq.channel c ON c.queue_id = v_queue_id AND c.name = u.channel
                ORDER BY u.ord
                RETURNING m.id, m.channel_id, m.dequeue_ms
            ), hinted AS (
                -- One hint per channel, at its earliest new message, covers them all.
                INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
                SELECT v_queue_id, k.channel_id, pg_catalog.min(k.dequeue_ms)
                FROM created k WHERE k.channel_id IS NOT NULL
                GROUP BY k.channel_id
            )
            SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.id), '{}') INTO v_ids FROM created k;
            RETURN QUERY SELECT 'created'::text, u.id FROM pg_catalog.unnest(v_ids) AS u(id);
            IF v_count > 0 THEN
                PERFORM lonnymq._notify('lonnymq', message_create_batch.queue, 'created');
            END IF;
            IF message_create_batch.idempotency_key IS NOT NULL THEN
                UPDATE lonnymq.batch b SET message_ids = v_ids
                WHERE b.queue_id = v_queue_id AND b.idempotency_key = message_create_batch.idempotency_key;
            END IF;
            RETURN;
        END IF;
    END IF;

    -- Message by message: dedup keys and capacity are decided per element.
    -- Admission rows of capped channels are taken in id order first.
    PERFORM 1 FROM lonnymq.channel_admission a
    WHERE a.channel_id IN (
        SELECT c.id FROM lonnymq.channel c
        WHERE c.queue_id = v_queue_id AND c.name = ANY (v_names))
    ORDER BY a.channel_id
    FOR UPDATE;
    FOR i IN 1 .. v_count LOOP
        SELECT r.status, r.id INTO v_result
        FROM lonnymq._create_one(v_queue_id, message_create_batch.queue, message_create_batch.channels[i],
                                 message_create_batch.contents[i],
                                 CASE WHEN message_create_batch.dequeue_ats[i] IS NULL THEN v_now_ms
                                      ELSE lonnymq._ms_of(message_create_batch.dequeue_ats[i], 'dequeue_ats element') END,
                                 0, message_create_batch.dedup_keys[i], NULL, 0, 'created', false) r;
        status := v_result.status;
        id := v_result.id;
        v_ids := v_ids || v_result.id;
        RETURN NEXT;
    END LOOP;

    IF message_create_batch.idempotency_key IS NOT NULL THEN
        UPDATE lonnymq.batch b SET message_ids = v_ids
        WHERE b.queue_id = v_queue_id AND b.idempotency_key = message_create_batch.idempotency_key;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq.message_create_batch(text, text[], bytea[], timestamptz[], text[], text)
    IS 'Creates messages in input order; an idempotency_key makes a repeat create nothing.';
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
-- ===========================================================================
-- Settling delivered messages. num_attempts is a fencing token (SPEC 3.7):
-- only the holder of the current delivery may settle it. Lock order is
-- always message row, then channel row.
-- ===========================================================================

-- Validates a delivery reference (22023) and locks its message. Returns it
-- when the caller holds the current delivery; otherwise a status
-- (not_found, state_invalid) in p_status.
CREATE OR REPLACE FUNCTION lonnymq._lock_delivery(p_id bigint, p_num_attempts bigint, OUT p_status text, OUT p_message lonnymq.message)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
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
-- The common case is three statements: lock the message (reading its
-- channel's lock key), take the channel's shared advisory lock, delete the
-- message unless its channel keeps counters or archives completed messages;
-- those channels take _settle_locked.
CREATE OR REPLACE FUNCTION lonnymq.message_complete(id bigint, num_attempts bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_locked_until_ms bigint;
    v_attempts bigint;
    v_lock_key integer;
    v_message lonnymq.message;
BEGIN
    IF message_complete.id IS NULL OR message_complete.num_attempts IS NULL
       OR message_complete.num_attempts < 1 THEN
        PERFORM lonnymq._lock_delivery(message_complete.id, message_complete.num_attempts);  -- raises 22023
    END IF;
    SELECT m.locked_until_ms, m.num_attempts, c.lock_key INTO v_locked_until_ms, v_attempts, v_lock_key
    FROM lonnymq.message m LEFT JOIN lonnymq.channel c ON c.id = m.channel_id
    WHERE m.id = message_complete.id
    FOR UPDATE OF m;
    IF NOT FOUND THEN
        RETURN 'not_found';
    ELSIF v_locked_until_ms IS NULL OR v_attempts <> message_complete.num_attempts THEN
        RETURN 'state_invalid';  -- not delivered, or redelivered since: a stale attempt
    END IF;
    IF v_lock_key IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq._lock_class(), v_lock_key);
    END IF;
    -- The policy is read after the lock, so a channel_set that committed
    -- meanwhile is seen.
    DELETE FROM lonnymq.message m
    WHERE m.id = message_complete.id
      AND NOT EXISTS (SELECT 1 FROM lonnymq.channel c
                      WHERE c.id = m.channel_id
                        AND (c.retain_completed
                             OR lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)));
    IF NOT FOUND THEN
        SELECT m.* INTO v_message FROM lonnymq.message m WHERE m.id = message_complete.id;
        PERFORM lonnymq._settle_locked(v_message, 'completed', NULL);
    END IF;
    RETURN 'completed';
END
$$;
COMMENT ON FUNCTION lonnymq.message_complete(bigint, bigint) IS 'Completes a delivery: completed, not_found, state_invalid.';

-- Completes many deliveries; one (id, status) row per input element, as if
-- each were a message_complete in input order. Locks all messages, then all
-- channels, each in id order, so concurrent batches cannot deadlock. Then
-- set-based: statuses in one statement, and messages of shared channels that
-- keep no completed archive are deleted in one statement; only accounted or
-- archiving channels go message by message.
CREATE OR REPLACE FUNCTION lonnymq.message_complete_batch(ids bigint[], num_attempts bigint[])
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_statuses text[];
    v_done bigint[];
    v_message lonnymq.message;
BEGIN
    IF message_complete_batch.ids IS NULL OR message_complete_batch.num_attempts IS NULL THEN
        PERFORM lonnymq._invalid('ids and num_attempts must not be NULL');
    END IF;
    IF pg_catalog.cardinality(message_complete_batch.ids) <> pg_catalog.cardinality(message_complete_batch.num_attempts) THEN
        PERFORM lonnymq._invalid('ids and num_attempts must have the same number of elements');
    END IF;
    IF pg_catalog.cardinality(message_complete_batch.ids) > 100000 THEN
        PERFORM lonnymq._invalid('a batch holds at most 100000 messages');
    END IF;
    -- Every element is checked before anything is locked or changed.
    IF pg_catalog.array_position(message_complete_batch.ids, NULL) IS NOT NULL THEN
        PERFORM lonnymq._invalid('id must not be NULL');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(message_complete_batch.num_attempts) n WHERE n IS NULL OR n < 1) THEN
        PERFORM lonnymq._invalid('num_attempts must be the value the dequeue returned (1 or more)');
    END IF;

    PERFORM 1 FROM lonnymq.message m WHERE m.id = ANY (message_complete_batch.ids)
    ORDER BY m.id FOR UPDATE;
    -- Then the channels whose rows the settles will update (accounted ones),
    -- each after its advisory lock, in id order. From here on no policy and
    -- no delivery of these messages can change under this call.
    PERFORM lonnymq._channel_share(c.queue_id, c.name, true) FROM lonnymq.channel c
    WHERE c.id IN (SELECT m.channel_id FROM lonnymq.message m WHERE m.id = ANY (message_complete_batch.ids))
    ORDER BY c.id;
    PERFORM 1 FROM lonnymq.channel c
    WHERE c.id IN (SELECT m.channel_id FROM lonnymq.message m WHERE m.id = ANY (message_complete_batch.ids))
      AND lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
    ORDER BY c.id FOR NO KEY UPDATE;

    -- Statuses as sequential completes would give them: an id repeated in the
    -- batch is completed by its first element whose attempt is current;
    -- earlier elements for it are stale (state_invalid), later ones find it
    -- gone (not_found).
    WITH input AS (
        SELECT u.id, u.attempt, u.ord
        FROM ROWS FROM (pg_catalog.unnest(message_complete_batch.ids),
                        pg_catalog.unnest(message_complete_batch.num_attempts))
             WITH ORDINALITY AS u(id, attempt, ord)
    ), judged AS (
        SELECT i.ord, i.id, m.id IS NOT NULL AS present,
               coalesce(m.locked_until_ms IS NOT NULL AND m.num_attempts = i.attempt, false) AS current
        FROM input i LEFT JOIN lonnymq.message m ON m.id = i.id
    ), first_current AS (
        SELECT j.id, pg_catalog.min(j.ord) AS ord FROM judged j WHERE j.current GROUP BY j.id
    )
    SELECT pg_catalog.array_agg(CASE WHEN NOT j.present THEN 'not_found'
                                     WHEN f.ord = j.ord THEN 'completed'
                                     WHEN f.ord < j.ord THEN 'not_found'
                                     ELSE 'state_invalid' END ORDER BY j.ord),
           pg_catalog.array_agg(j.id ORDER BY j.ord) FILTER (WHERE f.ord = j.ord)
    INTO v_statuses, v_done
    FROM judged j LEFT JOIN first_current f ON f.id = j.id;

    -- Accounted channels count their slots, archiving ones copy the message:
    -- those take the single-message path.
    FOR v_message IN
        SELECT m.* FROM lonnymq.message m JOIN lonnymq.channel c ON c.id = m.channel_id
        WHERE m.id = ANY (v_done)
          AND (c.retain_completed
               OR lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size))
        ORDER BY m.id
    LOOP
        PERFORM lonnymq._settle_locked(v_message, 'completed', NULL);
    END LOOP;
    -- Everything else (shared channels, channel-less messages) just goes.
    DELETE FROM lonnymq.message m WHERE m.id = ANY (v_done);

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
    UPDATE lonnymq.message m
    SET locked_until_ms = NULL,
        dequeue_ms = v_dequeue_ms,
        priority = 0,
        state = coalesce(message_defer.state, m.state)
    WHERE m.id = message_defer.id;
    IF (v_lock.p_message).channel_id IS NOT NULL THEN
        v_channel := lonnymq._channel_of_settle(v_lock.p_message);
        IF lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms, v_channel.max_size) THEN
            -- The slot must be returned under the row lock anyway, so move
            -- the head here too: no hint needed.
            UPDATE lonnymq.channel c
            SET locked_count = c.locked_count - 1,
                head_ms = least(c.head_ms, v_dequeue_ms),
                ready_ms = lonnymq._ready_ms(least(c.head_ms, v_dequeue_ms), c.last_turn_ms,
                                             c.release_interval_ms, c.locked_count - 1, c.max_concurrency, c.turn_seq)
            WHERE c.id = v_channel.id;
        ELSE
            -- A shared channel's row is not ours to hold: tell dequeue, like a producer.
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            VALUES ((v_lock.p_message).queue_id, v_channel.id, v_dequeue_ms);
        END IF;
    END IF;
    SELECT q.name INTO v_queue FROM lonnymq.queue q WHERE q.id = (v_lock.p_message).queue_id;
    PERFORM lonnymq._notify('lonnymq', v_queue, 'deferred');
    RETURN 'deferred';
END
$$;
COMMENT ON FUNCTION lonnymq.message_defer(bigint, bigint, timestamptz, bigint, bytea)
    IS 'Reschedules a delivery, keeping attempts: deferred, not_found, state_invalid.';

-- Extends the lock of the current delivery; never shortens it.
-- Status: extended, not_found, state_invalid.
CREATE OR REPLACE FUNCTION lonnymq.message_heartbeat(id bigint, num_attempts bigint, lock_ms bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
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
        v_channel := lonnymq._channel_of_settle(v_message);
        IF v_channel.max_size IS NOT NULL THEN
            UPDATE lonnymq.channel c SET removed_count = c.removed_count + 1 WHERE c.id = v_channel.id;
        END IF;
    END IF;
    DELETE FROM lonnymq.message m WHERE m.id = v_message.id;
    RETURN 'cancelled';
END
$$;
COMMENT ON FUNCTION lonnymq.message_cancel(bigint) IS 'Removes a pending message: cancelled, locked, not_found.';
-- ===========================================================================
-- The archive: redrive and pruning.
-- ===========================================================================

-- Re-creates an archived message (redrive) with its content and state and
-- fresh attempts, through the normal creation path (limits apply). The
-- archive row is removed once the message exists again.
-- Returns (status, id): created, dropped, or not_found.
CREATE OR REPLACE FUNCTION lonnymq.archive_requeue(archive_id bigint, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_archived lonnymq.message_archive;
    v_result record;
BEGIN
    IF archive_requeue.archive_id IS NULL THEN
        PERFORM lonnymq._invalid('archive_id must not be NULL');
    END IF;
    SELECT a.* INTO v_archived FROM lonnymq.message_archive a WHERE a.id = archive_requeue.archive_id FOR UPDATE;
    IF v_archived.id IS NULL THEN
        status := 'not_found';
        RETURN;
    END IF;
    SELECT r.status, r.id INTO v_result
    FROM lonnymq._create_one(lonnymq._queue_id(v_archived.queue, true), v_archived.queue, v_archived.channel,
                             v_archived.content, lonnymq._now_ms(), 0, NULL, v_archived.state, 0, 'requeued',
                             true) r;
    IF v_result.status = 'created' THEN
        DELETE FROM lonnymq.message_archive a WHERE a.id = v_archived.id;
    END IF;
    status := v_result.status;
    id := v_result.id;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_requeue(bigint) IS 'Redrives an archived message: (created|dropped|not_found, id).';

-- Deletes archive rows (and spent batch idempotency keys) archived longer
-- ago than older_than. Returns the number of archive rows removed.
CREATE OR REPLACE FUNCTION lonnymq.archive_prune(older_than interval) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_removed bigint;
BEGIN
    IF archive_prune.older_than IS NULL OR archive_prune.older_than < '0'::interval
       OR NOT pg_catalog.isfinite(archive_prune.older_than) THEN
        PERFORM lonnymq._invalid('older_than must be a finite interval of 0 or more');
    END IF;
    IF archive_prune.older_than > '10000 years'::interval THEN
        RETURN 0;  -- nothing is that old, and now() minus it may not be a timestamp
    END IF;
    DELETE FROM lonnymq.message_archive a WHERE a.archived_at < pg_catalog.now() - archive_prune.older_than;
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    DELETE FROM lonnymq.batch b WHERE b.created_at < pg_catalog.now() - archive_prune.older_than;
    RETURN v_removed;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_prune(interval) IS 'Removes archive rows older than the interval; returns the count.';
-- ===========================================================================
-- Inspection: views with stable column names, wait_hint_ms, verify.
-- Views read their tables with the extension owner's rights, so GRANT SELECT
-- on a view shows its rows without opening the tables underneath. Functions
-- inside a view run with the reader's rights, though: the views therefore use
-- pg_catalog expressions only, never the revoked lonnymq helpers.
-- (2^48 ms is _priority_step_ms(), the distance between priority levels.)
-- ===========================================================================

CREATE OR REPLACE VIEW lonnymq.messages AS
SELECT m.id, q.name AS queue, c.name AS channel, m.content, m.state, m.num_attempts,
       'epoch'::timestamptz + (m.dequeue_ms + m.priority::bigint * 281474976710656) * '1 millisecond'::interval
           AS dequeue_at,
       'epoch'::timestamptz + m.locked_until_ms * '1 millisecond'::interval AS locked_until,
       m.created_at, m.priority, m.dedup_key
FROM lonnymq.message m
JOIN lonnymq.queue q ON q.id = m.queue_id
LEFT JOIN lonnymq.channel c ON c.id = m.channel_id;
COMMENT ON VIEW lonnymq.messages IS 'One row per live message.';

-- Per channel, plus one row per queue (channel NULL) for channel-less messages.
CREATE OR REPLACE VIEW lonnymq.channel_stats AS
WITH now_ms AS (SELECT pg_catalog.floor(EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint AS ms),
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
       CASE WHEN k.oldest_ready_at_ms IS NOT NULL THEN greatest(0, n.ms - k.oldest_ready_at_ms) END AS oldest_ready_ms
FROM lonnymq.channel c
JOIN lonnymq.queue q ON q.id = c.queue_id
CROSS JOIN now_ms n
LEFT JOIN counts k ON k.queue_id = c.queue_id AND k.channel_id = c.id
UNION ALL
SELECT q.name, NULL, k.ready, k.scheduled, k.locked, NULL, NULL, NULL, NULL, NULL,
       CASE WHEN k.oldest_ready_at_ms IS NOT NULL THEN greatest(0, n.ms - k.oldest_ready_at_ms) END
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
       (SELECT pg_catalog.count(*) FROM lonnymq.message_archive a WHERE a.queue = q.name) AS archived
FROM lonnymq.queue q
LEFT JOIN lonnymq.channel_stats s ON s.queue = q.name
GROUP BY q.id, q.name;
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
    v_queue_id := lonnymq._queue_id(wait_hint_ms.queue, false);
    IF v_queue_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_next_ms := least(
        (SELECT c.ready_ms FROM lonnymq.channel c
         WHERE c.queue_id = v_queue_id AND c.ready_ms IS NOT NULL ORDER BY c.ready_ms LIMIT 1),
        (SELECT h.dequeue_ms FROM lonnymq.channel_hint h
         WHERE h.queue_id = v_queue_id ORDER BY h.dequeue_ms LIMIT 1),
        (SELECT m.dequeue_ms FROM lonnymq.message m
         WHERE m.queue_id = v_queue_id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
         ORDER BY m.dequeue_ms LIMIT 1),
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
                             CASE WHEN n.accounted THEN 'accounted' ELSE 'shared: not counted' END)
    FROM (SELECT n.*, lonnymq._accounted(n.max_concurrency, n.release_interval_ms, n.max_size) AS accounted,
                 CASE WHEN lonnymq._accounted(n.max_concurrency, n.release_interval_ms, n.max_size)
                      THEN n.actual_locked ELSE 0 END AS expected_locked
          FROM named n) n
    WHERE n.locked_count <> n.expected_locked
    UNION ALL
    SELECT pg_catalog.format('channel %s/%s: ready_ms is %s but its head, turn and limits give %s',
                             n.queue_name, n.name, coalesce(n.ready_ms::text, 'NULL'),
                             lonnymq._ready_ms(n.head_ms, n.last_turn_ms, n.release_interval_ms,
                                               n.locked_count, n.max_concurrency, n.turn_seq))
    FROM named n
    WHERE n.ready_ms IS DISTINCT FROM lonnymq._ready_ms(n.head_ms, n.last_turn_ms, n.release_interval_ms,
                                                        n.locked_count, n.max_concurrency, n.turn_seq)
    UNION ALL
    -- The head must never be later than the earliest unlocked message unless
    -- a hint will correct it; otherwise that message would be stranded.
    SELECT pg_catalog.format('channel %s/%s: earliest unlocked message at %s ms is not reachable (head_ms %s, no hint)',
                             n.queue_name, n.name, n.true_head_ms, coalesce(n.head_ms::text, 'NULL'))
    FROM named n
    WHERE n.true_head_ms IS NOT NULL
      AND (n.head_ms IS NULL OR n.head_ms > n.true_head_ms)
      AND NOT EXISTS (SELECT 1 FROM lonnymq.channel_hint h
                      WHERE h.channel_id = n.id AND h.dequeue_ms <= n.true_head_ms)
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
-- ===========================================================================
-- Periodic work through pg_cron (optional). Everything else works without
-- pg_cron; these functions say clearly when it is missing. They run as the
-- caller (SECURITY INVOKER): the cron job then runs with the caller's rights,
-- never with more.
-- ===========================================================================

-- Raises a clear error unless pg_cron is installed in this database.
CREATE OR REPLACE FUNCTION lonnymq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron') THEN
        RAISE EXCEPTION 'lonnymq: pg_cron is not installed in this database'
            USING ERRCODE = '55000',
                  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database, '
                         'and run CREATE EXTENSION pg_cron.';
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._require_pg_cron() IS 'Raises 55000 when pg_cron is not installed here.';

-- Creates (or replaces) a pg_cron job named 'lonnymq:<name>' that creates
-- one message on the cron schedule. Returns the pg_cron job id.
CREATE OR REPLACE FUNCTION lonnymq.schedule_set(name text, cron text, queue text, channel text, content bytea) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job_id bigint;
BEGIN
    IF schedule_set.name IS NULL OR pg_catalog.length(schedule_set.name) = 0
       OR pg_catalog.length(schedule_set.name) > 200 THEN
        PERFORM lonnymq._invalid('name must be 1 to 200 characters long');
    END IF;
    IF schedule_set.cron IS NULL OR pg_catalog.length(schedule_set.cron) = 0 THEN
        PERFORM lonnymq._invalid('cron must be a cron schedule such as ''*/5 * * * *''');
    END IF;
    PERFORM lonnymq._check_name(schedule_set.queue, 'queue', false);
    PERFORM lonnymq._check_name(schedule_set.channel, 'channel', true);
    PERFORM lonnymq._check_create(schedule_set.content, 0, 0, NULL);
    PERFORM lonnymq._require_pg_cron();
    BEGIN
        v_job_id := cron.schedule('lonnymq:' || schedule_set.name, schedule_set.cron,
            pg_catalog.format('SELECT lonnymq.message_create(queue => %L, channel => %L, content => %L::bytea)',
                              schedule_set.queue, schedule_set.channel, schedule_set.content));
    EXCEPTION WHEN invalid_parameter_value OR internal_error THEN
        -- pg_cron rejects a bad schedule with a bare message; make it ours.
        PERFORM lonnymq._invalid(pg_catalog.format('invalid cron schedule %L: %s', schedule_set.cron, SQLERRM));
    END;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION lonnymq.schedule_set(text, text, text, text, bytea)
    IS 'Creates or replaces a pg_cron job that creates a message periodically.';

-- Removes the pg_cron job of schedule_set. Status: deleted, not_found.
CREATE OR REPLACE FUNCTION lonnymq.schedule_delete(name text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF schedule_delete.name IS NULL OR pg_catalog.length(schedule_delete.name) = 0 THEN
        PERFORM lonnymq._invalid('name must not be empty');
    END IF;
    PERFORM lonnymq._require_pg_cron();
    IF NOT EXISTS (SELECT 1 FROM cron.job j WHERE j.jobname = 'lonnymq:' || schedule_delete.name
                                             AND j.username = CURRENT_USER) THEN
        RETURN 'not_found';
    END IF;
    PERFORM cron.unschedule('lonnymq:' || schedule_delete.name);
    RETURN 'deleted';
END
$$;
COMMENT ON FUNCTION lonnymq.schedule_delete(text) IS 'Removes a schedule_set job: deleted, not_found.';

-- Schedules the maintenance job 'lonnymq-maintenance': prunes the archive
-- and spent idempotency keys older than archive_retention, and sweeps idle
-- channels. Returns the pg_cron job id; schedule it again to change it.
CREATE OR REPLACE FUNCTION lonnymq.maintenance_schedule(cron text DEFAULT '*/10 * * * *',
                                             archive_retention interval DEFAULT '7 days') RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job_id bigint;
BEGIN
    IF maintenance_schedule.cron IS NULL OR pg_catalog.length(maintenance_schedule.cron) = 0 THEN
        PERFORM lonnymq._invalid('cron must be a cron schedule such as ''*/10 * * * *''');
    END IF;
    IF maintenance_schedule.archive_retention IS NULL OR maintenance_schedule.archive_retention < '0'::interval
       OR NOT pg_catalog.isfinite(maintenance_schedule.archive_retention) THEN
        PERFORM lonnymq._invalid('archive_retention must be a finite interval of 0 or more');
    END IF;
    PERFORM lonnymq._require_pg_cron();
    BEGIN
        v_job_id := cron.schedule('lonnymq-maintenance', maintenance_schedule.cron,
            pg_catalog.format('SELECT lonnymq.archive_prune(%L::interval), lonnymq.channel_sweep()',
                              maintenance_schedule.archive_retention));
    EXCEPTION WHEN invalid_parameter_value OR internal_error THEN
        PERFORM lonnymq._invalid(pg_catalog.format('invalid cron schedule %L: %s', maintenance_schedule.cron, SQLERRM));
    END;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION lonnymq.maintenance_schedule(text, interval)
    IS 'Schedules archive pruning and the idle-channel sweep through pg_cron.';

-- Removes the maintenance job. Status: deleted, not_found.
CREATE OR REPLACE FUNCTION lonnymq.maintenance_unschedule() RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lonnymq._require_pg_cron();
    IF NOT EXISTS (SELECT 1 FROM cron.job j WHERE j.jobname = 'lonnymq-maintenance'
                                             AND j.username = CURRENT_USER) THEN
        RETURN 'not_found';
    END IF;
    PERFORM cron.unschedule('lonnymq-maintenance');
    RETURN 'deleted';
END
$$;
COMMENT ON FUNCTION lonnymq.maintenance_unschedule() IS 'Removes the maintenance job: deleted, not_found.';
-- ===========================================================================
-- Privileges. Nothing is granted to PUBLIC: the schema itself is private to
-- the extension owner. API functions are SECURITY DEFINER so that roles get
-- EXECUTE on the calls they need and never touch the tables; the README has
-- the producer, consumer and monitor GRANT recipes.
-- ===========================================================================

-- Functions are executable by PUBLIC by default; take that away from all of ours.
DO $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'lonnymq'::regnamespace
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_function);
    END LOOP;
END
$$;
REVOKE ALL ON ALL TABLES IN SCHEMA lonnymq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lonnymq FROM PUBLIC;

-- The validators that the SECURITY INVOKER pg_cron functions call. They only
-- inspect their arguments; reaching them still needs USAGE on the schema.
GRANT EXECUTE ON FUNCTION lonnymq._invalid(text), lonnymq._check_name(text, text, boolean),
    lonnymq._check_create(bytea, bigint, integer, text), lonnymq._require_pg_cron() TO PUBLIC;
