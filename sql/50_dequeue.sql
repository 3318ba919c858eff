-- ===========================================================================
-- Dequeue. message_dequeue serves a call as max_messages single dequeues in
-- a row would (README, "Concepts": batches), in this order:
--   1. due producer hints folded into channel heads (_absorb_hints);
--   2. expired locks redelivered, earliest expiry first (_dequeue_expired);
--   3. rounds of the fairest free channels (_dequeue_round), the queue's
--      channel-less messages taking their turn as one more channel
--      (_dequeue_channelless); and when every ready channel is held by
--      another dequeuer, a round of held channels, served without a turn.
-- A round is the same three statements whatever its size: pick the
-- channels, claim their messages, record their turns. A single dequeue is a
-- round of one channel, a batch of n a round of up to n.
-- Never waits for a lock (every probe is SKIP LOCKED or a try), so it cannot
-- deadlock and a busy row only ever sends it to the next candidate.
-- The steps return the ids they claimed, in delivery order; message_dequeue
-- reads the claimed rows once, at the end.
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

-- Step 3, between rounds: the queue's channel-less messages, in (dequeue_at, id) order. With
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

-- Step 3, a round: up to p_want of the fairest ready channels, each served
-- what single dequeues in a row would take from it, in three statements:
--   pick   the channels, locked FOR NO KEY UPDATE SKIP LOCKED in key order:
--          only those fairer than the channel-less key p_channelless_ms when
--          given, only those in p_only when given (the channels this call
--          holds: walking the scheduler index for them would pass every
--          channel other dequeuers hold);
--   claim  each channel's first due message, or, when the round holds fewer
--          channels than wanted, its share of p_want at once (what the
--          rounds single dequeues would make of them take, delivered in
--          their order) where those rounds are sure to go as the shares
--          assume: no limit, rate or capacity to count (_accounted), no
--          max_attempts, READ COMMITTED;
--   turns  every channel's row: a turn for each one served (its slot
--          counted), its head raised when it drained.
-- A channel with nothing to take (a stale key, or every due message claimed
-- by others) takes no turn and comes back in `tried`; its head is raised if
-- it can be, and if not it takes an empty turn, behind the others.
-- With p_held, every ready channel is held by another dequeuer: the round is
-- of those without accounting, pinned FOR KEY SHARE (see _pin_channel), and
-- up to p_want of their messages are taken channel by channel, as from a
-- bare SKIP LOCKED queue. No turn is recorded (that is the holder's) and no
-- head raised. When none is ready, it tries the busy channels with due
-- hints, p_busy (see _absorb_hints), whose work only their holder has seen.
-- A head rises only under its head lock (see _channel_raise_head), tried
-- after the claim, so the turns statement reads it in a later snapshot, one
-- that sees every producer that held the lock.
CREATE OR REPLACE FUNCTION lonnymq._dequeue_round(p_queue lonnymq.queue, p_now_ms bigint, p_lock_ms bigint,
                                                  p_want integer, p_channelless_ms bigint, p_tried bigint[],
                                                  p_only bigint[], p_held boolean, p_busy bigint[],
                                                  OUT ids bigint[], OUT served bigint[], OUT tried bigint[],
                                                  OUT locked integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- per channel of the round, in its order:
    v_channels bigint[];      -- its id,
    v_keys integer[];         -- its head lock key,
    v_counts integer[];       -- how many messages it gave,
    v_drained boolean[];      -- whether its last one was its last due message,
    v_raises boolean[];       -- whether its head rises,
    v_seqs bigint[];          -- and its turn number (NULL: none)
    v_dying boolean;          -- some channel of the round has max_attempts
    v_shares boolean;         -- the round takes shares (see above)
    v_quota integer;          -- ... each channel's (the first ones one more)
    -- per message claimed, in (channel, message) order:
    v_at integer[];           -- its channel's place in the round,
    v_last_due boolean[];     -- whether no due message of its channel follows it,
    v_rank bigint[];          -- and its place in delivery order
    v_i integer;
    v_pass integer;
BEGIN
    ids := '{}'; served := '{}'; tried := '{}';
    -- Pick.
    IF p_held THEN
        -- Whether a held channel may be served depends on its current
        -- policy, which an older snapshot may not show: outside READ
        -- COMMITTED, never.
        IF NOT lonnymq._read_committed() THEN
            locked := 0;
            RETURN;
        END IF;
        SELECT pg_catalog.array_agg(x.id ORDER BY x.ready_ms, x.turn_seq, x.id),
               pg_catalog.bool_or(x.max_attempts IS NOT NULL)
        INTO v_channels, v_dying
        FROM (SELECT c.id, c.ready_ms, c.turn_seq, c.max_attempts FROM lonnymq.channel c
              WHERE c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused AND c.id <> ALL (p_tried)
                AND (p_channelless_ms IS NULL
                     OR (c.ready_ms, c.turn_seq) < (p_channelless_ms, p_queue.channelless_turn_seq))
                AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
              ORDER BY c.ready_ms, c.turn_seq, c.id
              LIMIT p_want
              FOR KEY SHARE SKIP LOCKED) x;
        IF v_channels IS NULL AND p_channelless_ms IS NULL AND pg_catalog.cardinality(p_busy) > 0 THEN
            SELECT pg_catalog.array_agg(x.id ORDER BY x.last_turn_ms, x.turn_seq, x.id),
                   pg_catalog.bool_or(x.max_attempts IS NOT NULL)
            INTO v_channels, v_dying
            FROM (SELECT c.id, c.last_turn_ms, c.turn_seq, c.max_attempts FROM lonnymq.channel c
                  WHERE c.id = ANY (p_busy) AND c.id <> ALL (p_tried) AND NOT c.paused
                    AND NOT lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
                  ORDER BY c.last_turn_ms, c.turn_seq, c.id
                  LIMIT p_want
                  FOR KEY SHARE SKIP LOCKED) x;
        END IF;
        v_quota := p_want;  -- (the claim stops at p_want)
    ELSE
        SELECT pg_catalog.array_agg(x.id ORDER BY x.ready_ms, x.turn_seq, x.id),
               pg_catalog.array_agg(x.lock_key ORDER BY x.ready_ms, x.turn_seq, x.id),
               pg_catalog.bool_or(x.max_attempts IS NOT NULL),
               pg_catalog.bool_and(x.max_attempts IS NULL
                                   AND NOT lonnymq._accounted(x.max_concurrency, x.release_interval_ms, x.max_size))
        INTO v_channels, v_keys, v_dying, v_shares
        FROM (SELECT c.id, c.ready_ms, c.turn_seq, c.lock_key, c.max_attempts, c.max_concurrency,
                     c.release_interval_ms, c.max_size
              FROM lonnymq.channel c
              WHERE (CASE WHEN p_only IS NULL
                          THEN c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms
                          ELSE c.id = ANY (p_only) END)
                AND c.queue_id = p_queue.id AND c.ready_ms <= p_now_ms AND NOT c.paused AND c.id <> ALL (p_tried)
                AND (p_channelless_ms IS NULL
                     OR (c.ready_ms, c.turn_seq) < (p_channelless_ms, p_queue.channelless_turn_seq))
              ORDER BY c.ready_ms, c.turn_seq, c.id
              LIMIT p_want
              FOR NO KEY UPDATE SKIP LOCKED) x;
        locked := coalesce(pg_catalog.cardinality(v_channels), 0);
        v_shares := v_shares AND locked < p_want AND p_channelless_ms IS NULL AND lonnymq._read_committed();
        v_quota := CASE WHEN v_shares THEN p_want / greatest(locked, 1) ELSE 1 END;
    END IF;
    locked := coalesce(pg_catalog.cardinality(v_channels), 0);
    IF locked = 0 THEN
        RETURN;
    END IF;

    -- Due heads out of attempts are dead-lettered first: a dead letter takes
    -- no turn, so the channel keeps its place. A held channel is read again,
    -- in this statement's snapshot, taken after the pin: it is left alone if
    -- it became accounted or paused since (archiving one of an accounted
    -- channel without its row would miss its capacity count).
    IF v_dying THEN
        PERFORM lonnymq._dead_letter_heads(c, p_now_ms, NOT p_held, p_queue.name)
        FROM lonnymq.channel c
        WHERE c.id = ANY (v_channels) AND c.max_attempts IS NOT NULL
          AND NOT (p_held AND (c.paused OR lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)));
    END IF;

    -- Claim, in (channel, message) order. Each channel is read again by key
    -- for its current policy (the claim's snapshot follows the pick's lock).
    -- Whether a channel drained is read after each claimed message only: the
    -- entries before it are those claimed since the last vacuum, which a
    -- busy channel accumulates by the thousand.
    WITH picked AS (
        SELECT h.id, r.at FROM pg_catalog.unnest(v_channels) WITH ORDINALITY AS r(id, at)
        CROSS JOIN LATERAL (SELECT c.max_attempts FROM lonnymq.channel c
                            WHERE c.id = r.id
                              AND NOT (p_held AND (c.paused OR lonnymq._accounted(c.max_concurrency,
                                                                                 c.release_interval_ms,
                                                                                 c.max_size)))) c
        CROSS JOIN LATERAL (SELECT h.id FROM lonnymq.message h
                            WHERE h.queue_id = p_queue.id AND h.channel_id = r.id
                              AND h.locked_until_ms IS NULL AND h.dequeue_ms <= p_now_ms
                              -- (one deferred after the dead-letter step is
                              -- left for the next dequeue)
                              AND (c.max_attempts IS NULL OR h.num_attempts < c.max_attempts)
                            ORDER BY h.dequeue_ms, h.id
                            LIMIT v_quota + (v_shares AND r.at <= p_want % locked)::integer
                            FOR UPDATE SKIP LOCKED) h
        LIMIT p_want
    ), claimed AS (
        UPDATE lonnymq.message m
        SET num_attempts = m.num_attempts + 1, locked_until_ms = p_now_ms + p_lock_ms
        FROM picked p
        WHERE m.id = p.id
        RETURNING m.id, p.at, m.dequeue_ms,
                  NOT EXISTS (SELECT 1 FROM lonnymq.message o
                              WHERE o.queue_id = p_queue.id AND o.channel_id = m.channel_id
                                AND o.locked_until_ms IS NULL AND o.dequeue_ms <= p_now_ms
                                AND (o.dequeue_ms, o.id) > (m.dequeue_ms, m.id)) AS last_due
    )
    SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.at, k.dequeue_ms, k.id), '{}'),
           pg_catalog.array_agg(k.at::integer ORDER BY k.at, k.dequeue_ms, k.id),
           pg_catalog.array_agg(k.last_due ORDER BY k.at, k.dequeue_ms, k.id)
    INTO ids, v_at, v_last_due
    FROM claimed k;

    -- Each channel's count; with shares, the deliveries put in the order of
    -- the rounds (first messages in round order, then second ones...).
    v_counts := pg_catalog.array_fill(0, ARRAY[locked]);
    v_drained := pg_catalog.array_fill(NULL::boolean, ARRAY[locked]);
    v_rank := '{}';
    FOR v_i IN 1 .. pg_catalog.cardinality(ids) LOOP
        v_counts[v_at[v_i]] := v_counts[v_at[v_i]] + 1;
        v_drained[v_at[v_i]] := v_last_due[v_i];
        v_rank := v_rank || (v_counts[v_at[v_i]]::bigint * (locked + 1) + v_at[v_i]);
    END LOOP;
    IF v_shares AND NOT p_held THEN
        ids := ARRAY(SELECT x.id FROM ROWS FROM (pg_catalog.unnest(ids), pg_catalog.unnest(v_rank)) AS x(id, rank)
                     ORDER BY x.rank);
    END IF;
    FOR v_i IN 1 .. locked LOOP
        IF v_counts[v_i] > 0 THEN
            served := served || v_channels[v_i];
        ELSE
            tried := tried || v_channels[v_i];
        END IF;
    END LOOP;
    IF p_held THEN
        RETURN;
    END IF;

    -- Turns: a channel that drained or gave nothing tries its head lock;
    -- the turns are numbered in the order they were taken (with shares, the
    -- order of each channel's last round); one that gave nothing and whose
    -- head rises takes none.
    v_raises := pg_catalog.array_fill(false, ARRAY[locked]);
    v_seqs := pg_catalog.array_fill(NULL::bigint, ARRAY[locked]);
    FOR v_pass IN 1 .. greatest(v_quota + v_shares::integer, 1) LOOP
        FOR v_i IN 1 .. locked LOOP
            CONTINUE WHEN greatest(v_counts[v_i], 1) <> v_pass;
            v_raises[v_i] := (v_counts[v_i] = 0 OR v_drained[v_i]) AND lonnymq._take_head_lock(v_keys[v_i]);
            IF v_counts[v_i] > 0 OR NOT v_raises[v_i] THEN
                v_seqs[v_i] := pg_catalog.nextval('lonnymq.turn_seq');
            END IF;
        END LOOP;
    END LOOP;
    -- Every row by its key. A served channel's turn is now; one that gave
    -- nothing keeps its last turn when its head rises, or takes an empty
    -- turn, which only ever makes its next real one later.
    UPDATE lonnymq.channel c
    SET locked_count = c.locked_count
            + CASE WHEN lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size) THEN t.n ELSE 0 END,
        last_turn_ms = CASE WHEN t.n > 0 THEN p_now_ms
                            WHEN t.seq IS NULL THEN c.last_turn_ms
                            ELSE greatest(c.last_turn_ms, p_now_ms) END,
        turn_seq = coalesce(t.seq, c.turn_seq),
        head_ms = CASE WHEN t.raise THEN h.dequeue_ms ELSE c.head_ms END,
        ready_ms = lonnymq._ready_ms(
            CASE WHEN t.raise THEN h.dequeue_ms ELSE c.head_ms END,
            CASE WHEN t.n > 0 THEN p_now_ms
                 WHEN t.seq IS NULL THEN c.last_turn_ms
                 ELSE greatest(c.last_turn_ms, p_now_ms) END,
            c.release_interval_ms,
            c.locked_count + CASE WHEN lonnymq._accounted(c.max_concurrency, c.release_interval_ms, c.max_size)
                                  THEN t.n ELSE 0 END,
            c.max_concurrency, coalesce(t.seq, c.turn_seq))
    FROM ROWS FROM (pg_catalog.unnest(v_channels), pg_catalog.unnest(v_counts), pg_catalog.unnest(v_raises),
                    pg_catalog.unnest(v_seqs)) AS t(id, n, raise, seq)
    LEFT JOIN LATERAL (SELECT m.dequeue_ms FROM lonnymq.message m
                       WHERE t.raise AND m.queue_id = p_queue.id AND m.channel_id = t.id
                         AND m.locked_until_ms IS NULL
                       ORDER BY m.dequeue_ms, m.id
                       LIMIT 1) h ON true
    WHERE c.id = t.id;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_round(lonnymq.queue, bigint, bigint, integer, bigint, bigint[], bigint[],
                                           boolean, bigint[])
    IS 'Dequeue step: a round of the fairest free (or held) channels: picked, claimed, turns recorded.';

-- Dequeues up to max_messages messages, locking each for lock_ms: hints
-- folded in, expired locks redelivered, then rounds of the fairest channels
-- (see the top of this file).
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
    v_busy bigint[] := '{}';     -- channels with due hints another transaction holds
    v_ids bigint[] := '{}';      -- claimed, in delivery order
    v_recovered integer;         -- how many of them (the first) are redeliveries
    v_channelless_ms bigint;     -- the channel-less messages' key; NULL: none ready
    v_ready boolean;             -- whether any channel may have something ready
    v_held boolean := false;     -- the next round is of held channels
    v_tried bigint[] := '{}';    -- channels taken without success: passed over
    v_served bigint[] := '{}';   -- channels this call served (it holds their rows)
    v_only bigint[];             -- after a short round: only those
    v_want integer;
    v_round record;
    v_turn_seq bigint;
    v_taken bigint[];
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
    -- The queue, and what there is to serve; each probe is one step of an
    -- ordered index, bounded by now (earliest first).
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
    -- Nothing to redeliver and nothing ready: an idle queue costs one statement.
    IF NOT coalesce(v_probe.expired OR v_probe.hinted OR v_probe.channels_ready
                    OR v_probe.channelless_ms IS NOT NULL, false) THEN
        RETURN;
    END IF;
    v_queue := v_probe.queue;
    IF v_probe.hinted THEN
        v_busy := lonnymq._absorb_hints(v_queue.id, v_now_ms, message_dequeue.max_messages + 2);
    END IF;
    IF v_probe.expired THEN
        v_ids := lonnymq._dequeue_expired(v_queue, v_now_ms, message_dequeue.lock_ms, message_dequeue.max_messages);
    END IF;
    v_recovered := pg_catalog.cardinality(v_ids);
    -- queue_pause: no fresh delivery. (Expired locks above are work handed
    -- out before the pause, redelivered as for a paused channel.)
    IF NOT v_queue.paused AND v_recovered < message_dequeue.max_messages THEN
        v_channelless_ms := v_probe.channelless_ms;
        -- What the probe saw, unless folding hints in (which may leave busy
        -- channels for a held round) or a dead-lettered expired delivery
        -- changed it: then a round looks.
        v_ready := v_probe.channels_ready OR v_probe.hinted OR v_probe.expired;
        -- With no channel ready, the channel-less messages are all there is:
        -- as many as wanted, in one statement.
        IF v_channelless_ms IS NOT NULL AND NOT v_ready THEN
            v_ids := v_ids || lonnymq._dequeue_channelless(v_queue, v_now_ms, message_dequeue.lock_ms,
                                                           message_dequeue.max_messages - v_recovered, NULL);
        END IF;
        WHILE v_ready AND pg_catalog.cardinality(v_ids) < message_dequeue.max_messages LOOP
            v_want := message_dequeue.max_messages - pg_catalog.cardinality(v_ids);
            v_round := lonnymq._dequeue_round(v_queue, v_now_ms, message_dequeue.lock_ms, v_want, v_channelless_ms,
                                              v_tried, v_only, v_held, v_busy);
            v_ids := v_ids || v_round.ids;
            v_tried := v_tried || v_round.tried;
            v_served := v_served || v_round.served;
            IF v_round.locked > 0 THEN
                -- A free round that locked fewer channels than it wanted, and
                -- not because of the channel-less turn: every other ready
                -- channel is held by someone else. Later rounds look only at
                -- the channels this call holds. (A round that locked as many
                -- as it wanted says nothing about the others.)
                IF NOT v_held AND v_round.locked < v_want AND v_channelless_ms IS NULL THEN
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
            -- The channel-less messages' turn, against the channels: one
            -- message and its turn recorded, so every ready channel comes
            -- before it again.
            v_turn_seq := pg_catalog.nextval('lonnymq.turn_seq');
            v_taken := lonnymq._dequeue_channelless(v_queue, v_now_ms, message_dequeue.lock_ms, v_want, v_turn_seq);
            v_ids := v_ids || v_taken;
            IF pg_catalog.cardinality(v_taken) = 0 THEN
                v_channelless_ms := NULL;  -- none left: the channel-less part is done
            ELSE
                v_channelless_ms := v_now_ms;
                v_queue.channelless_turn_seq := v_turn_seq;
            END IF;
        END LOOP;
    END IF;

    -- The deliveries, in the order they were claimed (one plan for every
    -- count: see plan_cache_mode above). Each row and its channel's name
    -- looked up by key: as a join, a plan made while the table looked empty
    -- read the whole table once per call (the LIMIT keeps the subquery from
    -- being flattened into one).
    RETURN QUERY
    SELECT m.id, (SELECT c.name FROM lonnymq.channel c WHERE c.id = m.channel_id), m.content, m.state,
           m.num_attempts, lonnymq._dequeue_at(m.dequeue_ms, m.priority), o.n <= v_recovered
    FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS o(id, n)
    CROSS JOIN LATERAL (SELECT d.* FROM lonnymq.message d WHERE d.id = o.id LIMIT 1) m
    ORDER BY o.n;
END
$$;
COMMENT ON FUNCTION lonnymq.message_dequeue(text, bigint, integer)
    IS 'Locks and returns up to max_messages ready messages, fairly across channels.';
