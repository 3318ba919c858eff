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
            WHERE false  -- model A: no hints (_place makes the set due)
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
            WHERE false  -- model A: no hints (_place makes the set due)
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
    PERFORM lonnymq._place(v_queue_id, ids);
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
