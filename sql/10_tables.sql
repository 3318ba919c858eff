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
    -- model A, limited channels: the stamp of the head last claimed.
    last_vt bigint,
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
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- model A: the fairness stamp (see message_ready_idx), when to stamp it,
    -- whether it jumps its channel's order, whether it is a limited
    -- channel's head (its claim counts a slot and designates the next head).
    vt bigint,
    due_ms bigint,
    jump boolean NOT NULL DEFAULT false,
    gated boolean NOT NULL DEFAULT false
) WITH (fillfactor = 90);
ALTER SEQUENCE lonnymq.message_id_seq OWNED BY lonnymq.message.id;
COMMENT ON TABLE lonnymq.message IS 'Live messages; read them through the lonnymq.messages view.';

-- Model A (issue 37): fairness is stamped on each message when it becomes
-- ready (start-time fair queueing). vt is the stamp: NULL while the message
-- is scheduled (future), parked (behind a channel limit or a pause) or
-- locked. A ready message gets max(V, its channel's previous stamp + 1),
-- V being the smallest stamp ready in the queue (0 when none is), so every
-- backlogged channel gets one message per stamp: round-robin. A dequeue of
-- a channel without limits is then one ordered claim over this index.
CREATE INDEX message_ready_idx ON lonnymq.message (queue_id, vt, id) WHERE vt IS NOT NULL;
-- A channel's latest stamp (channel-less messages: "channel" 0), read by the
-- producer that stamps the channel's next message.
CREATE INDEX message_channel_vt_idx ON lonnymq.message (queue_id, (coalesce(channel_id, 0)), vt)
    WHERE vt IS NOT NULL;
-- Messages waiting to be stamped at due_ms: scheduled (dequeue_at in the
-- future, or deferred) and rate-limited channel heads. Lazy stamping: the
-- dequeue stamps those due before it claims.
CREATE INDEX message_due_idx ON lonnymq.message (queue_id, due_ms, id) WHERE due_ms IS NOT NULL;
-- Parked messages (unstamped, not due: behind max_concurrency or
-- release_interval_ms, or in a paused channel), in channel order: a limited
-- channel's next head is the first of them.
CREATE INDEX message_parked_idx ON lonnymq.message (channel_id, dequeue_ms, id)
    WHERE vt IS NULL AND due_ms IS NULL AND locked_until_ms IS NULL;
-- A limited channel's designated head (at most one not in flight).
CREATE INDEX message_gated_idx ON lonnymq.message (channel_id) WHERE gated AND locked_until_ms IS NULL;
-- Stamped messages that jump ahead of their channel's order (priority,
-- back-dated): a claim swaps stamps with one of them. Empty in common use.
CREATE INDEX message_jump_idx ON lonnymq.message (queue_id, (coalesce(channel_id, 0)), dequeue_ms, id)
    WHERE jump AND vt IS NOT NULL;
-- Locked messages by expiry: the recovery arm of every claim.
CREATE INDEX message_locked_idx ON lonnymq.message (queue_id, locked_until_ms, id)
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
