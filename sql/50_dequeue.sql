-- ===========================================================================
-- Dequeue (model B prototype): each channel has one narrow scheduler row,
-- lonnymq.channel_turn, that points at its head (a lower bound of its
-- earliest unlocked message) and carries its fairness key (ready_ms,
-- turn_seq). A dequeue is a loop of rounds; a round is two statements
-- whatever its size:
--   pick     the queue row, and the fairest ready channels, up to the number
--            still wanted, FOR NO KEY UPDATE SKIP LOCKED from
--            channel_turn_ready_idx, each upgraded to FOR UPDATE where that
--            is free (a "raise": no producer or defer pins the row FOR KEY
--            SHARE, so none is in flight on the channel until commit);
--   claim    each picked channel's first unlocked due message at or after
--   +advance its head (one bounded probe each), and every picked channel's
--            key: a turn if served, its slot counted, and, where raised, its
--            head read afresh (this statement's snapshot follows the lock).
-- A batch of n is the same loop with n where a single dequeue has 1; a
-- second round runs only when the first gave fewer than n.
-- Channel-less messages compete as one more channel keyed on the queue row;
-- expired locks come first (_dequeue_expired, only when the pick saw one).
-- ===========================================================================

-- The dequeue_at a delivery reports: priority messages show their creation
-- time (their dequeue_ms is offset by priority steps, see 40_create.sql).
CREATE OR REPLACE FUNCTION lonnymq._dequeue_at(p_dequeue_ms bigint, p_priority integer) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT 'epoch'::timestamptz + (p_dequeue_ms + p_priority::bigint * 281474976710656) * '1 millisecond'::interval
$$;
COMMENT ON FUNCTION lonnymq._dequeue_at(bigint, integer) IS 'The dequeue_at shown for a message.';

-- Redelivers up to p_want messages whose lock expired, earliest expiry first;
-- one out of attempts is dead-lettered instead. The slot stays counted.
-- Rare: runs only when the probe saw an expired lock.
CREATE OR REPLACE FUNCTION lonnymq._dequeue_expired(p_queue_id integer, p_now_ms bigint, p_lock_ms bigint,
                                                    p_want integer)
RETURNS SETOF lonnymq.message
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_message lonnymq.message;
    v_max_attempts integer;
    v_got integer := 0;
BEGIN
    FOR v_message IN
        SELECT m.* FROM lonnymq.message m
        WHERE m.queue_id = p_queue_id AND m.locked_until_ms <= p_now_ms
        ORDER BY m.locked_until_ms, m.id
        LIMIT p_want * 2 + 10
        FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN v_got >= p_want;
        SELECT c.max_attempts INTO v_max_attempts FROM lonnymq.channel c WHERE c.id = v_message.channel_id;
        IF v_message.num_attempts >= v_max_attempts THEN
            PERFORM lonnymq._settle_locked(v_message, 'dead', 'max_attempts exceeded');
            CONTINUE;
        END IF;
        UPDATE lonnymq.message m
        SET locked_until_ms = p_now_ms + p_lock_ms, num_attempts = m.num_attempts + 1
        WHERE m.id = v_message.id
        RETURNING m.* INTO v_message;
        v_got := v_got + 1;
        RETURN NEXT v_message;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq._dequeue_expired(integer, bigint, bigint, integer)
    IS 'Redelivers messages whose lock expired (dead-letters those out of attempts).';

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
    v_until_ms bigint;
    v_want integer := message_dequeue.max_messages;
    v_round record;
    v_tried bigint[] := '{}';      -- channels picked that gave nothing: not picked again in this call
    v_first boolean := true;
    v_got integer;
    v_message lonnymq.message;
    v_dead bigint[];
    v_i integer;
    -- the deliveries so far, in order
    d_ids bigint[] := '{}';
    d_channels text[] := '{}';
    d_contents bytea[] := '{}';
    d_states bytea[] := '{}';
    d_attempts bigint[] := '{}';
    d_ats timestamptz[] := '{}';
    d_recovered integer := 0;
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
    v_until_ms := v_now_ms + message_dequeue.lock_ms;

    LOOP
        -- Pick: the queue row, whether a lock expired (first round only),
        -- the channel-less key (greatest of their first due message and
        -- their last turn), and the fairest ready channels no one else
        -- holds, each upgraded to FOR UPDATE where free (raise).
        SELECT q.id AS queue_id, q.paused, q.channelless_turn_seq,
               -- (Ordered, so that the plan walks message_locked_idx from
               -- the earliest expiry and stops at the first: unordered, a
               -- generic plan filtered every locked message.)
               v_first AND (SELECT m.locked_until_ms FROM lonnymq.message m
                            WHERE m.queue_id = q.id AND m.locked_until_ms <= v_now_ms
                            ORDER BY m.locked_until_ms LIMIT 1) IS NOT NULL AS expired,
               (SELECT greatest(m.dequeue_ms, q.channelless_turn_ms) FROM lonnymq.message m
                WHERE m.queue_id = q.id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
                  AND m.dequeue_ms <= v_now_ms
                ORDER BY m.dequeue_ms, m.id LIMIT 1) AS channelless_ms,
               coalesce(p.ids, '{}') AS ids, p.heads_ms, p.heads_id, p.raise, p.keys, p.seqs
        INTO v_round
        FROM lonnymq.queue q
        LEFT JOIN LATERAL (
            SELECT pg_catalog.array_agg(t.channel_id ORDER BY t.ready_ms, t.turn_seq) AS ids,
                   pg_catalog.array_agg(t.head_ms ORDER BY t.ready_ms, t.turn_seq) AS heads_ms,
                   pg_catalog.array_agg(t.head_id ORDER BY t.ready_ms, t.turn_seq) AS heads_id,
                   pg_catalog.array_agg(t.raise ORDER BY t.ready_ms, t.turn_seq) AS raise,
                   pg_catalog.array_agg(t.ready_ms ORDER BY t.ready_ms, t.turn_seq) AS keys,
                   pg_catalog.array_agg(t.turn_seq ORDER BY t.ready_ms, t.turn_seq) AS seqs
            FROM (SELECT t.*, (SELECT r.channel_id FROM lonnymq.channel_turn r WHERE r.channel_id = t.channel_id
                               FOR UPDATE SKIP LOCKED) IS NOT NULL AS raise
                  FROM (SELECT t.channel_id, t.head_ms, t.head_id, t.ready_ms, t.turn_seq
                        FROM lonnymq.channel_turn t
                        WHERE t.queue_id = q.id AND t.ready_ms <= v_now_ms
                          AND t.channel_id <> ALL (v_tried)
                        ORDER BY t.ready_ms, t.turn_seq
                        LIMIT v_want
                        FOR NO KEY UPDATE SKIP LOCKED) t) t
        ) p ON NOT q.paused
        WHERE q.name = message_dequeue.queue;
        EXIT WHEN NOT FOUND OR v_round.paused;

        IF v_round.expired THEN
            -- Expired locks before fresh work; the channels picked beyond
            -- what is still wanted are left untouched (released at commit).
            FOR v_message IN SELECT * FROM lonnymq._dequeue_expired(v_round.queue_id, v_now_ms,
                                                                     message_dequeue.lock_ms, v_want) LOOP
                d_ids := d_ids || v_message.id;
                d_channels := d_channels || (SELECT c.name FROM lonnymq.channel c WHERE c.id = v_message.channel_id);
                d_contents := d_contents || v_message.content;
                d_states := d_states || v_message.state;
                d_attempts := d_attempts || v_message.num_attempts;
                d_ats := d_ats || lonnymq._dequeue_at(v_message.dequeue_ms, v_message.priority);
            END LOOP;
            d_recovered := pg_catalog.cardinality(d_ids);
            v_want := v_want - d_recovered;
            EXIT WHEN v_want <= 0;
            v_round.ids := v_round.ids[1:v_want];
            v_round.heads_ms := v_round.heads_ms[1:v_want];
            v_round.heads_id := v_round.heads_id[1:v_want];
            v_round.raise := v_round.raise[1:v_want];
        END IF;
        v_first := false;

        -- Channel-less messages take their turn when their key comes first
        -- (as many as wanted when no channel is ready). No shared row is
        -- waited for: the queue row's turn is recorded only if it is free.
        IF v_round.channelless_ms IS NOT NULL
           AND (pg_catalog.cardinality(v_round.ids) = 0
                OR (v_round.channelless_ms, v_round.channelless_turn_seq) <= (v_round.keys[1], v_round.seqs[1])) THEN
            WITH claimed AS (
                UPDATE lonnymq.message m
                SET locked_until_ms = v_until_ms, num_attempts = m.num_attempts + 1
                WHERE m.id = ANY (ARRAY(
                    SELECT f.id FROM lonnymq.message f
                    WHERE f.queue_id = v_round.queue_id AND f.channel_id IS NULL AND f.locked_until_ms IS NULL
                      AND f.dequeue_ms <= v_now_ms
                    ORDER BY f.dequeue_ms, f.id
                    LIMIT CASE WHEN pg_catalog.cardinality(v_round.ids) = 0 THEN v_want ELSE 1 END
                    FOR UPDATE SKIP LOCKED))
                RETURNING m.*
            ), turned AS (
                UPDATE lonnymq.queue q
                SET channelless_turn_ms = v_now_ms, channelless_turn_seq = pg_catalog.nextval('lonnymq.turn_seq')
                WHERE q.ctid = (SELECT x.ctid FROM lonnymq.queue x WHERE x.id = v_round.queue_id
                                FOR NO KEY UPDATE SKIP LOCKED)
                  AND EXISTS (SELECT 1 FROM claimed)
            )
            SELECT d_ids || coalesce(pg_catalog.array_agg(k.id ORDER BY k.dequeue_ms, k.id), '{}'),
                   d_channels || coalesce(pg_catalog.array_agg(NULL::text), '{}'),
                   d_contents || coalesce(pg_catalog.array_agg(k.content ORDER BY k.dequeue_ms, k.id), '{}'),
                   d_states || coalesce(pg_catalog.array_agg(k.state ORDER BY k.dequeue_ms, k.id), '{}'),
                   d_attempts || coalesce(pg_catalog.array_agg(k.num_attempts ORDER BY k.dequeue_ms, k.id), '{}'),
                   d_ats || coalesce(pg_catalog.array_agg(lonnymq._dequeue_at(k.dequeue_ms, k.priority)
                                                          ORDER BY k.dequeue_ms, k.id), '{}'),
                   pg_catalog.count(*)
            INTO d_ids, d_channels, d_contents, d_states, d_attempts, d_ats, v_got
            FROM claimed k;
            v_want := v_want - v_got;
            EXIT WHEN pg_catalog.cardinality(v_round.ids) = 0 OR v_want <= 0;
        END IF;
        EXIT WHEN pg_catalog.cardinality(v_round.ids) = 0;

        -- Claim and advance, one statement: each channel's first due
        -- unlocked message at or after its head (a probe that starts at the
        -- head, past the entries of messages already handed out); then every
        -- picked channel's key. Served: a turn now, its slot counted. Raised
        -- (its scheduler row held FOR UPDATE since the pick, so this statement's
        -- snapshot shows every producer and settler of the channel): the head
        -- read afresh, the first unlocked message other than the one claimed,
        -- or NULL. Otherwise the head stays (a lower bound stays one), and a
        -- channel that gave nothing gets a turn now so that it is not picked
        -- again at once.
        WITH p AS (
            SELECT p.*, x.id AS claim_id
            FROM ROWS FROM (pg_catalog.unnest(v_round.ids), pg_catalog.unnest(v_round.heads_ms),
                            pg_catalog.unnest(v_round.heads_id), pg_catalog.unnest(v_round.raise))
                 WITH ORDINALITY AS p(channel_id, head_ms, head_id, raise, ord)
            LEFT JOIN LATERAL (
                SELECT x.id FROM lonnymq.message x
                WHERE x.queue_id = v_round.queue_id AND x.channel_id = p.channel_id
                  AND x.locked_until_ms IS NULL
                  AND (x.dequeue_ms, x.id) >= (p.head_ms, p.head_id) AND x.dequeue_ms <= v_now_ms
                ORDER BY x.dequeue_ms, x.id
                LIMIT 1
                FOR UPDATE SKIP LOCKED) x ON true
        ), claimed AS (
            UPDATE lonnymq.message m
            SET locked_until_ms = v_until_ms, num_attempts = m.num_attempts + 1
            FROM p
            WHERE m.id = p.claim_id
            RETURNING p.ord, m.*
        ), turned AS (
            UPDATE lonnymq.channel_turn t
            SET head_ms = CASE WHEN u.raise THEN u.next_ms ELSE t.head_ms END,
                head_id = CASE WHEN u.raise THEN u.next_id ELSE t.head_id END,
                last_turn_ms = CASE WHEN u.turn THEN v_now_ms ELSE t.last_turn_ms END,
                turn_seq = CASE WHEN u.turn THEN u.seq ELSE t.turn_seq END,
                locked_count = t.locked_count + (u.served AND t.max_concurrency IS NOT NULL)::integer,
                ready_ms = lonnymq._turn_ready_ms(
                    CASE WHEN u.raise THEN u.next_ms ELSE t.head_ms END,
                    CASE WHEN u.turn THEN v_now_ms ELSE t.last_turn_ms END,
                    t.release_interval_ms,
                    t.locked_count + (u.served AND t.max_concurrency IS NOT NULL)::integer,
                    t.max_concurrency,
                    CASE WHEN u.turn THEN u.seq ELSE t.turn_seq END, t.paused)
            FROM (SELECT p.channel_id, p.raise, n.dequeue_ms AS next_ms, n.id AS next_id, s.seq,
                         p.claim_id IS NOT NULL AS served,
                         p.claim_id IS NOT NULL OR NOT p.raise AS turn
                  FROM p
                  JOIN (SELECT g.g, pg_catalog.nextval('lonnymq.turn_seq') AS seq
                        FROM pg_catalog.generate_series(1, pg_catalog.cardinality(v_round.ids)) AS g(g)) s
                    ON s.g = p.ord
                  LEFT JOIN LATERAL (
                      SELECT x.dequeue_ms, x.id FROM lonnymq.message x
                      WHERE p.raise AND x.queue_id = v_round.queue_id AND x.channel_id = p.channel_id
                        AND x.locked_until_ms IS NULL AND (x.dequeue_ms, x.id) >= (p.head_ms, p.head_id)
                        AND x.id IS DISTINCT FROM p.claim_id
                      ORDER BY x.dequeue_ms, x.id
                      LIMIT 1) n ON true) u
            WHERE t.channel_id = u.channel_id
        )
        -- (A message whose delivery would exceed its channel's max_attempts
        -- is claimed like any other and dead-lettered below instead.)
        SELECT d_ids || coalesce(pg_catalog.array_agg(k.id ORDER BY k.ord) FILTER (WHERE NOT k.dead), '{}'),
               d_channels || coalesce(pg_catalog.array_agg(k.name ORDER BY k.ord) FILTER (WHERE NOT k.dead), '{}'),
               d_contents || coalesce(pg_catalog.array_agg(k.content ORDER BY k.ord) FILTER (WHERE NOT k.dead), '{}'),
               d_states || coalesce(pg_catalog.array_agg(k.state ORDER BY k.ord) FILTER (WHERE NOT k.dead), '{}'),
               d_attempts || coalesce(pg_catalog.array_agg(k.num_attempts ORDER BY k.ord) FILTER (WHERE NOT k.dead), '{}'),
               d_ats || coalesce(pg_catalog.array_agg(lonnymq._dequeue_at(k.dequeue_ms, k.priority) ORDER BY k.ord)
                                 FILTER (WHERE NOT k.dead), '{}'),
               pg_catalog.count(*) FILTER (WHERE NOT k.dead),
               v_tried || coalesce((SELECT pg_catalog.array_agg(p.channel_id) FROM p WHERE p.claim_id IS NULL), '{}'),
               pg_catalog.array_agg(k.id) FILTER (WHERE k.dead)
        INTO d_ids, d_channels, d_contents, d_states, d_attempts, d_ats, v_got, v_tried, v_dead
        FROM (SELECT k.*, c.name, coalesce(k.num_attempts > c.max_attempts, false) AS dead
              FROM claimed k
              LEFT JOIN LATERAL (SELECT c.name, c.max_attempts FROM lonnymq.channel c
                                 WHERE c.id = k.channel_id LIMIT 1) c ON true) k;
        IF v_dead IS NOT NULL THEN
            FOR v_message IN SELECT m.* FROM lonnymq.message m WHERE m.id = ANY (v_dead) LOOP
                PERFORM lonnymq._settle_locked(v_message, 'dead', NULL);
            END LOOP;
        END IF;
        v_want := v_want - v_got;
        -- A batch goes on with another round while the last one gave
        -- something or tried channels (which are not picked again).
        EXIT WHEN v_want <= 0;
    END LOOP;

    -- (RETURN NEXT per delivery: cheaper than a query over the arrays.)
    FOR v_i IN 1 .. pg_catalog.cardinality(d_ids) LOOP
        id := d_ids[v_i];
        channel := d_channels[v_i];
        content := d_contents[v_i];
        state := d_states[v_i];
        num_attempts := d_attempts[v_i];
        dequeue_at := d_ats[v_i];
        recovered := v_i <= d_recovered;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq.message_dequeue(text, bigint, integer)
    IS 'Locks and returns up to max_messages ready messages, fairly across channels.';
