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
