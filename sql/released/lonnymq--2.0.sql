-- lonnymq: a multi-tenant message queue inside PostgreSQL.
-- Built from sql/*.sql by `make`; edit those files, not the built script.
\echo Use "CREATE EXTENSION lonnymq" to load this file. \quit

-- The schema must be the installer's own and empty. CREATE EXTENSION installs
-- into an existing lonnymq schema as it finds it: one that another role owns
-- (or could write to) would let that role rename it, or plant look-alike
-- objects that the SECURITY DEFINER functions then run with the owner's
-- rights. (pg_restore creates the schema before the extension: restored with
-- --role set to its owner, the extension keeps that owner; a superuser
-- restoring without it would silently become the owner of every SECURITY
-- DEFINER function, and is stopped here.) Written with pg_catalog operators
-- only: nothing else is trusted yet.
DO $guard$
DECLARE
    v_owner oid;
    v_installer oid;
BEGIN
    SELECT n.nspowner INTO v_owner FROM pg_catalog.pg_namespace n
    WHERE n.nspname OPERATOR(pg_catalog.=) 'lonnymq';
    -- The extension's owner (CREATE EXTENSION has recorded it already), or
    -- the role running the script (lonnymq install --sql-only).
    v_installer := coalesce(
        (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'lonnymq'),
        (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER));
    IF v_owner OPERATOR(pg_catalog.<>) v_installer THEN
        RAISE EXCEPTION 'lonnymq: schema lonnymq is owned by role %, not by %, who installs lonnymq',
            pg_catalog.pg_get_userbyid(v_owner), pg_catalog.pg_get_userbyid(v_installer)
            USING ERRCODE = '42501',
                  HINT = 'Drop or rename that schema (its owner may have planted objects in it), then install again. '
                         'Restoring a dump: run pg_restore with --role set to the schema''s owner, who then owns '
                         'the SECURITY DEFINER functions as before.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
               WHERE c.relnamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                  WHERE p.pronamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_type t
                  WHERE t.typnamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_operator o
                  WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace) THEN
        RAISE EXCEPTION 'lonnymq: schema lonnymq is not empty'
            USING ERRCODE = '55000',
                  HINT = 'lonnymq installs only into a new or empty schema of its own.';
    END IF;
END
$guard$;
-- ===========================================================================
-- Advisory lock keys of channels. Defined before the tables: the channel
-- table keeps its key in a generated column (see 10_tables.sql).
-- ===========================================================================

-- The advisory-lock key of a channel, for its head lock (see
-- _channel_raise_head). Channels are otherwise coordinated through their rows
-- (see _pin_channel), which no outside role can lock.
CREATE OR REPLACE FUNCTION lonnymq._channel_lock_key(p_queue_id integer, p_channel text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.hashtext(p_queue_id::text || '/' || p_channel);
END
$$;
COMMENT ON FUNCTION lonnymq._channel_lock_key(integer, text) IS 'Advisory lock key of a channel.';

-- The advisory lock class of channel head locks: "the head of this channel
-- may rise". Everyone only ever tries it, so nobody waits on it: a role
-- outside lonnymq that takes one (any role may take advisory locks) can only
-- make producers write hints and heads rise later, never block anyone.
-- Producers that skip a hint hold it shared until commit; a dequeuer that
-- raises a head holds it exclusively (see _channel_raise_head).
CREATE OR REPLACE FUNCTION lonnymq._head_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1819176552  -- the bytes of 'lonh'
$$;
COMMENT ON FUNCTION lonnymq._head_lock_class() IS 'Advisory lock class of channel head raises.';

-- Advisory lock classes of the wake-up handshake (see _notify_waiters and
-- wait_begin), keyed by the queue's wake-up slot (_wait_slot). "waiting":
-- consumers about to sleep on a queue hold its slot shared, at session level,
-- until they wake. "producing": producers that may have skipped a NOTIFY
-- hold it shared until commit; a consumer starting to wait takes it
-- exclusively for a moment, to let them commit first. Producers only ever
-- try both.
CREATE OR REPLACE FUNCTION lonnymq._waiting_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1819242103  -- the bytes of 'lonw'
$$;
COMMENT ON FUNCTION lonnymq._waiting_lock_class() IS 'Advisory lock class of consumers waiting on a queue.';

CREATE OR REPLACE FUNCTION lonnymq._producing_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1819242096  -- the bytes of 'lonp'
$$;
COMMENT ON FUNCTION lonnymq._producing_lock_class() IS 'Advisory lock class of producers that skipped a wake-up.';

-- The wake-up slot of a queue, 0 to 63, by name (a consumer may wait on a
-- queue that does not exist yet). Queues share 64 slots so that a consumer
-- waiting on every queue, or a transaction producing into thousands, holds
-- at most 64 entries of PostgreSQL's shared lock table (each session gets
-- max_locks_per_transaction, 64 by default, on average). Two queues in one
-- slot only cost a NOTIFY nobody needed.
CREATE OR REPLACE FUNCTION lonnymq._wait_slot(p_queue text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.hashtext(p_queue) OPERATOR(pg_catalog.&) 63
$$;
COMMENT ON FUNCTION lonnymq._wait_slot(text) IS 'Wake-up slot (0-63) of a queue: the key of its wake-up locks.';

-- How many head locks there are, and so how many one call may take: a
-- producer of a batch past it writes its hints, and a dequeue leaves heads
-- early, which are always safe. A power of two (see _head_lock_slot).
CREATE OR REPLACE FUNCTION lonnymq._head_lock_budget() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 256
$$;
COMMENT ON FUNCTION lonnymq._head_lock_budget() IS 'Most head locks one call holds.';

-- The key of a channel's head lock: its lock_key folded into one of the
-- budget's slots, so that a transaction producing into (or dequeuing from)
-- any number of channels holds at most that many entries of PostgreSQL's
-- shared lock table. Channels that share a slot only make each other's head
-- rise later (a raise is a try, and fails while a producer of any channel
-- of its slot is in flight), never wait or lose a message.
CREATE OR REPLACE FUNCTION lonnymq._head_lock_slot(p_lock_key integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_lock_key OPERATOR(pg_catalog.&) (lonnymq._head_lock_budget() - 1)
$$;
COMMENT ON FUNCTION lonnymq._head_lock_slot(integer) IS 'Head-lock slot of a channel lock key (see _head_lock_budget).';
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
    channelless_turn_ms bigint NOT NULL DEFAULT 0,
    channelless_turn_seq bigint NOT NULL DEFAULT 0,
    -- queue_pause: message_dequeue returns nothing (it reads this row anyway).
    paused boolean NOT NULL DEFAULT false
);
ALTER SEQUENCE lonnymq.queue_id_seq OWNED BY lonnymq.queue.id;
COMMENT ON TABLE lonnymq.queue IS 'Queues by name; created on first use, never removed automatically.';

-- Source of turn numbers: breaks ties between channels whose turns fall in the
-- same millisecond, so round-robin stays exact. Non-transactional, never locks.
CREATE SEQUENCE lonnymq.turn_seq;

-- A channel: a virtual queue inside a queue, usually one per tenant.
-- Producers never update this row (see docs/design.md): dequeuers, settlers
-- and channel_set own it, so a busy producer cannot turn dequeuers away.
-- Every create pins the row (a tuple lock) and every turn rewrites it, so a
-- few hot channels on one page serialize on that page's lock and prune it
-- often: rows are spread thin (fillfactor 20, about 14 per page; +15-25% on
-- workload 1 of bench/, for 3.5x the table's size, about 600 bytes per
-- channel).
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
    -- the key of the channel's head lock (an advisory lock), computed once.
    lock_key integer NOT NULL GENERATED ALWAYS AS (lonnymq._channel_lock_key(queue_id, name)) STORED,
    -- channel_pause: out of the ready index (below), so dequeue never meets it.
    paused boolean NOT NULL DEFAULT false,
    UNIQUE (queue_id, name)
) WITH (fillfactor = 20);
ALTER SEQUENCE lonnymq.channel_id_seq OWNED BY lonnymq.channel.id;
COMMENT ON TABLE lonnymq.channel IS 'Channels with their policy and scheduling state.';

-- The fair scheduler: the channel that has waited longest is the first entry.
-- A paused channel keeps its ready_ms (resuming needs no recomputation) but
-- leaves the index, so pausing costs dequeue nothing.
CREATE INDEX channel_ready_idx ON lonnymq.channel (queue_id, ready_ms, turn_seq, id)
    WHERE ready_ms IS NOT NULL AND NOT paused;
-- Candidates for the idle-channel sweep. A paused channel is kept: sweeping
-- it would forget the pause.
CREATE INDEX channel_idle_idx ON lonnymq.channel (last_turn_ms)
    WHERE NOT explicit AND head_ms IS NULL AND locked_count = 0 AND NOT paused;
-- The channels of periodic messages (a Python Worker's every(NAME): one
-- message in channel 'lonnymq.every:NAME'), for periodic_summary. Only those
-- channels enter it, so it costs tenants' channels nothing.
CREATE INDEX channel_periodic_idx ON lonnymq.channel (queue_id, name)
    WHERE pg_catalog.starts_with(name, 'lonnymq.every:');

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
CREATE INDEX message_channelless_idx ON lonnymq.message (queue_id, dequeue_ms, id)
    WHERE locked_until_ms IS NULL AND channel_id IS NULL;
-- Locked messages by expiry: the recovery probe of every dequeue.
CREATE INDEX message_locked_idx ON lonnymq.message (queue_id, locked_until_ms, id)
    WHERE locked_until_ms IS NOT NULL;
-- Locked messages by channel: whether a channel without accounting is in use.
CREATE INDEX message_channel_locked_idx ON lonnymq.message (channel_id)
    WHERE locked_until_ms IS NOT NULL;
-- At most one live message per (queue, channel, dedup_key): a key is scoped to
-- its channel (a tenant's keys never collide with another tenant's), and the
-- queue's channel-less messages share one scope (channel 0, an id never drawn).
CREATE UNIQUE INDEX message_dedup_idx ON lonnymq.message (queue_id, (coalesce(channel_id, 0)), dedup_key)
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
-- A key is scoped to the queue and the set of channels the batch writes to
-- (channels_digest: sha256 of their sorted distinct names), so one tenant's
-- key never answers another tenant's batch. Keys recorded by 1.0 have an
-- empty digest and stay scoped to the queue.
CREATE TABLE lonnymq.batch (
    queue_id integer NOT NULL,
    idempotency_key text NOT NULL,
    message_ids bigint[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    channels_digest bytea NOT NULL,
    PRIMARY KEY (queue_id, idempotency_key, channels_digest)
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

    -- No producer, dequeuer or settler of this channel is in flight now, so
    -- counts taken here are exact.
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
        ), hinted AS (
            -- A hint only when the message is earlier than the channel's
            -- head, a lower bound that cannot rise while this producer holds
            -- the head lock (see _channel_raise_head): in a backlog, none.
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            SELECT v_queue_id, k.channel_id, v_dequeue_ms FROM created k
            WHERE k.channel_id IS NOT NULL AND (NOT v_head_held OR v_head_ms IS NULL OR v_dequeue_ms < v_head_ms)
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
-- ===========================================================================
-- Creating a set of messages in a few statements: message_create_batch's
-- engine. Every rule of message_create holds per element (dedup keys scoped
-- to the channel, max_size admission, hints, input order of ids), decided for
-- the whole set at once instead of element by element.
-- ===========================================================================

-- Creates the validated elements of message_create_batch's arrays (p_channels
-- .. p_dedup_keys), every channel already taken by the caller (existing ones
-- pinned, new ones created, see _publish): p_names the distinct names, sorted,
-- p_capped whether any of them has a max_size, p_head_held the channels whose
-- head lock the caller holds; p_keyed: some element has a dedup key. Answers the status and id of each element, in input order;
-- sends no wake-up (the caller sends one).
--
-- The deciding statement is planned for each call (EXECUTE): a set holds 1
-- to 100000 elements, and one cached generic plan would fit none of them
-- well. The plain path is one cached plan (planning it cost more than a
-- small batch itself).
--
-- Without dedup keys or capped channels: one INSERT ... SELECT and one hint
-- per channel. Otherwise one statement decides every element from one
-- snapshot: the first element of each (channel, dedup key) is its "leader";
-- a leader with a live duplicate is deduplicated; the other leaders and the
-- elements without a key are candidates, and a capped channel admits its
-- candidates in input order while it has room (max_size - admitted +
-- removed); the rest are dropped. A later element with the same key takes
-- its leader's outcome (deduplicated to the leader's message, or dropped),
-- just as it would one by one. Admission rows are locked first, in channel
-- id order, so the room counted is the room there is. The admitted elements
-- are inserted in input order, so the k-th new id is the k-th admitted
-- element's: ids are matched by position, never by a join (whose estimates
-- over a set built in the statement can make it quadratic).
-- Only a race changes that: a leader whose key a concurrent producer
-- committed meanwhile inserts nothing (ON CONFLICT) and is decided again on
-- its own, as message_create would. (At READ COMMITTED that cannot happen
-- in a capped channel: its producers serialize on the admission row, taken
-- before the snapshot.)
CREATE OR REPLACE FUNCTION lonnymq._create_set(
    p_queue_id integer, p_channels text[], p_contents bytea[], p_dequeue_ats timestamptz[],
    p_dedup_keys text[], p_keyed boolean, p_names text[], p_capped boolean, p_head_held bigint[],
    p_now_ms bigint,
    OUT statuses text[], OUT ids bigint[]
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- The elements as a FROM item u(channel, content, dequeue_at, dedup_key, ord).
    v_source text := 'ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::bytea[]), '
                     'pg_catalog.unnest($3::timestamptz[]), pg_catalog.unnest($4::text[])) '
                     'WITH ORDINALITY AS u(channel, content, dequeue_at, dedup_key, ord)';
    v_leaders bigint[];     -- per element: its leader's position
    v_live bigint[];        -- per element: its leader's live duplicate
    v_rank bigint[];        -- per element: its leader's rank among the admitted
    v_admitted bigint;      -- how many elements were admitted
    v_by_rank bigint[];     -- the id of each admitted element (0: it lost a race)
    v_fixed bigint[];
    v_next record;
    v_adm record;
    v_new refcursor;
    v_lost bigint[];        -- leaders that lost a race for their dedup key
    v_result record;
    v_at bigint;
BEGIN
    IF NOT p_keyed AND NOT p_capped THEN
        -- Every element is created. Ids follow input order (the INSERT draws
        -- them in ORDER BY order), so sorting them restores the input order.
        -- (A plain statement, planned once: its plan fits every size.)
        WITH created AS (
            INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, dequeue_ms)
            SELECT p_queue_id, c.id, u.content,
                   coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM u.dequeue_at) * 1000)::bigint, p_now_ms)
            FROM ROWS FROM (pg_catalog.unnest(p_channels), pg_catalog.unnest(p_contents),
                            pg_catalog.unnest(p_dequeue_ats)) WITH ORDINALITY AS u(channel, content, dequeue_at, ord)
            -- (Each channel by key, see message_dequeue's final read.)
            LEFT JOIN LATERAL (SELECT c.id FROM lonnymq.channel c
                               WHERE c.queue_id = p_queue_id AND c.name = u.channel LIMIT 1) c ON true
            ORDER BY u.ord
            RETURNING m.id, m.channel_id, m.dequeue_ms
        ), hinted AS (
            -- One hint per channel, at its earliest new message, covers
            -- them all; none where that is not earlier than a held head.
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            SELECT p_queue_id, k.channel_id, k.first_ms
            FROM (SELECT k.channel_id, pg_catalog.min(k.dequeue_ms) AS first_ms
                  FROM created k WHERE k.channel_id IS NOT NULL
                  GROUP BY k.channel_id) k
            -- (By key, see message_dequeue's final read.)
            CROSS JOIN LATERAL (SELECT c.head_ms FROM lonnymq.channel c WHERE c.id = k.channel_id LIMIT 1) c
            WHERE k.channel_id <> ALL (p_head_held) OR c.head_ms IS NULL OR k.first_ms < c.head_ms
        )
        SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.id), '{}') INTO ids FROM created k;
        statuses := pg_catalog.array_fill('created'::text, ARRAY[pg_catalog.cardinality(ids)]);
        RETURN;
    END IF;

    -- Admission rows of capped channels, in id order (as every producer takes them).
    PERFORM 1 FROM lonnymq.channel_admission a
    WHERE a.channel_id = ANY (ARRAY(
        SELECT c.id FROM lonnymq.channel c
        WHERE c.queue_id = p_queue_id AND c.name = ANY (p_names) AND c.max_size IS NOT NULL))
    ORDER BY a.channel_id
    FOR UPDATE;

    EXECUTE pg_catalog.format($q$
        WITH input AS MATERIALIZED (
            -- Each element with its leader, and the leader's live duplicate.
            SELECT b.ord, b.channel_id, b.max_size, b.leader, m.id AS live_id
            FROM (SELECT u.ord, c.id AS channel_id, c.max_size, u.dedup_key,
                         CASE WHEN u.dedup_key IS NULL THEN u.ord
                              ELSE pg_catalog.min(u.ord) OVER (PARTITION BY c.id, u.dedup_key) END AS leader
                  FROM %1$s
                  -- (Rows of tables by key, see message_dequeue's final read.)
                  LEFT JOIN LATERAL (SELECT c.id, c.max_size FROM lonnymq.channel c
                                     WHERE c.queue_id = $5 AND c.name = u.channel LIMIT 1) c ON true) b
            LEFT JOIN LATERAL (SELECT m.id FROM lonnymq.message m
                               WHERE b.dedup_key IS NOT NULL AND b.ord = b.leader
                                 AND m.queue_id = $5 AND coalesce(m.channel_id, 0) = coalesce(b.channel_id, 0)
                                 AND m.dedup_key = b.dedup_key AND m.dedup_key IS NOT NULL
                               LIMIT 1) m ON true
        ), room AS (
            SELECT c.id, c.max_size - (a.admitted - c.removed_count) AS free
            FROM lonnymq.channel c
            CROSS JOIN LATERAL (SELECT a.admitted FROM lonnymq.channel_admission a
                                WHERE a.channel_id = c.id LIMIT 1) a
            WHERE c.queue_id = $5 AND c.name = ANY ($8) AND c.max_size IS NOT NULL
        ), candidate AS (
            -- Candidates are numbered per channel in input order.
            SELECT i.ord, i.channel_id, i.leader, i.live_id,
                   i.ord = i.leader AND i.live_id IS NULL AS candidate,
                   i.max_size IS NULL
                   OR pg_catalog.count(*) FILTER (WHERE i.ord = i.leader AND i.live_id IS NULL)
                          OVER (PARTITION BY i.channel_id ORDER BY i.ord) <= r.free AS fits
            FROM input i LEFT JOIN room r ON r.id = i.channel_id
        ), decided AS MATERIALIZED (
            SELECT k.ord, k.channel_id, k.leader, k.live_id, k.candidate AND k.fits AS admit
            FROM candidate k
        ), ranked AS (
            -- Each element with its leader's outcome: live duplicate, rank
            -- among the admitted (the leader is the first of its partition).
            SELECT d.ord, d.admit, d.leader,
                   pg_catalog.first_value(d.live_id) OVER w AS lead_live,
                   pg_catalog.first_value(d.rank) OVER w AS lead_rank
            FROM (SELECT d.*, CASE WHEN d.admit THEN pg_catalog.count(*) FILTER (WHERE d.admit)
                                                     OVER (ORDER BY d.ord) END AS rank
                  FROM decided d) d
            WINDOW w AS (PARTITION BY d.leader ORDER BY d.ord)
        ), created AS (
            INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, dequeue_ms, dedup_key)
            SELECT $5, d.channel_id, u.content,
                   coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM u.dequeue_at) * 1000)::bigint, $7), u.dedup_key
            FROM decided d JOIN %1$s ON u.ord = d.ord
            WHERE d.admit
            ORDER BY d.ord
            ON CONFLICT (queue_id, (coalesce(channel_id, 0)), dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
            RETURNING m.id, m.channel_id, m.dequeue_ms, m.dedup_key
        ), hinted AS (
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            SELECT $5, k.channel_id, k.first_ms
            FROM (SELECT k.channel_id, pg_catalog.min(k.dequeue_ms) AS first_ms
                  FROM created k WHERE k.channel_id IS NOT NULL
                  GROUP BY k.channel_id) k
            -- (By key, see message_dequeue's final read.)
            CROSS JOIN LATERAL (SELECT c.head_ms FROM lonnymq.channel c WHERE c.id = k.channel_id LIMIT 1) c
            WHERE k.channel_id <> ALL ($6) OR c.head_ms IS NULL OR k.first_ms < c.head_ms
        ), admitted AS (
            UPDATE lonnymq.channel_admission a SET admitted = a.admitted + k.n
            FROM (SELECT k.channel_id, pg_catalog.count(*) AS n FROM created k
                  WHERE k.channel_id IN (SELECT r.id FROM room r) GROUP BY k.channel_id) k
            WHERE a.channel_id = k.channel_id
        )
        SELECT pg_catalog.array_agg(CASE WHEN r.lead_live IS NOT NULL THEN 'deduplicated'
                                         WHEN r.lead_rank IS NULL THEN 'dropped'
                                         WHEN r.ord = r.leader THEN 'created'
                                         ELSE 'deduplicated' END ORDER BY r.ord),
               pg_catalog.array_agg(r.leader ORDER BY r.ord),
               pg_catalog.array_agg(r.lead_live ORDER BY r.ord),
               pg_catalog.array_agg(r.lead_rank ORDER BY r.ord),
               pg_catalog.count(*) FILTER (WHERE r.admit),
               (SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.id), '{}') FROM created k)
        FROM ranked r
        $q$, v_source)
    INTO statuses, v_leaders, v_live, v_rank, v_admitted, v_by_rank
    USING p_channels, p_contents, p_dequeue_ats, p_dedup_keys, p_queue_id, p_head_held, p_now_ms, p_names;

    IF pg_catalog.cardinality(v_by_rank) < v_admitted THEN
        -- Some leaders lost a race (rare): walk the admitted elements (so
        -- far 'created') and the new messages together, both in input order;
        -- an admitted element whose message is missing gets id 0 and is
        -- decided again below.
        OPEN v_new FOR SELECT m.id, c.name AS channel, m.dedup_key
                       FROM pg_catalog.unnest(v_by_rank) AS k(id)
                       CROSS JOIN LATERAL (SELECT m.id, m.channel_id, m.dedup_key FROM lonnymq.message m
                                           WHERE m.id = k.id LIMIT 1) m
                       LEFT JOIN LATERAL (SELECT c.name FROM lonnymq.channel c
                                          WHERE c.id = m.channel_id LIMIT 1) c ON true
                       ORDER BY m.id;
        v_fixed := '{}';
        FETCH v_new INTO v_next;
        FOR v_adm IN SELECT a.channel, a.dedup_key
                     FROM ROWS FROM (pg_catalog.unnest(statuses), pg_catalog.unnest(p_channels),
                                     pg_catalog.unnest(p_dedup_keys)) AS a(status, channel, dedup_key)
                     WHERE a.status = 'created' LOOP
            IF v_next.id IS NOT NULL AND v_next.channel IS NOT DISTINCT FROM v_adm.channel
               AND v_next.dedup_key IS NOT DISTINCT FROM v_adm.dedup_key THEN
                v_fixed := pg_catalog.array_append(v_fixed, v_next.id);
                FETCH v_new INTO v_next;
            ELSE
                v_fixed := pg_catalog.array_append(v_fixed, 0::bigint);
            END IF;
        END LOOP;
        CLOSE v_new;
        v_by_rank := v_fixed;
    END IF;
    -- Each element answers its leader's live duplicate or its leader's new
    -- message, found by position (v_by_rank has no NULLs: reading an
    -- element is direct).
    SELECT pg_catalog.array_agg(coalesce(s.live, v_by_rank[s.rank]) ORDER BY s.n) INTO ids
    FROM ROWS FROM (pg_catalog.unnest(v_live), pg_catalog.unnest(v_rank)) WITH ORDINALITY AS s(live, rank, n);

    -- Leaders that lost a race, decided again one by one, then their followers.
    SELECT pg_catalog.array_agg(s.n ORDER BY s.n) INTO v_lost
    FROM ROWS FROM (pg_catalog.unnest(ids), pg_catalog.unnest(v_leaders)) WITH ORDINALITY AS s(id, leader, n)
    WHERE s.id = 0 AND s.leader = s.n;
    FOREACH v_at IN ARRAY coalesce(v_lost, '{}') LOOP
        SELECT r.status, r.id INTO v_result
        FROM lonnymq._create_one(p_queue_id, NULL, p_channels[v_at], p_contents[v_at],
                                 coalesce(lonnymq._ms_of(p_dequeue_ats[v_at], 'dequeue_at'), p_now_ms),
                                 0, p_dedup_keys[v_at], NULL, 0, NULL, false) r;
        FOR i IN v_at .. pg_catalog.cardinality(statuses) LOOP
            IF v_leaders[i] = v_at THEN
                statuses[i] := CASE WHEN i = v_at OR v_result.status = 'dropped' THEN v_result.status
                                    ELSE 'deduplicated' END;
                ids[i] := v_result.id;
            END IF;
        END LOOP;
    END LOOP;
    statuses := coalesce(statuses, '{}');
    ids := coalesce(ids, '{}');
END
$$;
COMMENT ON FUNCTION lonnymq._create_set(integer, text[], bytea[], timestamptz[], text[], boolean, text[], boolean,
                                         bigint[], bigint)
    IS 'Creates a validated set of messages in a few statements: statuses and ids in input order.';

-- Pins (see _pin_channel) the existing channels of p_queue_id named in
-- p_names, in name order, in one statement; answers their names.
CREATE OR REPLACE FUNCTION lonnymq._pin_named(p_queue_id integer, p_names text[]) RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN (SELECT coalesce(pg_catalog.array_agg(x.name), '{}')
            FROM (SELECT c.name FROM lonnymq.channel c
                  WHERE c.queue_id = p_queue_id AND c.name = ANY (p_names)
                  ORDER BY c.name
                  FOR KEY SHARE) x);
END
$$;
COMMENT ON FUNCTION lonnymq._pin_named(integer, text[]) IS 'Pins the existing channels of a list of names; returns their names.';

-- What message_create_batch does once its arguments are valid: the
-- idempotency key, the channels (pinned, swept, created), the head locks,
-- the set itself, one wake-up. p_names: the distinct channel names, sorted;
-- p_count: how many elements. Answers the status and id of each element in
-- input order (arrays: the caller returns them as rows, and a set of rows
-- would be copied once more per level).
CREATE OR REPLACE FUNCTION lonnymq._publish(
    p_queue text, p_channels text[], p_contents bytea[], p_dequeue_ats timestamptz[],
    p_dedup_keys text[], p_keyed boolean, p_names text[], p_count bigint,
    p_idempotency_key text,
    OUT statuses text[], OUT ids bigint[]
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue_id integer := lonnymq._queue_id(p_queue, true);
    v_digest bytea;                -- scope of the idempotency key
    v_previous bigint[];
    v_pinned text[] := '{}';       -- existing channels pinned in one statement
    v_capped boolean;              -- whether any of them has a max_size
    v_head_held bigint[];          -- channels whose head lock this call holds
    v_name text;
BEGIN
    IF p_idempotency_key IS NOT NULL THEN
        -- The key's scope: this queue and this set of channels (see lonnymq.batch).
        v_digest := pg_catalog.sha256(pg_catalog.convert_to(p_names::text, 'UTF8'));
        INSERT INTO lonnymq.batch AS b (queue_id, idempotency_key, channels_digest)
        SELECT v_queue_id, p_idempotency_key, v_digest
        WHERE NOT EXISTS (SELECT 1 FROM lonnymq.batch l  -- a key recorded by 1.0: queue-wide
                          WHERE l.queue_id = v_queue_id AND l.idempotency_key = p_idempotency_key
                            AND l.channels_digest = ''::bytea)
        ON CONFLICT (queue_id, idempotency_key, channels_digest) DO NOTHING;
        IF NOT FOUND THEN
            SELECT b.message_ids INTO v_previous FROM lonnymq.batch b
            WHERE b.queue_id = v_queue_id AND b.idempotency_key = p_idempotency_key
              AND b.channels_digest IN (v_digest, ''::bytea)
            ORDER BY b.channels_digest DESC
            LIMIT 1;
            statuses := pg_catalog.array_fill('duplicate_batch'::text, ARRAY[p_count::integer]);
            SELECT coalesce(pg_catalog.array_agg(p.id ORDER BY g), '{}') INTO ids
            FROM pg_catalog.generate_series(1, p_count) AS g
            LEFT JOIN pg_catalog.unnest(v_previous) WITH ORDINALITY AS p(id, n) ON p.n = g;
            RETURN;
        END IF;
    END IF;

    -- Take every channel first: at READ COMMITTED the existing ones pinned
    -- in one statement (elsewhere _channel_for_create also checks each is
    -- current, and the sweep stands aside), then the new ones created one by
    -- one, in name order: two batches that create the same new channels
    -- cannot wait on each other in a cycle.
    IF lonnymq._read_committed() THEN
        v_pinned := lonnymq._pin_named(v_queue_id, p_names);
        IF pg_catalog.cardinality(v_pinned) < pg_catalog.cardinality(p_names) THEN
            -- New channels pay for the sweep of idle ones, once, before any
            -- is created. It may remove an idle channel pinned just now (this
            -- transaction's own lock does not stop it): pinned again, the ones
            -- left are found and the loop below creates the rest.
            PERFORM lonnymq.channel_sweep(2);
            v_pinned := lonnymq._pin_named(v_queue_id, p_names);
        END IF;
    END IF;
    IF pg_catalog.cardinality(v_pinned) < pg_catalog.cardinality(p_names) THEN
        FOR v_name IN SELECT n FROM pg_catalog.unnest(p_names) n WHERE n <> ALL (v_pinned) ORDER BY 1 LOOP
            PERFORM lonnymq._channel_for_create(v_queue_id, v_name, false);
        END LOOP;
    END IF;
    -- Every channel once, in name order: whether any is capped, and its head
    -- lock (see _hold_head_lock), tried for the first ones, at most the budget.
    SELECT coalesce(pg_catalog.array_agg(x.id ORDER BY x.at) FILTER (WHERE x.held), '{}'),
           coalesce(pg_catalog.bool_or(x.capped), false)
    INTO v_head_held, v_capped
    FROM (SELECT n.at, c.id, c.max_size IS NOT NULL AS capped,
                 CASE WHEN n.at <= lonnymq._head_lock_budget()
                      THEN lonnymq._hold_head_lock(c.lock_key) ELSE false END AS held
          FROM pg_catalog.unnest(p_names) WITH ORDINALITY AS n(name, at)
          CROSS JOIN LATERAL (SELECT c.id, c.lock_key, c.max_size FROM lonnymq.channel c
                              WHERE c.queue_id = v_queue_id AND c.name = n.name LIMIT 1) c) x;

    SELECT r.statuses, r.ids INTO statuses, ids
    FROM lonnymq._create_set(v_queue_id, p_channels, p_contents, p_dequeue_ats, p_dedup_keys,
                             p_keyed, p_names, v_capped, v_head_held,
                             lonnymq._now_ms()) r;
    -- One wake-up for the set, not one per element.
    IF 'created' = ANY (statuses) THEN
        PERFORM lonnymq._notify_waiters(p_queue, 'created');
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        UPDATE lonnymq.batch b SET message_ids = ids
        WHERE b.queue_id = v_queue_id AND b.idempotency_key = p_idempotency_key
          AND b.channels_digest = v_digest;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._publish(text, text[], bytea[], timestamptz[], text[], boolean, text[], bigint, text)
    IS 'Creates a validated set: idempotency key, channels, head locks, the set, one wake-up; statuses and ids.';
-- ===========================================================================
-- Dequeue: expired locks first, then the fairest ready channels.
-- Never waits for a lock (every probe is SKIP LOCKED or a try), so it cannot
-- deadlock and a busy row only ever sends it to the next candidate.
--
-- message_dequeue probes what competes with the channels, then runs named,
-- set-based steps, each of which claims as many messages as it can in one or
-- two statements:
--   _dequeue_single       a single dequeue where only one kind of message
--                         can be ready (most of them): the fairest free
--                         channel served in place (_serve_channel), or the
--                         first channel-less message, the delivery returned
--                         as claimed
--   _dequeue_many         everything else, the steps below composed:
--   _dequeue_expired      redeliver messages whose lock expired
--   _dequeue_round        a round of free channels: lock the fairest, claim
--                         a head each, record every turn (a round of
--                         several: _serve_round, a statement per step; of
--                         one: _serve_channel; fewer channels than wanted:
--                         _serve_quotas, as many rounds of them at once)
--   _dequeue_channelless  the queue's channel-less messages, one more "channel"
--   _dequeue_held         messages of channels another dequeuer holds
-- Each step is a few plain statements, each touching a handful of rows
-- through an index: large multi-CTE statements cost more to start than to run
-- at these sizes, and their generic plans read whole tables.
-- The steps of _dequeue_many return the ids they claimed, in delivery order,
-- not the delivery rows: each is then a plain function call (PL/pgSQL
-- evaluates `x := f(...)` without starting an executor), not a set-returning
-- one whose rows are copied through a tuplestore at every level;
-- message_dequeue reads all the claimed rows in one statement at the end.
-- _dequeue_round and _dequeue_held also return the channels they served,
-- those they took but could not serve (which the caller passes over for the
-- rest of the call), and how many head locks they used (see
-- _head_lock_budget).
-- ===========================================================================

-- The dequeue_at a delivery reports: priority messages show their creation
-- time (their dequeue_ms is offset by priority steps, see 40_create.sql).
CREATE OR REPLACE FUNCTION lonnymq._dequeue_at(p_dequeue_ms bigint, p_priority integer) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT 'epoch'::timestamptz + (p_dequeue_ms + p_priority::bigint * 281474976710656) * '1 millisecond'::interval
$$;
COMMENT ON FUNCTION lonnymq._dequeue_at(bigint, integer) IS 'The dequeue_at shown for a message.';

-- Moves an unlocked message that is out of attempts to the archive as dead
-- (a deferred message whose next delivery would exceed max_attempts). The
-- caller holds the message row lock and the channel row (locked or pinned);
-- p_holds_channel says whether it also holds the channel row, which a
-- capacity count needs.
CREATE OR REPLACE FUNCTION lonnymq._dead_letter_deferred(p_message lonnymq.message, p_max_attempts integer,
                                                         p_holds_channel boolean, p_queue text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM lonnymq._archive(p_message, 'dead',
        pg_catalog.format('deferred after attempt %s of %s', p_message.num_attempts, p_max_attempts));
    DELETE FROM lonnymq.message m WHERE m.id = p_message.id;
    IF p_holds_channel THEN
        UPDATE lonnymq.channel c SET removed_count = c.removed_count + (c.max_size IS NOT NULL)::integer
        WHERE c.id = p_message.channel_id;
    END IF;
    PERFORM lonnymq._notify('lonnymq_dead', p_queue, 'dead');
END
$$;
COMMENT ON FUNCTION lonnymq._dead_letter_deferred(lonnymq.message, integer, boolean, text)
    IS 'Archives an unlocked message that is out of attempts as dead.';

-- Dead-letters the due heads of a channel that are out of attempts, until
-- its first due head can be delivered. A dead-letter takes no turn, so the
-- channel keeps its place: exactly what single dequeues in a row would do.
CREATE OR REPLACE FUNCTION lonnymq._dead_letter_heads(p_channel lonnymq.channel, p_now_ms bigint,
                                                      p_holds_channel boolean, p_queue text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_head lonnymq.message;
BEGIN
    LOOP
        SELECT m.* INTO v_head FROM lonnymq.message m
        WHERE m.queue_id = p_channel.queue_id AND m.channel_id = p_channel.id AND m.locked_until_ms IS NULL
          AND m.dequeue_ms <= p_now_ms
        ORDER BY m.dequeue_ms, m.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        EXIT WHEN v_head.id IS NULL OR v_head.num_attempts < p_channel.max_attempts;
        PERFORM lonnymq._dead_letter_deferred(v_head, p_channel.max_attempts, p_holds_channel, p_queue);
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq._dead_letter_heads(lonnymq.channel, bigint, boolean, text)
    IS 'Dead-letters due heads out of attempts until one can be delivered.';

-- A message whose lock expired on its last allowed attempt goes to the archive
-- as dead instead of being redelivered. Needs the channel's locks, without
-- waiting: returns false (nothing done) when they are busy.
CREATE OR REPLACE FUNCTION lonnymq._dead_letter_expired(p_message lonnymq.message, p_channel lonnymq.channel,
                                                        p_queue text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- The channel pinned, without waiting (see _pin_channel), or for update
    -- where the settle will update or re-check it: counted channels, and
    -- every channel outside READ COMMITTED.
    IF lonnymq._accounted(p_channel.max_concurrency, p_channel.release_interval_ms, p_channel.max_size)
       OR NOT lonnymq._read_committed() THEN
        PERFORM 1 FROM lonnymq.channel c WHERE c.id = p_channel.id FOR NO KEY UPDATE SKIP LOCKED;
    ELSE
        PERFORM 1 FROM lonnymq.channel c WHERE c.id = p_channel.id FOR KEY SHARE SKIP LOCKED;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM lonnymq._settle_locked(p_message, 'dead',
        pg_catalog.format('lock expired after attempt %s of %s', p_message.num_attempts, p_channel.max_attempts));
    PERFORM lonnymq._notify('lonnymq_dead', p_queue, 'dead');
    RETURN true;
END
$$;
COMMENT ON FUNCTION lonnymq._dead_letter_expired(lonnymq.message, lonnymq.channel, text)
    IS 'Archives an expired delivery that is out of attempts, if its channel can be had without waiting.';

-- Step 1. Redelivers up to p_want messages whose lock expired, earliest
-- expiry first, and returns their ids in that order. Their channel slots
-- stayed counted, so limits are unaffected. One statement when none has
-- expired.
CREATE OR REPLACE FUNCTION lonnymq._dequeue_expired(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                    p_want integer)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[] := '{}';
    v_want integer := p_want;
    v_expired bigint[];
    v_claimed bigint[];
    v_skipped bigint[] := '{}';  -- out of attempts, but their channel was busy
    v_dying record;
BEGIN
    WHILE v_want > 0 LOOP
        SELECT coalesce(pg_catalog.array_agg(x.id ORDER BY x.locked_until_ms, x.id), '{}') INTO v_expired
        FROM (SELECT m.id, m.locked_until_ms FROM lonnymq.message m
              WHERE m.queue_id = p_queue.id AND m.locked_until_ms IS NOT NULL
                AND m.locked_until_ms <= p_now_ms AND m.id <> ALL (v_skipped)
              ORDER BY m.locked_until_ms, m.id
              LIMIT v_want
              FOR UPDATE SKIP LOCKED) x;
        EXIT WHEN pg_catalog.cardinality(v_expired) = 0;
        WITH claimed AS (
            UPDATE lonnymq.message m
            SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
            WHERE m.id = ANY (v_expired)
              -- (Its channel by key, a scalar subquery: see the final read.)
              AND NOT coalesce((SELECT m.num_attempts >= c.max_attempts FROM lonnymq.channel c
                                WHERE c.id = m.channel_id), false)
            RETURNING m.id
        )
        SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY pg_catalog.array_position(v_expired, k.id)), '{}')
        INTO v_claimed FROM claimed k;
        v_ids := v_ids || v_claimed;
        -- The rest are out of attempts: dead-lettered, then their places refilled.
        FOR v_dying IN
            SELECT m AS message, x.channel FROM lonnymq.message m
            CROSS JOIN LATERAL (SELECT c AS channel FROM lonnymq.channel c WHERE c.id = m.channel_id LIMIT 1) x
            WHERE m.id = ANY (v_expired) AND m.locked_until_ms <= p_now_ms
            ORDER BY m.locked_until_ms, m.id
        LOOP
            IF NOT lonnymq._dead_letter_expired(v_dying.message, v_dying.channel, p_queue.name) THEN
                v_skipped := v_skipped || (v_dying.message).id;
            END IF;
        END LOOP;
        EXIT WHEN pg_catalog.cardinality(v_expired) < v_want;  -- none left
        v_want := v_want - pg_catalog.cardinality(v_claimed);
    END LOOP;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_expired(lonnymq.queue, bigint, bigint, integer)
    IS 'Dequeue step: redelivers expired locks, or dead-letters those out of attempts; the ids redelivered.';

-- A channel taken for a round had nothing due (a stale key, or every ready
-- message being claimed by others): its head is raised if that can be done
-- now. If not (a producer is in flight), the head must stay early, and the
-- channel takes an empty turn instead, so that it waits behind the others
-- rather than heading every round until the raise succeeds. An empty turn
-- only ever makes the next real one later, never earlier.
CREATE OR REPLACE FUNCTION lonnymq._channel_settle_key(p_channel lonnymq.channel, p_now_ms bigint,
                                                       p_may_raise boolean) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT (p_may_raise AND lonnymq._channel_raise_head(p_channel.id, p_channel.lock_key)) THEN
        UPDATE lonnymq.channel c
        SET last_turn_ms = greatest(c.last_turn_ms, p_now_ms),
            turn_seq = x.seq,
            ready_ms = lonnymq._ready_ms(c.head_ms, greatest(c.last_turn_ms, p_now_ms), c.release_interval_ms,
                                         c.locked_count, c.max_concurrency, x.seq)
        FROM (SELECT pg_catalog.nextval('lonnymq.turn_seq') AS seq) x
        WHERE c.id = p_channel.id;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._channel_settle_key(lonnymq.channel, bigint, boolean)
    IS 'Raises the head of a channel with nothing due, or moves it behind the others.';

-- One channel of a round, locked by the caller (FOR NO KEY UPDATE), served
-- as a single dequeue serves it: its due heads out of attempts dead-lettered,
-- its first due message claimed and returned as delivered, its turn recorded.
-- A channel with nothing to take gets an id of NULL and no real turn: its
-- head raised or, when it cannot be, an empty turn (_channel_settle_key).
-- `raised` counts the head lock against the call's budget: 1 when one was
-- taken, and always for a channel with nothing to take (which may have
-- taken one), 0 otherwise.
CREATE OR REPLACE FUNCTION lonnymq._serve_channel(p_queue lonnymq.queue, p_channel lonnymq.channel,
                                                  p_now_ms bigint, p_lock_ms bigint, p_may_raise boolean,
                                                  OUT id bigint, OUT content bytea, OUT state bytea,
                                                  OUT num_attempts bigint, OUT dequeue_at timestamptz,
                                                  OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_drained boolean;
    v_raise boolean;
    v_head_ms bigint;  -- the raised head, read under the head lock
    v_counted integer;
    v_seq bigint;
BEGIN
    IF p_channel.max_attempts IS NOT NULL THEN
        PERFORM lonnymq._dead_letter_heads(p_channel, p_now_ms, true, p_queue.name);
    END IF;
    UPDATE lonnymq.message m
    SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
    WHERE m.id = (SELECT h.id FROM lonnymq.message h
                  WHERE h.queue_id = p_queue.id AND h.channel_id = p_channel.id
                    AND h.locked_until_ms IS NULL AND h.dequeue_ms <= p_now_ms
                    -- (one deferred after the dead-letter step above ran is
                    -- left for the next dequeue to dead-letter)
                    AND (p_channel.max_attempts IS NULL OR h.num_attempts < p_channel.max_attempts)
                  ORDER BY h.dequeue_ms, h.id
                  LIMIT 1
                  FOR UPDATE SKIP LOCKED)
    -- The delivery itself, so that a single dequeue reads no row twice; and
    -- whether it was the channel's last due message: none follows it. Only
    -- a hint for whether to raise the head (the raise reads afresh under the
    -- head lock), so it looks past the claimed one only: the entries before
    -- it are those claimed since the last vacuum, which a busy channel
    -- accumulates by the thousand.
    RETURNING m.id, m.content, m.state, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority),
              NOT EXISTS (SELECT 1 FROM lonnymq.message o
                          WHERE o.queue_id = p_queue.id AND o.channel_id = p_channel.id
                            AND o.locked_until_ms IS NULL AND o.dequeue_ms <= p_now_ms
                            AND (o.dequeue_ms, o.id) > (m.dequeue_ms, m.id))
    INTO id, content, state, num_attempts, dequeue_at, v_drained;
    IF NOT FOUND THEN
        PERFORM lonnymq._channel_settle_key(p_channel, p_now_ms, p_may_raise);
        raised := 1;
        RETURN;
    END IF;
    -- Its last due message taken: its head rises with this turn (under the
    -- head lock, see _channel_raise_head), so a drained channel leaves the
    -- scheduler (and becomes sweepable) at once. Otherwise the head stays
    -- where it is, a lower bound.
    v_raise := v_drained AND p_may_raise AND lonnymq._take_head_lock(p_channel.lock_key);
    raised := v_raise::integer;
    IF v_raise THEN
        v_head_ms := lonnymq._channel_head_ms(p_queue.id, p_channel.id);
    END IF;
    -- The turn (and the raised head) in one update of the row, by its key
    -- alone: the cheapest statement there is.
    v_counted := lonnymq._accounted(p_channel.max_concurrency, p_channel.release_interval_ms,
                                    p_channel.max_size)::integer;
    v_seq := pg_catalog.nextval('lonnymq.turn_seq');
    UPDATE lonnymq.channel c
    SET locked_count = c.locked_count + v_counted,
        last_turn_ms = p_now_ms,
        turn_seq = v_seq,
        head_ms = CASE WHEN v_raise THEN v_head_ms ELSE c.head_ms END,
        ready_ms = lonnymq._ready_ms(CASE WHEN v_raise THEN v_head_ms ELSE c.head_ms END, p_now_ms,
                                     c.release_interval_ms, c.locked_count + v_counted, c.max_concurrency, v_seq)
    WHERE c.id = p_channel.id;
END
$$;
COMMENT ON FUNCTION lonnymq._serve_channel(lonnymq.queue, lonnymq.channel, bigint, bigint, boolean)
    IS 'Dequeue round of one locked channel: its head claimed and returned, its turn recorded.';

-- How many messages each channel of a round takes (_serve_quotas' quotas):
-- NULL, one each, unless the round is all the free channels there are
-- (fewer than p_want) and single dequeues in a row would come back to the
-- same channels round after round. Then each takes its share of p_want at
-- once, the first ones in the round one more: exactly what those rounds
-- would take from each. Only where those rounds are sure to go as the
-- shares assume:
-- - every channel's next turn is due at once and costs nothing to count (no
--   limit, rate or capacity, see _accounted), and none has max_attempts
--   (no dead-letter step between its messages);
-- - a channel drained before its share leaves the scheduler at once, its
--   head raised: so only at READ COMMITTED (_take_head_lock), and with a
--   head lock left for every channel (p_raises). A head it cannot raise
--   would have the channel tried again in the next round, between the
--   others' later messages, which the shares cannot place;
-- - at most 100 channels, one slice of _dequeue_round, whose order the
--   quotas follow.
-- A batch on a queue with one busy channel is the case it is for: 100
-- messages in one claim instead of 100 rounds.
CREATE OR REPLACE FUNCTION lonnymq._round_quotas(p_round lonnymq.channel[], p_want integer, p_raises integer)
RETURNS integer[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_k integer := pg_catalog.cardinality(p_round);
    v_channel lonnymq.channel;
BEGIN
    IF v_k NOT BETWEEN 1 AND 100 OR p_want <= v_k OR p_raises < v_k OR NOT lonnymq._read_committed() THEN
        RETURN NULL;
    END IF;
    FOREACH v_channel IN ARRAY p_round LOOP
        IF v_channel.max_attempts IS NOT NULL
           OR lonnymq._accounted(v_channel.max_concurrency, v_channel.release_interval_ms, v_channel.max_size) THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN ARRAY(SELECT p_want / v_k + (i <= p_want % v_k)::integer FROM pg_catalog.generate_series(1, v_k) AS i
                 ORDER BY i);
END
$$;
COMMENT ON FUNCTION lonnymq._round_quotas(lonnymq.channel[], integer, integer)
    IS 'How many messages each channel of a round takes at once: NULL for one each.';

-- A round of several channels, served as single dequeues in a row would be
-- (see _dequeue_round), with a statement per step instead of two per channel:
-- the heads claimed in one statement (LATERAL ... LIMIT 1: one probe of each
-- channel, never a join over the table), the turns recorded in another. That
-- saves a batch of 100 about a third of its server CPU per message
-- (bench/README.md); a round of one channel stays on the two plain
-- statements of _serve_channel, which cost it less than these (9% more per
-- single dequeue, measured).
CREATE OR REPLACE FUNCTION lonnymq._serve_round(p_queue lonnymq.queue, p_round lonnymq.channel[], p_now_ms bigint,
                                                p_lock_ms bigint, p_raises integer,
                                                OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                                OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
    v_claimed bigint[];    -- per channel of the round, in its order: the message claimed, or NULL
    v_drained boolean[];   -- ... and whether it was the channel's last due message
    v_i integer := 0;
    v_raise boolean;
    v_head_ms bigint;
    -- per channel served, in round order: its head raised, the raised head, its turn number
    v_raises boolean[] := '{}';
    v_heads bigint[] := '{}';
    v_seqs bigint[] := '{}';
BEGIN
    ids := '{}'; served := '{}'; tried := '{}'; raised := 0;
    FOREACH v_channel IN ARRAY p_round LOOP
        IF v_channel.max_attempts IS NOT NULL THEN
            PERFORM lonnymq._dead_letter_heads(v_channel, p_now_ms, true, p_queue.name);
        END IF;
    END LOOP;
    -- (The claimed rows put back in the round's order by a join of the two
    -- lists; the drained probe as in _dequeue_round.)
    WITH claimed AS (
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        WHERE m.id = ANY (ARRAY(
            SELECT h.id FROM pg_catalog.unnest(p_round) AS r
            CROSS JOIN LATERAL (SELECT h.id FROM lonnymq.message h
                                WHERE h.queue_id = p_queue.id AND h.channel_id = r.id
                                  AND h.locked_until_ms IS NULL AND h.dequeue_ms <= p_now_ms
                                  AND (r.max_attempts IS NULL OR h.num_attempts < r.max_attempts)
                                ORDER BY h.dequeue_ms, h.id
                                LIMIT 1
                                FOR UPDATE SKIP LOCKED) h))
        RETURNING m.id, m.channel_id,
                  NOT EXISTS (SELECT 1 FROM lonnymq.message o
                              WHERE o.queue_id = p_queue.id AND o.channel_id = m.channel_id
                                AND o.locked_until_ms IS NULL AND o.dequeue_ms <= p_now_ms
                                AND (o.dequeue_ms, o.id) > (m.dequeue_ms, m.id)) AS drained
    )
    SELECT pg_catalog.array_agg(k.id ORDER BY r.ordinality), pg_catalog.array_agg(k.drained ORDER BY r.ordinality)
    INTO v_claimed, v_drained
    FROM pg_catalog.unnest(p_round) WITH ORDINALITY AS r  -- (a row per channel: its columns, then ordinality)
    LEFT JOIN claimed k ON k.channel_id = r.id;
    FOREACH v_channel IN ARRAY p_round LOOP
        v_i := v_i + 1;
        IF v_claimed[v_i] IS NULL THEN
            PERFORM lonnymq._channel_settle_key(v_channel, p_now_ms, raised < p_raises);
            raised := raised + 1;
            tried := tried || v_channel.id;
            CONTINUE;
        END IF;
        -- (Its head raised as in _dequeue_round.)
        v_raise := v_drained[v_i] AND raised < p_raises AND lonnymq._take_head_lock(v_channel.lock_key);
        raised := raised + v_raise::integer;
        v_head_ms := CASE WHEN v_raise THEN lonnymq._channel_head_ms(p_queue.id, v_channel.id) END;
        ids := ids || v_claimed[v_i];
        served := served || v_channel.id;
        v_raises := v_raises || v_raise;
        v_heads := v_heads || v_head_ms;
        v_seqs := v_seqs || pg_catalog.nextval('lonnymq.turn_seq');  -- drawn in round order
    END LOOP;
    IF pg_catalog.cardinality(served) = 0 THEN
        RETURN;
    END IF;
    -- Every turn, each row by its key, its values at its place in the round
    -- (array_position: a slice has at most 100 channels, see _dequeue_round).
    UPDATE lonnymq.channel c
    SET (locked_count, last_turn_ms, turn_seq, head_ms, ready_ms) = (
        SELECT t.locked_count, p_now_ms, t.seq, t.head_ms,
               lonnymq._ready_ms(t.head_ms, p_now_ms, c.release_interval_ms, t.locked_count, c.max_concurrency, t.seq)
        FROM (SELECT c.locked_count + lonnymq._accounted(c.max_concurrency, c.release_interval_ms,
                                                         c.max_size)::integer AS locked_count,
                     v_seqs[p.n] AS seq,
                     CASE WHEN v_raises[p.n] THEN v_heads[p.n] ELSE c.head_ms END AS head_ms
              FROM (SELECT pg_catalog.array_position(served, c.id) AS n) p) t)
    WHERE c.id = ANY (served);
END
$$;
COMMENT ON FUNCTION lonnymq._serve_round(lonnymq.queue, lonnymq.channel[], bigint, bigint, integer)
    IS 'Dequeue round of several channels: their heads claimed and their turns recorded, a statement each.';

-- A round whose channels take their quotas (see _round_quotas): as many
-- rounds of them as single dequeues in a row would make, served as
-- _serve_round serves one, a statement per step: every channel's messages
-- claimed in one statement (LATERAL ... LIMIT its quota), every turn
-- recorded in another. The deliveries come in the order those rounds would
-- make (first messages in round order, then second ones, ...); the turns,
-- head raises and tried channels follow each channel's last round in it
-- (for a channel with nothing to take, the first). Its channels have no
-- max_attempts, so no dead-letter step, and are not counted.
-- Only a concurrent transaction can make it differ from those rounds: a
-- channel that gives less than its share without being drained (another
-- dequeuer holds some of its messages), or whose head a producer's head
-- lock keeps from rising, keeps the turn of its last message here and is
-- tried again by _dequeue_many's next round, after the others' shares
-- rather than between them: a difference in turn order only.
CREATE OR REPLACE FUNCTION lonnymq._serve_quotas(p_queue lonnymq.queue, p_round lonnymq.channel[], p_now_ms bigint,
                                                 p_lock_ms bigint, p_raises integer, p_quotas integer[],
                                                 OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                                 OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
    -- per channel of the round, in its order: how many it gave, and whether
    -- its last was the channel's last due message
    v_counts integer[];
    v_drained boolean[];
    v_order integer[];     -- the round's positions in order of each one's last round
    v_at integer;
    v_raise boolean;
    v_head_ms bigint;
    -- per channel served, in the order of served: its head raised, the
    -- raised head, its turn number
    v_raises boolean[] := '{}';
    v_heads bigint[] := '{}';
    v_seqs bigint[] := '{}';
BEGIN
    ids := '{}'; served := '{}'; tried := '{}'; raised := 0;
    -- (The claimed rows put back in the round's order by a join of the two
    -- lists. Whether a channel is drained is read after its last claimed
    -- message only: the entries before it are those claimed since the last
    -- vacuum, which a busy channel accumulates by the thousand.)
    WITH claimed AS (
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        WHERE m.id = ANY (ARRAY(
            SELECT h.id FROM pg_catalog.unnest(p_round) WITH ORDINALITY AS r
            CROSS JOIN LATERAL (SELECT h.id FROM lonnymq.message h
                                WHERE h.queue_id = p_queue.id AND h.channel_id = r.id
                                  AND h.locked_until_ms IS NULL AND h.dequeue_ms <= p_now_ms
                                ORDER BY h.dequeue_ms, h.id
                                LIMIT p_quotas[r.ordinality]
                                FOR UPDATE SKIP LOCKED) h))
        RETURNING m.id, m.channel_id, m.dequeue_ms
    )
    -- Each channel of the round with its claimed messages, numbered in order
    -- (rank), and how many (n); one row with neither when none. Its last row
    -- (rank = greatest(n, 1)) speaks for the channel.
    SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.rank, k.at) FILTER (WHERE k.id IS NOT NULL), '{}'),
           pg_catalog.array_agg(k.n::integer ORDER BY k.at) FILTER (WHERE k.last),
           pg_catalog.array_agg(k.drained ORDER BY k.at) FILTER (WHERE k.last),
           pg_catalog.array_agg(k.at::integer ORDER BY greatest(k.n, 1), k.at) FILTER (WHERE k.last)
    INTO ids, v_counts, v_drained, v_order
    FROM (SELECT k.*, k.rank = greatest(k.n, 1) AS last,
                 CASE WHEN k.id IS NOT NULL AND k.rank = k.n
                      THEN NOT EXISTS (SELECT 1 FROM lonnymq.message o
                                       WHERE o.queue_id = p_queue.id AND o.channel_id = k.channel_id
                                         AND o.locked_until_ms IS NULL AND o.dequeue_ms <= p_now_ms
                                         AND (o.dequeue_ms, o.id) > (k.dequeue_ms, k.id)) END AS drained
          FROM (SELECT r.ordinality AS at, r.id AS channel_id, k.id, k.dequeue_ms,
                       pg_catalog.row_number() OVER (PARTITION BY r.ordinality ORDER BY k.dequeue_ms, k.id) AS rank,
                       pg_catalog.count(k.id) OVER (PARTITION BY r.ordinality) AS n
                FROM pg_catalog.unnest(p_round) WITH ORDINALITY AS r  -- (a row per channel: its columns, then ordinality)
                LEFT JOIN claimed k ON k.channel_id = r.id) k) k;
    FOREACH v_at IN ARRAY v_order LOOP
        v_channel := p_round[v_at];
        IF v_counts[v_at] = 0 THEN
            PERFORM lonnymq._channel_settle_key(v_channel, p_now_ms, raised < p_raises);
            raised := raised + 1;
            tried := tried || v_channel.id;
            CONTINUE;
        END IF;
        -- (Its head raised as in _serve_channel.)
        v_raise := v_drained[v_at] AND raised < p_raises AND lonnymq._take_head_lock(v_channel.lock_key);
        raised := raised + v_raise::integer;
        v_head_ms := CASE WHEN v_raise THEN lonnymq._channel_head_ms(p_queue.id, v_channel.id) END;
        served := served || v_channel.id;
        v_raises := v_raises || v_raise;
        v_heads := v_heads || v_head_ms;
        v_seqs := v_seqs || pg_catalog.nextval('lonnymq.turn_seq');  -- drawn in the order of the last rounds
    END LOOP;
    IF pg_catalog.cardinality(served) = 0 THEN
        RETURN;
    END IF;
    -- Every turn, each row by its key, its values at its place in served
    -- (array_position: at most 100 channels, see _round_quotas); none is
    -- counted, so locked_count stays.
    UPDATE lonnymq.channel c
    SET (last_turn_ms, turn_seq, head_ms, ready_ms) = (
        SELECT p_now_ms, t.seq, t.head_ms,
               lonnymq._ready_ms(t.head_ms, p_now_ms, c.release_interval_ms, c.locked_count, c.max_concurrency, t.seq)
        FROM (SELECT v_seqs[p.n] AS seq, CASE WHEN v_raises[p.n] THEN v_heads[p.n] ELSE c.head_ms END AS head_ms
              FROM (SELECT pg_catalog.array_position(served, c.id) AS n) p) t)
    WHERE c.id = ANY (served);
END
$$;
COMMENT ON FUNCTION lonnymq._serve_quotas(lonnymq.queue, lonnymq.channel[], bigint, bigint, integer, integer[])
    IS 'Dequeue rounds of channels by quotas: their messages claimed and their turns recorded, a statement each.';

-- Step 2. A round: locks up to p_want of the fairest ready channels that no
-- other transaction holds, in one statement (only those in p_only when given,
-- only those fairer than the channel-less key p_channelless_ms when given), then
-- serves them in that order, one message each, recording each turn. That is
-- what single dequeues in a row do: a channel served gets a key (this turn)
-- after all of them. When it locked fewer than p_want, those are all the
-- free channels and the next rounds would be theirs again: they take them
-- now, by quotas (see _round_quotas). A channel with nothing to take (a stale key, or every
-- ready message being claimed by others) takes no turn, gets its head raised
-- if it can be, and comes back in `tried`. At most p_raises heads are raised
-- (each holds an advisory lock until commit, and the lock table is shared
-- and finite); past that, heads stay early, which is safe. `raised` counts
-- the head locks used. A round of several channels is served by
-- _serve_round, set-based, one with quotas by _serve_quotas; a round of one
-- channel without a quota by _serve_channel.
CREATE OR REPLACE FUNCTION lonnymq._dequeue_round(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                  p_want integer, p_channelless_ms bigint, p_tried bigint[],
                                                  p_only bigint[], p_raises integer,
                                                  OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                                  OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_round lonnymq.channel[];
    v_quotas integer[];  -- NULL: one message each (see _round_quotas; at most one slice)
    v_channel lonnymq.channel;
    v_one record;
    v_from integer;
    v_slice record;
BEGIN
    ids := '{}'; served := '{}'; tried := '{}'; raised := 0;
    IF p_only IS NULL THEN
        SELECT coalesce(pg_catalog.array_agg(r.ch ORDER BY r.ready_ms, r.turn_seq, r.id), '{}') INTO v_round
        FROM (SELECT c AS ch, c.ready_ms, c.turn_seq, c.id FROM lonnymq.channel c
              WHERE c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused AND c.id <> ALL (p_tried)
                AND (p_channelless_ms IS NULL
                     OR (c.ready_ms, c.turn_seq) < (p_channelless_ms, p_queue.channelless_turn_seq))
              ORDER BY c.ready_ms, c.turn_seq, c.id
              LIMIT p_want
              FOR NO KEY UPDATE SKIP LOCKED) r;
    ELSE
        -- The same, among the given channels only, found by id: walking the
        -- scheduler index for a few channels would pass all the others.
        SELECT coalesce(pg_catalog.array_agg(r.ch ORDER BY r.ready_ms, r.turn_seq, r.id), '{}') INTO v_round
        FROM (SELECT c AS ch, c.ready_ms, c.turn_seq, c.id FROM lonnymq.channel c
              WHERE c.id = ANY (p_only) AND c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms
                AND NOT c.paused AND c.id <> ALL (p_tried)
                AND (p_channelless_ms IS NULL
                     OR (c.ready_ms, c.turn_seq) < (p_channelless_ms, p_queue.channelless_turn_seq))
              ORDER BY c.ready_ms, c.turn_seq, c.id
              LIMIT p_want
              FOR NO KEY UPDATE SKIP LOCKED) r;
    END IF;
    -- Fewer channels than wanted, and no channel-less turn between rounds:
    -- each may take its quota at once (see _round_quotas).
    IF p_channelless_ms IS NULL AND pg_catalog.cardinality(v_round) < p_want THEN
        v_quotas := lonnymq._round_quotas(v_round, p_want, p_raises);
    END IF;
    -- Several channels, or quotas: set-based, 100 at a time (the turns'
    -- statement reads the slice's arrays once per row: a round of 10,000
    -- channels in one slice took 9 s, against 3.4 s one channel at a time).
    IF pg_catalog.cardinality(v_round) > 1 OR v_quotas IS NOT NULL THEN
        FOR v_from IN 1 .. pg_catalog.cardinality(v_round) BY 100 LOOP
            v_slice := CASE WHEN v_quotas IS NULL
                            THEN lonnymq._serve_round(p_queue, v_round[v_from : v_from + 99], p_now_ms, p_lock_ms,
                                                      p_raises - raised)
                            ELSE lonnymq._serve_quotas(p_queue, v_round, p_now_ms, p_lock_ms, p_raises, v_quotas) END;
            ids := ids || v_slice.ids;
            served := served || v_slice.served;
            tried := tried || v_slice.tried;
            raised := raised + v_slice.raised;
        END LOOP;
        RETURN;
    END IF;
    IF pg_catalog.cardinality(v_round) = 0 THEN
        RETURN;
    END IF;
    v_channel := v_round[1];
    v_one := lonnymq._serve_channel(p_queue, v_channel, p_now_ms, p_lock_ms, p_raises > 0);
    raised := v_one.raised;
    IF v_one.id IS NULL THEN
        tried := ARRAY[v_channel.id];
    ELSE
        ids := ARRAY[v_one.id];
        served := ARRAY[v_channel.id];
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_round(lonnymq.queue, bigint, bigint, integer, bigint, bigint[], bigint[], integer)
    IS 'Dequeue step: a round of the fairest free channels, one message each (or their quotas), turns recorded.';

-- Step 3. The queue's channel-less messages, in (dequeue_at, id) order. With
-- a p_turn_seq (channels compete), one message, and its turn recorded on the
-- queue row, only if that row is free: channel-less traffic never queues on it.
-- Otherwise up to p_want in one statement. Returns the ids claimed, in order.
CREATE OR REPLACE FUNCTION lonnymq._dequeue_channelless(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                        p_want integer, p_turn_seq bigint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    WITH claimed AS (
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        -- (= ANY (ARRAY(...)): the claimed rows by their key whatever the
        -- plan's guess of the LIMIT, never a join over the whole table.)
        WHERE m.id = ANY (ARRAY(SELECT f.id FROM lonnymq.message f
                                WHERE f.queue_id = p_queue.id AND f.channel_id IS NULL
                                  AND f.locked_until_ms IS NULL AND f.dequeue_ms <= p_now_ms
                                ORDER BY f.dequeue_ms, f.id
                                LIMIT CASE WHEN p_turn_seq IS NULL THEN p_want ELSE 1 END
                                FOR UPDATE SKIP LOCKED))
        RETURNING m.id, m.dequeue_ms
    )
    SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.dequeue_ms, k.id), '{}') INTO v_ids FROM claimed k;
    IF pg_catalog.cardinality(v_ids) > 0 AND p_turn_seq IS NOT NULL THEN
        UPDATE lonnymq.queue q
        SET channelless_turn_ms = p_now_ms, channelless_turn_seq = p_turn_seq
        WHERE q.id = (SELECT l.id FROM lonnymq.queue l WHERE l.id = p_queue.id FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_channelless(lonnymq.queue, bigint, bigint, integer, bigint)
    IS 'Dequeue step: channel-less messages, as one more channel; the ids claimed.';

-- Step 4. Every ready channel is held by another transaction: take messages
-- from the fairest held channels without accounting anyway, exactly like a
-- bare SKIP LOCKED queue (p_hinted: channels whose new work only their holder
-- has folded in so far). This takes no turn (the holder records it), so
-- single dequeues in a row would take the fairest one's messages one after
-- another, then the next one's: up to p_want, each channel's in one
-- statement (_serve_held), the channels picked and pinned in one statement
-- (picking them one at a time would walk the held ones again for each). A
-- channel with nothing to give, or accounted or paused by now, comes back in
-- `tried`. It raises no head (that is the holder's), so `raised` is 0.
CREATE OR REPLACE FUNCTION lonnymq._dequeue_held(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                 p_want integer, p_channelless_ms bigint, p_tried bigint[],
                                                 p_hinted bigint[],
                                                 OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                                 OUT raised integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_held lonnymq.channel[];
    v_channel lonnymq.channel;
    v_ids bigint[];
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
    IF pg_catalog.cardinality(v_held) = 0 AND p_channelless_ms IS NULL AND pg_catalog.cardinality(p_hinted) > 0 THEN
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
        v_ids := lonnymq._serve_held(p_queue, v_channel, p_now_ms, p_lock_ms, p_want - pg_catalog.cardinality(ids));
        IF pg_catalog.cardinality(v_ids) = 0 THEN
            tried := tried || v_channel.id;
        ELSE
            ids := ids || v_ids;
            served := served || v_channel.id;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_held(lonnymq.queue, bigint, bigint, integer, bigint, bigint[], bigint[])
    IS 'Dequeue step: messages of channels held by another dequeuer, without a turn.';

-- One channel of _dequeue_held, pinned by the caller: up to p_want of its
-- messages, claimed in one statement, in order; none when it has none to
-- give. The claim reads the channel's row again, in its own snapshot, taken
-- after the pin: the row the caller passes is as the pick's snapshot saw it,
-- and a policy change that committed since may have made the channel
-- accounted or paused, and those are never served while held. (A
-- channel_set that commits later waits for the pin. A pause is a plain
-- update the pin does not wait for: one committed after the claim's
-- snapshot takes effect from the next dequeue, as for a free channel.)
-- A channel whose holder has gone by now is served the same way,
-- without a turn: trying it as a round first cost every held dequeue two
-- more statements and could not close that race anyway (its holder can
-- commit just after any such try).
CREATE OR REPLACE FUNCTION lonnymq._serve_held(p_queue lonnymq.queue, p_channel lonnymq.channel, p_now_ms bigint,
                                               p_lock_ms bigint, p_want integer)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    -- Its due heads out of attempts first, under the same checks: archiving
    -- one of an accounted channel without its row would miss its capacity
    -- count. (A channel given max_attempts after the pick's snapshot has its
    -- own left to the next dequeue: the claim below passes over them.)
    IF p_channel.max_attempts IS NOT NULL THEN
        PERFORM lonnymq._dead_letter_heads(c, p_now_ms, false, p_queue.name) FROM lonnymq.channel c
        WHERE c.id = p_channel.id AND c.max_attempts IS NOT NULL AND NOT c.paused
          AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size);
    END IF;
    WITH claimed AS (
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        -- (By key, whatever the plan's guess of the LIMIT: see _dequeue_channelless.)
        WHERE m.id = ANY (ARRAY(
            SELECT s.id FROM lonnymq.channel c
            CROSS JOIN LATERAL (SELECT s.id FROM lonnymq.message s
                                WHERE s.queue_id = p_queue.id AND s.channel_id = c.id
                                  AND s.locked_until_ms IS NULL AND s.dequeue_ms <= p_now_ms
                                  AND (c.max_attempts IS NULL OR s.num_attempts < c.max_attempts)
                                ORDER BY s.dequeue_ms, s.id
                                LIMIT p_want
                                FOR UPDATE SKIP LOCKED) s
            WHERE c.id = p_channel.id AND NOT c.paused
              AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)))
        RETURNING m.id, m.dequeue_ms
    )
    SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.dequeue_ms, k.id), '{}') INTO v_ids FROM claimed k;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION lonnymq._serve_held(lonnymq.queue, lonnymq.channel, bigint, bigint, integer)
    IS 'Messages of one held channel, without a turn, if its policy as it is now allows; their ids.';

-- Step 0. A single dequeue when only one kind of message can be ready (no
-- expired lock to redeliver, the queue not paused, and either no
-- channel-less message ready or no channel), which is most of them: the
-- fairest free channel locked into a row and served by _serve_channel, or
-- with p_channelless the first channel-less message claimed, the delivery
-- returned as claimed. What _dequeue_round and _dequeue_channelless do for
-- one message, without the arrays and the reads that a batch needs. When it
-- delivers nothing from the channels, `tried` says where _dequeue_many goes
-- on: the channel it took without success, or none when every ready channel
-- is held by someone else (or none is ready).
CREATE OR REPLACE FUNCTION lonnymq._dequeue_single(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                   p_channelless boolean,
                                                   OUT id bigint, OUT channel text, OUT content bytea,
                                                   OUT state bytea, OUT num_attempts bigint,
                                                   OUT dequeue_at timestamptz, OUT tried bigint[])
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_channel lonnymq.channel;
    v_one record;
BEGIN
    tried := '{}';
    IF p_channelless THEN
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        WHERE m.id = (SELECT f.id FROM lonnymq.message f
                      WHERE f.queue_id = p_queue.id AND f.channel_id IS NULL
                        AND f.locked_until_ms IS NULL AND f.dequeue_ms <= p_now_ms
                      ORDER BY f.dequeue_ms, f.id
                      LIMIT 1
                      FOR UPDATE SKIP LOCKED)
        RETURNING m.id, m.content, m.state, m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority)
        INTO id, content, state, num_attempts, dequeue_at;
        RETURN;
    END IF;
    SELECT c.* INTO v_channel FROM lonnymq.channel c
    WHERE c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused
    ORDER BY c.ready_ms, c.turn_seq, c.id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_one := lonnymq._serve_channel(p_queue, v_channel, p_now_ms, p_lock_ms, true);
    IF v_one.id IS NULL THEN
        tried := ARRAY[v_channel.id];
        RETURN;
    END IF;
    id := v_one.id;
    channel := v_channel.name;
    content := v_one.content;
    state := v_one.state;
    num_attempts := v_one.num_attempts;
    dequeue_at := v_one.dequeue_at;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_single(lonnymq.queue, bigint, bigint, boolean)
    IS 'Dequeue step: one message of the fairest free channel, or a channel-less one, returned as delivered.';

-- Every other dequeue, and a single one that step 0 could not serve: the
-- steps composed, as max_messages single dequeues in a row would run them
-- (README, "Concepts": batches). Expired locks first (p_expired: the probe
-- saw some), then rounds of the fairest free channels, with the channel-less
-- messages (p_channelless_ms: their scheduling key, NULL when none is ready)
-- taking their turn as one more channel, and, when every ready channel is
-- held by someone else, messages of a held one. p_channels_ready: whether
-- any channel is ready, as the caller knows it (NULL: read it here).
-- p_hinted: busy channels with due hints (see _absorb_hints). p_tried and
-- p_held carry on from step 0.
-- Returns the ids claimed, in delivery order; the first `recovered` of them
-- are redeliveries.
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
    -- A busy channel with due hints counts as ready for the held step, and
    -- so does any after step 0 found no free one (p_held): the held step
    -- reads them itself, and finds nothing when none is ready. Otherwise
    -- what the caller saw, or read now when it did not look (or what it saw
    -- may have changed since: a due hint absorbed, a slot freed by a
    -- dead-lettered expired delivery).
    v_channels_ready := p_held OR pg_catalog.cardinality(p_hinted) > 0 OR p_channels_ready;
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
                                            p_hinted);
        ELSE
            v_step := lonnymq._dequeue_round(v_queue, p_now_ms, p_lock_ms, v_want, v_channelless_ms, v_tried,
                                             v_only, v_raises);
        END IF;
        ids := ids || v_step.ids;
        v_served := v_served || v_step.served;
        v_tried := v_tried || v_step.tried;
        v_raises := v_raises - v_step.raised;
        v_locked := pg_catalog.cardinality(v_step.served) + pg_catalog.cardinality(v_step.tried);
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
COMMENT ON FUNCTION lonnymq._dequeue_many(lonnymq.queue, bigint, bigint, integer, bigint, boolean, boolean,
                                          bigint[], bigint[], boolean)
    IS 'Dequeue steps composed: expired locks, rounds, channel-less turns, held channels; the ids claimed.';

-- Dequeues up to max_messages messages, locking each for lock_ms. Behaves
-- like max_messages single dequeues in a row (README, "Concepts": batches):
-- expired locks first, then rounds of the fairest free channels, with the
-- channel-less messages taking their turn as one more channel, and, when
-- every ready channel is held by someone else, messages of a held one.
CREATE OR REPLACE FUNCTION lonnymq.message_dequeue(queue text, lock_ms bigint, max_messages integer DEFAULT 1)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Rows by key only, whatever the tables' size when a plan is made (design.md,
-- "Plans made on empty tables").
SET enable_seqscan = off
-- One plan per statement for every call of the steps too: a custom plan that
-- knows a LIMIT or an array's length looks cheaper than the generic one, so
-- the plan cache planned the channel-less claim again at every call (0.2 ms,
-- more than the claim itself).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now_ms bigint := lonnymq._now_ms();
    v_probe record;
    v_queue lonnymq.queue;
    v_hinted bigint[] := '{}';   -- busy channels with due hints: ready, maybe unrecorded
    v_tried bigint[] := '{}';    -- from step 0: see _dequeue_many
    v_held boolean := false;
    v_one record;
    v_many record;
BEGIN
    -- Once per session: the heap kept instead of given back at every call.
    IF NOT lonnymq._heap_warmed() THEN
        PERFORM lonnymq._warm_heap(1048576);
    END IF;
    IF message_dequeue.queue IS NULL OR pg_catalog.length(message_dequeue.queue) NOT BETWEEN 1 AND 256
       OR message_dequeue.lock_ms IS NULL OR message_dequeue.lock_ms NOT BETWEEN 1 AND 31557600000000
       OR message_dequeue.max_messages IS NULL OR message_dequeue.max_messages NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq._check_name(message_dequeue.queue, 'queue', false);
        IF message_dequeue.lock_ms IS NULL OR message_dequeue.lock_ms NOT BETWEEN 1 AND 31557600000000 THEN
            PERFORM lonnymq._invalid('lock_ms must be between 1 and 1000 years');
        END IF;
        PERFORM lonnymq._invalid('max_messages must be between 1 and 10000');
    END IF;
    -- The queue, and what competes with its channels; each probe is one
    -- step of an ordered index, bounded by now (earliest first).
    SELECT q AS queue, f.channelless_ms,
           (SELECT h.dequeue_ms FROM lonnymq.channel_hint h
            WHERE h.queue_id = q.id AND h.dequeue_ms <= v_now_ms
            ORDER BY h.dequeue_ms LIMIT 1) IS NOT NULL AS hinted,
           -- (Bounded by now: the scan stops at the first lock not yet
           -- expired. Unbounded, it stepped over the entry every completed
           -- message leaves in the index until the next vacuum, before the
           -- first live lock: dead entries sort first, their locks having
           -- been taken earlier. Workload 5's "completed" shape.)
           (SELECT m.locked_until_ms FROM lonnymq.message m
            WHERE m.queue_id = q.id AND m.locked_until_ms <= v_now_ms
            ORDER BY m.locked_until_ms LIMIT 1) IS NOT NULL AS expired,
           -- Whether any channel is ready: with none, the channel-less
           -- messages are all there is (see _dequeue_many), and with neither
           -- the call is over.
           EXISTS (SELECT 1 FROM lonnymq.channel c
                   WHERE c.queue_id = q.id AND c.ready_ms <= v_now_ms AND NOT c.paused) AS channels_ready
    INTO v_probe
    FROM lonnymq.queue q
    LEFT JOIN LATERAL (SELECT greatest(m.dequeue_ms, q.channelless_turn_ms) AS channelless_ms
                       FROM lonnymq.message m
                       WHERE m.queue_id = q.id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
                         AND m.dequeue_ms <= v_now_ms
                       ORDER BY m.dequeue_ms, m.id
                       LIMIT 1) f ON true
    WHERE q.name = message_dequeue.queue;
    -- No such queue, or nothing to redeliver and nothing ready: one statement.
    IF NOT FOUND OR NOT (v_probe.expired OR v_probe.hinted OR v_probe.channels_ready
                         OR v_probe.channelless_ms IS NOT NULL) THEN
        RETURN;
    END IF;
    v_queue := v_probe.queue;
    IF v_probe.hinted THEN
        v_hinted := lonnymq._absorb_hints(v_queue.id, v_now_ms, message_dequeue.max_messages + 2);
    END IF;
    -- A single dequeue where only the channels, or only the channel-less
    -- messages, can have something ready: step 0.
    IF message_dequeue.max_messages = 1 AND NOT v_probe.expired AND NOT v_queue.paused
       AND (v_probe.channelless_ms IS NULL OR NOT (v_probe.channels_ready OR v_probe.hinted)) THEN
        v_one := lonnymq._dequeue_single(v_queue, v_now_ms, message_dequeue.lock_ms,
                                         v_probe.channelless_ms IS NOT NULL);
        IF v_one.id IS NOT NULL THEN
            id := v_one.id;
            channel := v_one.channel;
            content := v_one.content;
            state := v_one.state;
            num_attempts := v_one.num_attempts;
            dequeue_at := v_one.dequeue_at;
            recovered := false;
            RETURN NEXT;
            RETURN;
        END IF;
        v_tried := v_one.tried;
        -- No free channel: the next step is a held one.
        v_held := v_probe.channelless_ms IS NULL AND pg_catalog.cardinality(v_tried) = 0;
    END IF;
    -- (What the probe saw of the channels holds unless absorbing hints or
    -- redelivering expired locks may change it.)
    v_many := lonnymq._dequeue_many(v_queue, v_now_ms, message_dequeue.lock_ms, message_dequeue.max_messages,
                                    v_probe.channelless_ms, v_probe.expired,
                                    CASE WHEN NOT (v_probe.hinted OR v_probe.expired) THEN v_probe.channels_ready END,
                                    v_hinted, v_tried, v_held);

    -- The deliveries, in the order they were claimed (one plan for every
    -- count: see plan_cache_mode above). Each row and its channel's name
    -- looked up by key: as a join, a plan made while the table looked empty
    -- read the whole table once per call (the LIMIT keeps the subquery from
    -- being flattened into one).
    RETURN QUERY
    SELECT m.id, (SELECT c.name FROM lonnymq.channel c WHERE c.id = m.channel_id), m.content, m.state,
           m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority), o.n <= v_many.recovered
    FROM pg_catalog.unnest(v_many.ids) WITH ORDINALITY AS o(id, n)
    CROSS JOIN LATERAL (SELECT d.* FROM lonnymq.message d WHERE d.id = o.id LIMIT 1) m
    ORDER BY o.n;
END
$$;
COMMENT ON FUNCTION lonnymq.message_dequeue(text, bigint, integer)
    IS 'Locks and returns up to max_messages ready messages, fairly across channels.';
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
    UPDATE lonnymq.message m
    SET locked_until_ms = NULL,
        dequeue_ms = v_dequeue_ms,
        priority = 0,
        state = coalesce(message_defer.state, m.state)
    WHERE m.id = message_defer.id;
    IF (v_lock.p_message).channel_id IS NOT NULL THEN
        v_channel := lonnymq._pin_channel((v_lock.p_message).channel_id);
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
            -- An unaccounted channel's row is not ours to hold: tell dequeue, like a producer.
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            VALUES ((v_lock.p_message).queue_id, v_channel.id, v_dequeue_ms);
        END IF;
    END IF;
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
    RETURN 'cancelled';
END
$$;
COMMENT ON FUNCTION lonnymq.message_cancel(bigint) IS 'Removes a pending message: cancelled, locked, not_found.';
-- ===========================================================================
-- The archive: redrive and pruning.
-- ===========================================================================

-- Re-creates an archived message (redrive) with its content and state and
-- fresh attempts, through the normal creation path (limits apply). The
-- archive row, which the caller holds locked, is removed once the message
-- exists again. Returns (status, id): created or dropped.
CREATE OR REPLACE FUNCTION lonnymq._requeue(p_archived lonnymq.message_archive, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    SELECT r.status, r.id INTO status, id
    FROM lonnymq._create_one(lonnymq._queue_id(p_archived.queue, true), p_archived.queue, p_archived.channel,
                             p_archived.content, lonnymq._now_ms(), 0, NULL, p_archived.state, 0, 'requeued',
                             true) r;
    IF status = 'created' THEN
        DELETE FROM lonnymq.message_archive a WHERE a.id = p_archived.id;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._requeue(lonnymq.message_archive) IS 'Re-creates a locked archive row as a message.';

-- Redrives one archived message. Returns (status, id): created, dropped
-- (its channel is full), or not_found.
CREATE OR REPLACE FUNCTION lonnymq.archive_requeue(archive_id bigint, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_archived lonnymq.message_archive;
BEGIN
    IF archive_requeue.archive_id IS NULL THEN
        PERFORM lonnymq._invalid('archive_id must not be NULL');
    END IF;
    SELECT a.* INTO v_archived FROM lonnymq.message_archive a WHERE a.id = archive_requeue.archive_id FOR UPDATE;
    IF v_archived.id IS NULL THEN
        status := 'not_found';
        RETURN;
    END IF;
    SELECT r.status, r.id INTO status, id FROM lonnymq._requeue(v_archived) r;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_requeue(bigint) IS 'Redrives an archived message: (created|dropped|not_found, id).';

-- Validates the filter shared by the bulk archive calls.
CREATE OR REPLACE FUNCTION lonnymq._check_archive_filter(p_queue text, p_queue_nullable boolean, p_channel text,
                                                         p_outcome text, p_after timestamptz,
                                                         p_before timestamptz) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM lonnymq._check_name(p_queue, 'queue', p_queue_nullable);
    PERFORM lonnymq._check_name(p_channel, 'channel', true);
    IF p_outcome IS NOT NULL AND p_outcome NOT IN ('completed', 'failed', 'dead') THEN
        PERFORM lonnymq._invalid(pg_catalog.format('outcome must be completed, failed, dead or NULL, got %s',
                                                   p_outcome));
    END IF;
    IF p_after >= p_before THEN
        PERFORM lonnymq._invalid('archived_after must be earlier than archived_before');
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._check_archive_filter(text, boolean, text, text, timestamptz, timestamptz)
    IS 'Validates a bulk archive filter, 22023 otherwise.';

-- Redrives every archived message of a queue that matches the filter (NULL:
-- any outcome, any channel, no time bound; archived_after inclusive,
-- archived_before exclusive), oldest first, each as archive_requeue would.
-- Rows another transaction is requeueing are passed over. Returns how many
-- were requeued and how many stay archived because their channel is full.
-- outcome has no default: a call with one argument is always the single
-- form above, so archive_requeue('42') cannot redrive a queue named "42".
CREATE OR REPLACE FUNCTION lonnymq.archive_requeue(queue text, outcome text, channel text DEFAULT NULL,
                                                   archived_after timestamptz DEFAULT NULL,
                                                   archived_before timestamptz DEFAULT NULL,
                                                   OUT requeued bigint, OUT dropped bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_archived lonnymq.message_archive;
BEGIN
    PERFORM lonnymq._check_archive_filter(archive_requeue.queue, false, archive_requeue.channel,
                                          archive_requeue.outcome, archive_requeue.archived_after,
                                          archive_requeue.archived_before);
    requeued := 0;
    dropped := 0;
    FOR v_archived IN
        SELECT a.* FROM lonnymq.message_archive a
        WHERE a.queue = archive_requeue.queue
          AND (archive_requeue.channel IS NULL OR a.channel = archive_requeue.channel)
          AND (archive_requeue.outcome IS NULL OR a.outcome = archive_requeue.outcome)
          AND (archive_requeue.archived_after IS NULL OR a.archived_at >= archive_requeue.archived_after)
          AND (archive_requeue.archived_before IS NULL OR a.archived_at < archive_requeue.archived_before)
        ORDER BY a.archived_at, a.id
        FOR UPDATE SKIP LOCKED
    LOOP
        IF (lonnymq._requeue(v_archived)).status = 'created' THEN
            requeued := requeued + 1;
        ELSE
            dropped := dropped + 1;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_requeue(text, text, text, timestamptz, timestamptz)
    IS 'Redrives every archived message matching a filter: (requeued, dropped).';

-- Deletes archive rows archived longer ago than older_than, only those of a
-- queue, channel and outcome when given. Without a channel or outcome filter
-- it also drops spent batch idempotency keys that old (of that queue when
-- given). Returns the number of archive rows removed.
CREATE OR REPLACE FUNCTION lonnymq.archive_prune(older_than interval, queue text DEFAULT NULL,
                                                 channel text DEFAULT NULL, outcome text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_removed bigint;
    v_before timestamptz;
BEGIN
    PERFORM lonnymq._check_age(archive_prune.older_than, 'older_than');
    PERFORM lonnymq._check_archive_filter(archive_prune.queue, true, archive_prune.channel,
                                          archive_prune.outcome, NULL, NULL);
    -- Nothing was archived 6000 years ago, and now() minus a longer interval
    -- may not be a timestamp at all (the earliest is 4714 BC).
    IF archive_prune.older_than > '6000 years'::interval THEN
        RETURN 0;
    END IF;
    v_before := pg_catalog.now() - archive_prune.older_than;
    DELETE FROM lonnymq.message_archive a
    WHERE a.archived_at < v_before
      AND (archive_prune.queue IS NULL OR a.queue = archive_prune.queue)
      AND (archive_prune.channel IS NULL OR a.channel = archive_prune.channel)
      AND (archive_prune.outcome IS NULL OR a.outcome = archive_prune.outcome);
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    IF archive_prune.channel IS NULL AND archive_prune.outcome IS NULL THEN
        DELETE FROM lonnymq.batch b
        WHERE b.created_at < v_before
          AND (archive_prune.queue IS NULL
               OR b.queue_id = (SELECT q.id FROM lonnymq.queue q WHERE q.name = archive_prune.queue));
    END IF;
    RETURN v_removed;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_prune(interval, text, text, text)
    IS 'Removes archive rows older than the interval, optionally of one queue, channel, outcome; returns the count.';
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
    v_next_ms := least(
        (SELECT c.ready_ms FROM lonnymq.channel c
         WHERE c.queue_id = v_queue_id AND c.ready_ms IS NOT NULL AND NOT c.paused ORDER BY c.ready_ms LIMIT 1),
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

-- The wake-up slots of this session's wait_begin calls that could not
-- announce, one element per call, kept in the session setting
-- lonnymq.unannounced: the matching wait_end ends nothing then, rather than
-- another queue's announcement in the same slot. (A session that sets it
-- itself only changes its own announcements.)
CREATE OR REPLACE FUNCTION lonnymq._unannounced() RETURNS integer[]
LANGUAGE sql VOLATILE  -- (wait_begin and wait_end change it within a statement)
AS $$
    SELECT CASE WHEN v OPERATOR(pg_catalog.~) '^[0-9]{1,2}(,[0-9]{1,2})*$'
                THEN pg_catalog.string_to_array(v, ',')::integer[] ELSE '{}' END
    FROM (SELECT pg_catalog.current_setting('lonnymq.unannounced', true)) s(v)
$$;
COMMENT ON FUNCTION lonnymq._unannounced() IS 'Wake-up slots of this session''s wait_begin calls that did not announce.';

-- Announces that the caller is about to sleep on a queue until a 'lonnymq'
-- NOTIFY for it (LISTEN lonnymq) or until the returned number of
-- milliseconds has passed, and returns that number: wait_hint_ms, or NULL
-- (nothing queued: sleep until notified). Producers notify only while a
-- consumer waits (see _notify_waiters), so a LISTEN client calls this before
-- it sleeps and wait_end when it wakes, on one connection, once per call (the
-- announcement is a session-level lock on the queue's slot: it holds no
-- transaction open, ends with the session if wait_end never comes, and one
-- session waiting on any number of queues holds at most 64 of them). No
-- wake-up is lost: producers that decided not to notify before the
-- announcement are waited for (at most 100 ms) before the hint looks for
-- work; if the announcement or that wait does not succeed in time, the hint
-- is at most 100 ms, so the caller looks again soon.
CREATE OR REPLACE FUNCTION lonnymq.wait_begin(queue text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot integer;
    v_patience_ms constant bigint := 100;
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    v_announced boolean;
    v_settled boolean;
BEGIN
    PERFORM lonnymq._check_name(wait_begin.queue, 'queue', false);
    v_slot := lonnymq._wait_slot(wait_begin.queue);
    -- Announce, then let the producers that skipped their NOTIFY commit: both
    -- tried first, which is enough unless someone holds the locks right now.
    -- (CASE: in this order, and the unlock only after a successful try.)
    v_announced := pg_catalog.pg_try_advisory_lock_shared(lonnymq._waiting_lock_class(), v_slot);
    v_settled := CASE WHEN NOT v_announced THEN false
                      WHEN pg_catalog.pg_try_advisory_lock(lonnymq._producing_lock_class(), v_slot)
                      THEN pg_catalog.pg_advisory_unlock(lonnymq._producing_lock_class(), v_slot)
                      ELSE false END;
    IF NOT v_settled THEN
        -- Waited for without blocking anyone for long: a lock timeout in a
        -- subtransaction. (A producer checking for waiters holds the waiting
        -- lock exclusively for an instant; producers in flight hold the
        -- producing lock until they commit.)
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', v_patience_ms::text, true);
            IF NOT v_announced THEN
                PERFORM pg_catalog.pg_advisory_lock_shared(lonnymq._waiting_lock_class(), v_slot);
                v_announced := true;
            END IF;
            PERFORM pg_catalog.pg_advisory_lock(lonnymq._producing_lock_class(), v_slot);
            PERFORM pg_catalog.pg_advisory_unlock(lonnymq._producing_lock_class(), v_slot);
            v_settled := true;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- (a session lock taken above stays taken)
        END;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    END IF;
    IF NOT v_announced THEN
        PERFORM pg_catalog.set_config('lonnymq.unannounced',
            pg_catalog.array_to_string(pg_catalog.array_append(lonnymq._unannounced(), v_slot), ','), false);
    END IF;
    IF v_settled THEN
        RETURN lonnymq.wait_hint_ms(wait_begin.queue);
    END IF;
    RETURN least(coalesce(lonnymq.wait_hint_ms(wait_begin.queue), v_patience_ms), v_patience_ms);
END
$$;
COMMENT ON FUNCTION lonnymq.wait_begin(text)
    IS 'Marks the session as waiting on a queue until wait_end; returns how long to sleep at most.';

-- Ends what one wait_begin of the queue announced (nothing if there is
-- nothing to end, such as when wait_begin could not announce). The slot's
-- lock is counted: it stays held while other announcements in it last.
CREATE OR REPLACE FUNCTION lonnymq.wait_end(queue text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot integer;
    v_unannounced integer[];
    v_at integer;
BEGIN
    PERFORM lonnymq._check_name(wait_end.queue, 'queue', false);
    v_slot := lonnymq._wait_slot(wait_end.queue);
    v_unannounced := lonnymq._unannounced();
    v_at := pg_catalog.array_position(v_unannounced, v_slot);
    IF v_at IS NOT NULL THEN
        PERFORM pg_catalog.set_config('lonnymq.unannounced',
            pg_catalog.array_to_string(v_unannounced[:v_at - 1] || v_unannounced[v_at + 1:], ','), false);
    ELSIF EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                  WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
                    AND l.mode = 'ShareLock' AND l.objsubid = 2
                    AND l.classid = (lonnymq._waiting_lock_class())::pg_catalog.oid
                    AND l.objid = (v_slot)::pg_catalog.oid) THEN
        PERFORM pg_catalog.pg_advisory_unlock_shared(lonnymq._waiting_lock_class(), v_slot);
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
BEGIN
    PERFORM lonnymq._check_name(p_queue, 'queue', false);
    PERFORM lonnymq._check_name(p_channel, 'channel', false);
    v_queue_id := lonnymq._queue_id(p_queue, false);
    UPDATE lonnymq.channel c SET paused = p_paused
    WHERE c.queue_id = v_queue_id AND c.name = p_channel;
    IF NOT FOUND THEN
        RETURN 'not_found';
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
                                        FILTER (WHERE c.head_ms <= v_now_ms)
        INTO channels, oldest_ready_ms
        FROM lonnymq.channel c WHERE c.queue_id = v_queue.id;
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
                THEN c.locked_count::bigint
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
    FROM (SELECT c.*, (c.max_concurrency IS NOT NULL AND c.locked_count >= c.max_concurrency) AS saturated
          FROM lonnymq.channel c
          WHERE c.queue_id = v_queue_id
          ORDER BY saturated DESC, c.head_ms NULLS LAST, c.name
          LIMIT channel_summary.max_channels) c
    ORDER BY c.saturated DESC, c.head_ms NULLS LAST, c.name;
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
    PERFORM lonnymq._check_age(maintenance_schedule.archive_retention, 'archive_retention');
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
-- EXECUTE on the calls they need and never touch the tables; docs/grants.sql has
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
    lonnymq._check_create(bytea, bigint, integer, text), lonnymq._check_age(interval, text),
    lonnymq._require_pg_cron() TO PUBLIC;
