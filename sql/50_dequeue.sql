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
