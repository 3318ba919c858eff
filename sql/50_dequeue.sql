-- ===========================================================================
-- Dequeue, model A (issue 37): fairness stamped on each message.
--
-- A ready message carries a stamp, vt: its channel's place in a start-time
-- fair queue. A message becomes ready with max(V, its channel's latest
-- stamp + 1), V being the smallest stamp ready in the queue (0 when none):
-- with every channel backlogged, each has one message per stamp, so claiming
-- in (vt, id) order is round-robin. A dequeue is then:
--   1. the probe: the queue (not paused) and whether anything scheduled is due;
--   2. only then, the due messages stamped (lazy stamping, _stamp_due);
--   3. one claim: expired locks first, then the smallest stamps, n at once
--      (n = 1 for a single dequeue: a batch is the same statement).
-- Rare cases follow the claim, row by row: a limited channel's next head
-- (_gate_next), a delivery out of attempts (dead-lettered), a message that
-- a priority or back-dated one must go before (_swap_jump).
-- Limited channels (max_concurrency, release_interval_ms) keep their
-- messages parked and stamp only as many heads as they have free slots (one
-- at a time under a rate limit, due when it may go), under their row lock
-- (_designate): a head claimed is a slot already counted.
-- ===========================================================================

-- The dequeue_at a delivery reports: priority messages show their creation
-- time (their dequeue_ms is offset by priority steps, see 40_create.sql).
CREATE OR REPLACE FUNCTION lonnymq._dequeue_at(p_dequeue_ms bigint, p_priority integer) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT 'epoch'::timestamptz + (p_dequeue_ms + p_priority::bigint * 281474976710656) * '1 millisecond'::interval
$$;
COMMENT ON FUNCTION lonnymq._dequeue_at(bigint, integer) IS 'The dequeue_at shown for a message.';

-- V, the queue's virtual time: the smallest stamp ready (0 when none is).
-- (PostgreSQL does not inline a function with a sub-select: the hot
-- statements write it out.)
CREATE OR REPLACE FUNCTION lonnymq._vt_now(p_queue_id integer) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT m.vt FROM lonnymq.message m
                     WHERE m.queue_id = p_queue_id AND m.vt IS NOT NULL
                     ORDER BY m.vt LIMIT 1), 0)
$$;
COMMENT ON FUNCTION lonnymq._vt_now(integer) IS 'The queue''s virtual time: its smallest ready stamp, or 0.';

-- Stamps due messages (scheduled, deferred, rate-limited heads), earliest
-- first, at most 100 a call; or (p_ids) those of them just placed by _place: each gets max(V, its channel's latest stamp + 1), consecutive
-- within a channel in (dequeue_ms, id) order. One that goes before its
-- channel's latest stamped message in order (not itself a jump) is marked
-- jump: the claim that meets a later one delivers it first (_swap_jump).
CREATE OR REPLACE FUNCTION lonnymq._stamp_due(p_queue_id integer, p_now_ms bigint, p_ids bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    UPDATE lonnymq.message m
    SET vt = s.vt, due_ms = NULL, jump = s.jump
    FROM (SELECT d.id,
                 greatest(v.vt, coalesce(l.vt + 1, 0)) + coalesce((g.last_vt >= v.vt)::integer, 0)
                   + pg_catalog.row_number() OVER (PARTITION BY coalesce(d.channel_id, 0)
                                                   ORDER BY d.dequeue_ms, d.id) - 1 AS vt,
                 coalesce((d.dequeue_ms, d.id) < (o.dequeue_ms, o.id), false) AS jump
          FROM (SELECT * FROM (SELECT x.id, x.channel_id, x.dequeue_ms, x.gated FROM lonnymq.message x
                               WHERE p_ids IS NULL AND x.queue_id = p_queue_id AND x.due_ms <= p_now_ms
                               ORDER BY x.due_ms, x.id LIMIT 100
                               FOR UPDATE SKIP LOCKED) a
                UNION ALL
                SELECT * FROM (SELECT x.id, x.channel_id, x.dequeue_ms, x.gated FROM lonnymq.message x
                               WHERE p_ids IS NOT NULL AND x.id = ANY (p_ids) AND (x.due_ms <= p_now_ms) IS TRUE  -- (by id)
                               FOR UPDATE) b) d
          CROSS JOIN (SELECT coalesce((SELECT y.vt FROM lonnymq.message y  -- V (see _vt_now)
                                       WHERE y.queue_id = p_queue_id AND y.vt IS NOT NULL
                                       ORDER BY y.vt LIMIT 1), 0) AS vt) v
          -- (A limited channel's head is its only stamped message.)
          LEFT JOIN LATERAL (SELECT y.vt FROM lonnymq.message y
                             WHERE y.queue_id = p_queue_id AND coalesce(y.channel_id, 0) = coalesce(d.channel_id, 0)
                               AND y.vt IS NOT NULL
                             ORDER BY y.vt DESC LIMIT 1) l ON NOT d.gated
          LEFT JOIN LATERAL (SELECT y.dequeue_ms, y.id FROM lonnymq.message y
                             WHERE y.queue_id = p_queue_id AND coalesce(y.channel_id, 0) = coalesce(d.channel_id, 0)
                               AND y.vt IS NOT NULL AND NOT y.jump
                             ORDER BY y.vt DESC LIMIT 1) o ON NOT d.gated
          -- (A limited head: one level after its channel's last turn, see _designate.)
          LEFT JOIN LATERAL (SELECT c.last_vt FROM lonnymq.channel c WHERE c.id = d.channel_id) g ON d.gated) s
    WHERE m.id = s.id;
END
$$;
COMMENT ON FUNCTION lonnymq._stamp_due(integer, bigint, bigint[]) IS 'Stamps due messages (lazy stamping).';

-- Designates a limited channel's heads: its first parked messages, as many
-- as it has free slots (one at a time under a rate limit, due when the rate
-- lets it go), so that locked + heads never exceeds max_concurrency. Each is
-- stamped as an unlimited channel's backlog would be, its first one level
-- after the channel's last turn if that was at the current level. With
-- p_reconsider (a producer just added a message that may go first), heads
-- not in flight are parked again first. The caller holds the channel row
-- (FOR NO KEY UPDATE).
CREATE OR REPLACE FUNCTION lonnymq._designate(p_channel lonnymq.channel, p_now_ms bigint, p_reconsider boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_head record;
    v_heads integer;
    v_last bigint;
    v_v bigint;
    v_due_ms bigint;
BEGIN
    IF p_channel.paused THEN
        RETURN;
    END IF;
    IF p_reconsider THEN
        -- Only heads that a parked message goes before are parked again
        -- (SKIP LOCKED: a head being claimed is left to its claimer); a
        -- message appended at the back touches no head.
        UPDATE lonnymq.message m SET vt = NULL, due_ms = NULL, gated = false
        WHERE m.id = ANY (ARRAY(
            SELECT h.id FROM lonnymq.message h
            WHERE h.channel_id = p_channel.id AND h.gated AND h.locked_until_ms IS NULL
              AND (h.dequeue_ms, h.id) > (SELECT p.dequeue_ms, p.id FROM lonnymq.message p
                                          WHERE p.channel_id = p_channel.id AND p.vt IS NULL AND p.due_ms IS NULL
                                            AND p.locked_until_ms IS NULL
                                          ORDER BY p.dequeue_ms, p.id LIMIT 1)
            FOR UPDATE SKIP LOCKED));
    END IF;
    LOOP
        SELECT pg_catalog.count(*), pg_catalog.max(h.vt) INTO v_heads, v_last FROM lonnymq.message h
        WHERE h.channel_id = p_channel.id AND h.gated AND h.locked_until_ms IS NULL;
        EXIT WHEN p_channel.locked_count + v_heads >= coalesce(p_channel.max_concurrency, 2147483647)
               OR (p_channel.release_interval_ms > 0 AND v_heads > 0);
        SELECT p.id, p.dequeue_ms INTO v_head FROM lonnymq.message p
        WHERE p.channel_id = p_channel.id AND p.vt IS NULL AND p.due_ms IS NULL AND p.locked_until_ms IS NULL
        ORDER BY p.dequeue_ms, p.id LIMIT 1
        FOR UPDATE SKIP LOCKED;
        EXIT WHEN v_head.id IS NULL;
        v_due_ms := greatest(v_head.dequeue_ms,
                             CASE WHEN p_channel.turn_seq > 0
                                  THEN p_channel.last_turn_ms + p_channel.release_interval_ms END);
        v_v := lonnymq._vt_now(p_channel.queue_id);
        UPDATE lonnymq.message m
        SET gated = true,
            vt = CASE WHEN v_due_ms <= p_now_ms
                      THEN greatest(v_v + coalesce((p_channel.last_vt >= v_v)::integer, 0), v_last + 1) END,
            due_ms = CASE WHEN v_due_ms > p_now_ms THEN v_due_ms END
        WHERE m.id = v_head.id;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq._designate(lonnymq.channel, bigint, boolean)
    IS 'Stamps (or schedules) a limited channel''s heads, as many as its free slots and rate allow.';

-- After limited channels' heads were claimed (p_channels, one entry per
-- head, all claimed by the same statement): each slot counted and turn
-- recorded, then each channel's next heads designated, only once every head
-- of the statement is counted (a head counted later would let the first
-- designation exceed max_concurrency). Waits for the channel rows: producers
-- and settlers of a limited channel hold them briefly (an exact limit needs it).
CREATE OR REPLACE FUNCTION lonnymq._gate_next(p_channels bigint[], p_vts bigint[], p_now_ms bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_channel lonnymq.channel;
BEGIN
    UPDATE lonnymq.channel c
    SET locked_count = c.locked_count + k.n, last_turn_ms = p_now_ms, turn_seq = c.turn_seq + 1, last_vt = k.vt
    FROM (SELECT u.channel_id, pg_catalog.count(*) AS n, pg_catalog.max(u.vt) AS vt
          FROM ROWS FROM (pg_catalog.unnest(p_channels), pg_catalog.unnest(p_vts)) AS u(channel_id, vt)
          GROUP BY u.channel_id) k
    WHERE c.id = k.channel_id;
    -- (A channel_set may have lifted its limits meanwhile: no heads then.)
    FOR v_channel IN
        SELECT c.* FROM lonnymq.channel c WHERE c.id = ANY (p_channels) ORDER BY c.id
    LOOP
        IF lonnymq._gated(v_channel.max_concurrency, v_channel.release_interval_ms) THEN
            PERFORM lonnymq._designate(v_channel, p_now_ms, false);
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq._gate_next(bigint[], bigint[], bigint)
    IS 'Counts limited channels'' claimed heads, then designates their next heads.';

-- A claimed message whose channel has a stamped message that goes before it
-- (priority, back-dated): that one is delivered instead and takes over the
-- claimed one's stamp, the claimed one keeping the later stamp (marked jump:
-- it goes before the messages stamped between). The channel keeps its
-- stamps, so it gets no extra turn. Returns the id delivered.
CREATE OR REPLACE FUNCTION lonnymq._swap_jump(p_id bigint, p_vt bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claimed lonnymq.message;
    v_jump record;
BEGIN
    SELECT m.* INTO v_claimed FROM lonnymq.message m WHERE m.id = p_id;
    SELECT j.id, j.vt INTO v_jump FROM lonnymq.message j
    WHERE j.jump AND j.vt IS NOT NULL AND j.queue_id = v_claimed.queue_id
      AND coalesce(j.channel_id, 0) = coalesce(v_claimed.channel_id, 0)
      AND (j.dequeue_ms, j.id) < (v_claimed.dequeue_ms, v_claimed.id)
    ORDER BY j.dequeue_ms, j.id LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_jump.id IS NULL THEN
        RETURN p_id;
    END IF;
    UPDATE lonnymq.message m
    SET vt = v_jump.vt, jump = true, locked_until_ms = NULL, num_attempts = m.num_attempts - 1
    WHERE m.id = p_id;
    UPDATE lonnymq.message m
    SET vt = NULL, jump = false, locked_until_ms = v_claimed.locked_until_ms, num_attempts = m.num_attempts + 1
    WHERE m.id = v_jump.id;
    RETURN v_jump.id;
END
$$;
COMMENT ON FUNCTION lonnymq._swap_jump(bigint, bigint) IS 'Delivers a jumping message in place of a claimed one, swapping stamps.';

-- Locks and returns up to max_messages messages: expired locks first, then
-- the smallest stamps. A batch of n is the statements of a single dequeue
-- with n for 1; the claim runs again only when a rare case (a limited
-- channel's next head, a dead-letter) may have left more to take.
CREATE OR REPLACE FUNCTION lonnymq.message_dequeue(queue text, lock_ms bigint, max_messages integer DEFAULT 1)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now_ms bigint := lonnymq._now_ms();
    v_queue_id integer;
    v_due boolean := false;
    v_probed boolean := false;
    v_pass integer;
    v_got integer := 0;
    v_again boolean;
    v_row record;
    v_id bigint;
    v_dead lonnymq.message;
    v_swap boolean := false;
    v_gated bigint[] := '{}';
    v_dead_ids bigint[] := '{}';
    v_dead_max integer[] := '{}';
    v_i integer;
    v_gated_vt bigint[] := '{}';
    v_max_attempts integer;
BEGIN
    IF message_dequeue.queue IS NULL OR pg_catalog.length(message_dequeue.queue) NOT BETWEEN 1 AND 256
       OR message_dequeue.lock_ms IS NULL OR message_dequeue.lock_ms NOT BETWEEN 1 AND 31557600000000
       OR message_dequeue.max_messages IS NULL OR message_dequeue.max_messages NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq._check_name(message_dequeue.queue, 'queue', false);
        IF message_dequeue.lock_ms IS NULL OR message_dequeue.lock_ms NOT BETWEEN 1 AND 31557600000000 THEN
            PERFORM lonnymq._invalid('lock_ms must be between 1 and 1000 years');
        END IF;
        PERFORM lonnymq._invalid('max_messages must be between 1 and 10000');
    END IF;
    LOOP
        v_again := false;
        v_pass := 0;
        -- The claim: expired locks (earliest expiry), then the smallest
        -- stamps, each arm an ordered index scan with SKIP LOCKED; the
        -- second runs only if the first leaves room.
        FOR v_row IN
            WITH queue AS (
                SELECT q.id FROM lonnymq.queue q WHERE q.name = message_dequeue.queue AND NOT q.paused
            ), pick AS (
                SELECT e.id, true AS recovered, NULL::bigint AS vt, false AS gated
                FROM (SELECT x.id FROM lonnymq.message x
                      WHERE x.queue_id = (SELECT q.id FROM queue q) AND x.locked_until_ms <= v_now_ms
                      ORDER BY x.locked_until_ms, x.id LIMIT message_dequeue.max_messages - v_got
                      FOR UPDATE SKIP LOCKED) e
                UNION ALL
                SELECT r.id, false, r.vt, r.gated
                FROM (SELECT x.id, x.vt, x.gated FROM lonnymq.message x
                      WHERE x.queue_id = (SELECT q.id FROM queue q) AND x.vt IS NOT NULL
                      ORDER BY x.vt, x.id LIMIT message_dequeue.max_messages - v_got
                      FOR UPDATE SKIP LOCKED) r
                LIMIT message_dequeue.max_messages - v_got
            ), claimed AS (
                UPDATE lonnymq.message m
                SET locked_until_ms = v_now_ms + message_dequeue.lock_ms,
                    num_attempts = m.num_attempts + 1, vt = NULL, gated = false
                FROM pick p
                WHERE m.id = p.id
                RETURNING m.id, m.channel_id, m.content, m.state, m.num_attempts, m.dequeue_ms, m.priority,
                          (SELECT c.name FROM lonnymq.channel c WHERE c.id = m.channel_id) AS channel_name,
                          p.recovered, p.vt, p.gated,
                          CASE WHEN m.num_attempts > 1 AND m.channel_id IS NOT NULL
                               THEN (SELECT c.max_attempts FROM lonnymq.channel c WHERE c.id = m.channel_id)
                          END AS max_attempts,
                          NOT p.recovered AND EXISTS (
                              SELECT 1 FROM lonnymq.message j
                              WHERE j.jump AND j.vt IS NOT NULL AND j.queue_id = m.queue_id
                                AND coalesce(j.channel_id, 0) = coalesce(m.channel_id, 0)
                                AND (j.dequeue_ms, j.id) < (m.dequeue_ms, m.id)) AS jumped
            )
            -- A channel's claimed stamps go to its claimed messages in
            -- channel order, (dequeue_ms, id): in a batch, a jump claimed
            -- with later stamps is delivered in its place.
            , ranked AS (
                SELECT k.*,
                       pg_catalog.row_number() OVER (PARTITION BY k.recovered, coalesce(k.channel_id, 0)
                                                     ORDER BY k.vt, k.id) AS slot,
                       pg_catalog.row_number() OVER (PARTITION BY k.recovered, coalesce(k.channel_id, 0)
                                                     ORDER BY k.dequeue_ms, k.id) AS place
                FROM claimed k
            )
            SELECT b.id, b.channel_id, b.content, b.state, b.num_attempts, b.dequeue_ms, b.priority,
                   b.channel_name, a.recovered, a.vt, b.gated, b.max_attempts, b.jumped,
                   -- Whether messages are due to be stamped (scheduled, deferred,
                   -- rate-limited heads): stamped after this claim, for the next.
                   (SELECT true FROM lonnymq.message d
                    WHERE d.queue_id = (SELECT q.id FROM queue q) AND d.due_ms <= v_now_ms LIMIT 1) AS due,
                   (SELECT q.id FROM queue q) AS queue_id
            FROM ranked a
            JOIN ranked b ON b.recovered = a.recovered AND coalesce(b.channel_id, 0) = coalesce(a.channel_id, 0)
                         AND b.place = a.slot
            ORDER BY a.recovered DESC, a.vt, a.id
        LOOP
            v_pass := v_pass + 1;
            v_queue_id := v_row.queue_id;
            IF v_row.due AND NOT v_probed THEN
                -- Due messages are stamped before any delivery: one may go
                -- before a claimed message in its channel (the swap below).
                PERFORM lonnymq._stamp_due(v_queue_id, v_now_ms, NULL);
                v_probed := true;
                v_swap := true;
            END IF;
            IF v_row.gated THEN
                -- (Counted below, once the whole statement's heads are known.)
                v_gated := v_gated || v_row.channel_id;
                v_gated_vt := v_gated_vt || v_row.vt;
            END IF;
            v_id := v_row.id;
            IF (v_row.jumped OR v_swap) AND NOT v_row.recovered AND NOT v_row.gated THEN
                v_id := lonnymq._swap_jump(v_row.id, v_row.vt);
            END IF;
            IF v_id = v_row.id THEN
                id := v_row.id;
                channel := v_row.channel_name;
                content := v_row.content;
                state := v_row.state;
                num_attempts := v_row.num_attempts;
                dequeue_at := lonnymq._dequeue_at(v_row.dequeue_ms, v_row.priority);
                v_max_attempts := v_row.max_attempts;
            ELSE
                SELECT m.id, c.name, m.content, m.state, m.num_attempts,
                       lonnymq._dequeue_at(m.dequeue_ms, m.priority), c.max_attempts
                INTO id, channel, content, state, num_attempts, dequeue_at, v_max_attempts
                FROM lonnymq.message m LEFT JOIN lonnymq.channel c ON c.id = m.channel_id WHERE m.id = v_id;
            END IF;
            IF num_attempts > v_max_attempts THEN
                -- Dead-lettered below, once the statement's heads are counted.
                v_dead_ids := v_dead_ids || v_id;
                v_dead_max := v_dead_max || v_max_attempts;
                CONTINUE;
            END IF;
            recovered := v_row.recovered;
            v_got := v_got + 1;
            RETURN NEXT;
        END LOOP;
        IF pg_catalog.cardinality(v_gated) > 0 THEN
            PERFORM lonnymq._gate_next(v_gated, v_gated_vt, v_now_ms);
            v_gated := '{}';
            v_gated_vt := '{}';
            v_again := true;
        END IF;
        FOR v_i IN 1 .. pg_catalog.cardinality(v_dead_ids) LOOP
            SELECT m.* INTO v_dead FROM lonnymq.message m WHERE m.id = v_dead_ids[v_i];
            v_dead.num_attempts := v_dead.num_attempts - 1;  -- the attempts it had
            PERFORM lonnymq._settle_locked(v_dead, 'dead',
                pg_catalog.format('out of attempts after attempt %s of %s', v_dead.num_attempts, v_dead_max[v_i]));
            PERFORM lonnymq._notify('lonnymq_dead', message_dequeue.queue, 'dead');
            v_again := true;
        END LOOP;
        v_dead_ids := '{}';
        v_dead_max := '{}';
        -- Due messages were stamped during this pass: they may be next.
        v_again := v_again OR (v_swap AND v_pass > 0);
        -- Nothing claimed: the probe (the queue, unless paused, and whether
        -- anything is due), and a second pass when something was stamped.
        IF v_pass = 0 AND NOT v_probed THEN
            v_probed := true;
            SELECT q.id, EXISTS (SELECT 1 FROM lonnymq.message d
                                 WHERE d.queue_id = q.id AND d.due_ms <= v_now_ms)
            INTO v_queue_id, v_due
            FROM lonnymq.queue q WHERE q.name = message_dequeue.queue AND NOT q.paused;
            IF v_due THEN
                PERFORM lonnymq._stamp_due(v_queue_id, v_now_ms, NULL);
                v_due := false;
                v_again := true;
            END IF;
        END IF;
        EXIT WHEN NOT v_again OR v_got >= message_dequeue.max_messages;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq.message_dequeue(text, bigint, integer)
    IS 'Locks and returns up to max_messages ready messages, fairly across channels.';
