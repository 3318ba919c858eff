-- ===========================================================================
-- Creating a set of messages in a few statements: message_create_batch's
-- engine. Every rule of message_create holds per element (dedup keys scoped
-- to the channel, max_size admission, hints, input order of ids), decided for
-- the whole set at once instead of element by element.
-- ===========================================================================

-- Creates the validated elements of message_create_batch's arrays (p_channels
-- .. p_dedup_keys), every channel already taken by the caller (existing ones
-- pinned, new ones created, see _publish) and p_head_held the channels whose
-- head lock it holds; p_keyed: some element has a dedup key. Answers the
-- status and id of each element, in input order; sends no wake-up (the
-- caller sends one).
--
-- The statements are planned for each call (EXECUTE): a set holds 1 to
-- 100000 elements, and one cached generic plan would fit none of them well.
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
-- id order, so the room counted is the room there is.
-- Only a race changes that: a leader whose key a concurrent producer
-- committed meanwhile inserts nothing (ON CONFLICT) and is decided again on
-- its own, as message_create would; the room it was counted for stays
-- unused, so capacity errs on the side of refusing, as everywhere.
CREATE OR REPLACE FUNCTION lonnymq._create_set(
    p_queue_id integer, p_channels text[], p_contents bytea[], p_dequeue_ats timestamptz[],
    p_dedup_keys text[], p_keyed boolean, p_names text[], p_head_held bigint[], p_now_ms bigint,
    OUT statuses text[], OUT ids bigint[]
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- The elements as a FROM item u(channel, content, dequeue_at, dedup_key, ord).
    v_source text := 'ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::bytea[]), '
                     'pg_catalog.unnest($3::timestamptz[]), pg_catalog.unnest($4::text[])) '
                     'WITH ORDINALITY AS u(channel, content, dequeue_at, dedup_key, ord)';
    v_ords bigint[];
    v_leaders bigint[];
    v_lost integer[];  -- positions of leaders that lost a race for their dedup key
    v_element record;
    v_result record;
    v_at integer;
BEGIN
    IF NOT p_keyed
       AND NOT EXISTS (SELECT 1 FROM lonnymq.channel c
                       WHERE c.queue_id = p_queue_id AND c.name = ANY (p_names)
                         AND c.max_size IS NOT NULL) THEN
        -- Every element is created. Ids follow input order (the INSERT draws
        -- them in ORDER BY order), so sorting them restores the input order.
        EXECUTE pg_catalog.format($q$
            WITH created AS (
                INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, dequeue_ms)
                SELECT $5, c.id, u.content,
                       coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM u.dequeue_at) * 1000)::bigint, $7)
                FROM %s
                LEFT JOIN lonnymq.channel c ON c.queue_id = $5 AND c.name = u.channel
                ORDER BY u.ord
                RETURNING m.id, m.channel_id, m.dequeue_ms
            ), hinted AS (
                -- One hint per channel, at its earliest new message, covers
                -- them all; none where that is not earlier than a held head.
                INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
                SELECT $5, k.channel_id, k.first_ms
                FROM (SELECT k.channel_id, pg_catalog.min(k.dequeue_ms) AS first_ms
                      FROM created k WHERE k.channel_id IS NOT NULL
                      GROUP BY k.channel_id) k
                JOIN lonnymq.channel c ON c.id = k.channel_id
                WHERE k.channel_id <> ALL ($6) OR c.head_ms IS NULL OR k.first_ms < c.head_ms
            )
            SELECT coalesce(pg_catalog.array_agg(k.id ORDER BY k.id), '{}') FROM created k
            $q$, v_source)
        INTO ids
        USING p_channels, p_contents, p_dequeue_ats, p_dedup_keys, p_queue_id, p_head_held, p_now_ms;
        statuses := pg_catalog.array_fill('created'::text, ARRAY[pg_catalog.cardinality(ids)]);
        RETURN;
    END IF;

    -- Admission rows of capped channels, in id order (as every producer takes them).
    PERFORM 1 FROM lonnymq.channel_admission a
    WHERE a.channel_id IN (
        SELECT c.id FROM lonnymq.channel c
        WHERE c.queue_id = p_queue_id AND c.name = ANY (p_names) AND c.max_size IS NOT NULL)
    ORDER BY a.channel_id
    FOR UPDATE;

    EXECUTE pg_catalog.format($q$
        WITH input AS MATERIALIZED (
            SELECT u.ord, c.id AS channel_id, c.max_size, u.dedup_key,
                   CASE WHEN u.dedup_key IS NULL THEN u.ord
                        ELSE pg_catalog.min(u.ord) OVER (PARTITION BY c.id, u.dedup_key) END AS leader
            FROM %1$s
            LEFT JOIN lonnymq.channel c ON c.queue_id = $5 AND c.name = u.channel
        ), live AS (
            -- Leaders that a live message already answers.
            SELECT i.ord, m.id
            FROM input i
            JOIN lonnymq.message m ON m.queue_id = $5 AND coalesce(m.channel_id, 0) = coalesce(i.channel_id, 0)
                                  AND m.dedup_key = i.dedup_key AND m.dedup_key IS NOT NULL
            WHERE i.dedup_key IS NOT NULL AND i.ord = i.leader
        ), candidate AS (
            SELECT i.ord, i.channel_id, i.max_size,
                   pg_catalog.row_number() OVER (PARTITION BY i.channel_id ORDER BY i.ord) AS n
            FROM input i
            WHERE i.ord = i.leader AND NOT EXISTS (SELECT 1 FROM live l WHERE l.ord = i.ord)
        ), room AS (
            SELECT c.id, c.max_size - (a.admitted - c.removed_count) AS free
            FROM lonnymq.channel c JOIN lonnymq.channel_admission a ON a.channel_id = c.id
            WHERE c.queue_id = $5 AND c.name = ANY ($8) AND c.max_size IS NOT NULL
        ), decided AS (
            SELECT k.ord, k.channel_id
            FROM candidate k LEFT JOIN room r ON r.id = k.channel_id
            WHERE k.max_size IS NULL OR k.n <= r.free
        ), created AS (
            INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, dequeue_ms, dedup_key)
            SELECT $5, d.channel_id, u.content,
                   coalesce(pg_catalog.floor(EXTRACT(EPOCH FROM u.dequeue_at) * 1000)::bigint, $7), u.dedup_key
            FROM decided d JOIN %1$s ON u.ord = d.ord
            ORDER BY d.ord
            ON CONFLICT (queue_id, (coalesce(channel_id, 0)), dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
            RETURNING m.id, m.channel_id, m.dequeue_ms, m.dedup_key
        ), hinted AS (
            INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)
            SELECT $5, k.channel_id, k.first_ms
            FROM (SELECT k.channel_id, pg_catalog.min(k.dequeue_ms) AS first_ms
                  FROM created k WHERE k.channel_id IS NOT NULL
                  GROUP BY k.channel_id) k
            JOIN lonnymq.channel c ON c.id = k.channel_id
            WHERE k.channel_id <> ALL ($6) OR c.head_ms IS NULL OR k.first_ms < c.head_ms
        ), admitted AS (
            UPDATE lonnymq.channel_admission a SET admitted = a.admitted + k.n
            FROM (SELECT k.channel_id, pg_catalog.count(*) AS n FROM created k
                  WHERE k.channel_id IN (SELECT r.id FROM room r) GROUP BY k.channel_id) k
            WHERE a.channel_id = k.channel_id
        ), keyed AS (
            -- Created leaders with a key, found by their key.
            SELECT d.ord, k.id
            FROM decided d JOIN input i ON i.ord = d.ord
            JOIN created k ON coalesce(k.channel_id, 0) = coalesce(i.channel_id, 0) AND k.dedup_key = i.dedup_key
        ), keyless AS (
            -- Elements without a key are never refused by a conflict: the
            -- n-th of them in input order has the n-th id.
            SELECT d.ord, k.id
            FROM (SELECT d.ord, pg_catalog.row_number() OVER (ORDER BY d.ord) AS n
                  FROM decided d JOIN input i ON i.ord = d.ord WHERE i.dedup_key IS NULL) d
            JOIN (SELECT k.id, pg_catalog.row_number() OVER (ORDER BY k.id) AS n
                  FROM created k WHERE k.dedup_key IS NULL) k ON k.n = d.n
        ), outcome AS (
            -- Per leader: created, deduplicated, dropped, or NULL (lost a race).
            SELECT i.ord,
                   CASE WHEN l.id IS NOT NULL THEN 'deduplicated'
                        WHEN coalesce(y.id, n.id) IS NOT NULL THEN 'created'
                        WHEN d.ord IS NULL THEN 'dropped' END AS status,
                   coalesce(l.id, y.id, n.id) AS id
            FROM input i
            LEFT JOIN live l ON l.ord = i.ord
            LEFT JOIN decided d ON d.ord = i.ord
            LEFT JOIN keyed y ON y.ord = i.ord
            LEFT JOIN keyless n ON n.ord = i.ord
            WHERE i.ord = i.leader
        )
        SELECT pg_catalog.array_agg(CASE WHEN i.ord = i.leader OR o.status IS NULL THEN o.status
                                         WHEN o.status = 'dropped' THEN 'dropped'
                                         ELSE 'deduplicated' END ORDER BY i.ord),
               pg_catalog.array_agg(o.id ORDER BY i.ord),
               pg_catalog.array_agg(i.leader ORDER BY i.ord),
               pg_catalog.array_agg(i.ord ORDER BY i.ord)
        FROM input i JOIN outcome o ON o.ord = i.leader
        $q$, v_source)
    INTO statuses, ids, v_leaders, v_ords
    USING p_channels, p_contents, p_dequeue_ats, p_dedup_keys, p_queue_id, p_head_held, p_now_ms, p_names;

    -- Leaders that lost a race, decided again one by one (rare), then their
    -- followers. (unnest, not subscripts: reading element i of a text array walks it.)
    SELECT pg_catalog.array_agg(s.n) INTO v_lost
    FROM ROWS FROM (pg_catalog.unnest(statuses), pg_catalog.unnest(v_leaders), pg_catalog.unnest(v_ords))
         WITH ORDINALITY AS s(status, leader, ord, n)
    WHERE s.status IS NULL AND s.leader = s.ord;
    FOREACH v_at IN ARRAY coalesce(v_lost, '{}') LOOP
        EXECUTE pg_catalog.format('SELECT u.channel, u.content, u.dequeue_at, u.dedup_key FROM %s WHERE u.ord = $5',
                                  v_source)
        INTO v_element
        USING p_channels, p_contents, p_dequeue_ats, p_dedup_keys, v_ords[v_at];
        SELECT r.status, r.id INTO v_result
        FROM lonnymq._create_one(p_queue_id, NULL, v_element.channel, v_element.content,
                                 coalesce(lonnymq._ms_of(v_element.dequeue_at, 'dequeue_at'), p_now_ms),
                                 0, v_element.dedup_key, NULL, 0, NULL, false) r;
        FOR i IN v_at .. pg_catalog.cardinality(statuses) LOOP
            IF v_leaders[i] = v_ords[v_at] THEN
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
COMMENT ON FUNCTION lonnymq._create_set(integer, text[], bytea[], timestamptz[], text[], boolean, text[], bigint[], bigint)
    IS 'Creates a validated set of messages in a few statements: statuses and ids in input order.';

-- What message_create_batch does once its arguments are valid: the
-- idempotency key, the channels (swept, pinned, created), the head locks,
-- the set itself, one wake-up. p_names: the distinct channel names, sorted;
-- p_count: how many elements. Answers the status and id of each element in
-- input order (arrays: the caller returns them as rows, and a set of rows
-- would be copied once more per level).
CREATE OR REPLACE FUNCTION lonnymq._publish(
    p_queue text, p_channels text[], p_contents bytea[], p_dequeue_ats timestamptz[],
    p_dedup_keys text[], p_keyed boolean, p_names text[], p_count bigint, p_idempotency_key text,
    OUT statuses text[], OUT ids bigint[]
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue_id integer := lonnymq._queue_id(p_queue, true);
    v_digest bytea;                -- scope of the idempotency key
    v_previous bigint[];
    v_pinned text[] := '{}';       -- existing channels pinned in one statement
    v_head_held bigint[] := '{}';  -- channels whose head lock this call holds
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

    -- New channels pay for the sweep of idle ones, once, before any is taken.
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(p_names) AS n
               WHERE NOT EXISTS (
                   SELECT 1 FROM lonnymq.channel c WHERE c.queue_id = v_queue_id AND c.name = n)) THEN
        PERFORM lonnymq.channel_sweep(2);
    END IF;
    -- Take every channel first: the existing ones pinned in one statement
    -- (at READ COMMITTED; elsewhere _channel_for_create also checks each is
    -- current), then the new ones created one by one, in name order: two
    -- batches that create the same new channels cannot wait on each other in
    -- a cycle.
    IF lonnymq._read_committed() THEN
        SELECT coalesce(pg_catalog.array_agg(x.name), '{}') INTO v_pinned
        FROM (SELECT c.name FROM lonnymq.channel c
              WHERE c.queue_id = v_queue_id AND c.name = ANY (p_names)
              ORDER BY c.name
              FOR KEY SHARE) x;
    END IF;
    FOR v_name IN SELECT n FROM pg_catalog.unnest(p_names) n EXCEPT SELECT p FROM pg_catalog.unnest(v_pinned) p
                  ORDER BY 1 LOOP
        PERFORM lonnymq._channel_for_create(v_queue_id, v_name, false);
    END LOOP;
    -- Head locks (see _hold_head_lock), tried in one statement, at most the budget.
    SELECT coalesce(pg_catalog.array_agg(x.id), '{}') INTO v_head_held
    FROM (SELECT c.id, c.lock_key FROM lonnymq.channel c
          WHERE c.queue_id = v_queue_id AND c.name = ANY (p_names)
          ORDER BY c.name
          LIMIT lonnymq._head_lock_budget()) x
    WHERE lonnymq._hold_head_lock(x.lock_key);

    SELECT r.statuses, r.ids INTO statuses, ids
    FROM lonnymq._create_set(v_queue_id, p_channels, p_contents, p_dequeue_ats, p_dedup_keys,
                             p_keyed, p_names, v_head_held, lonnymq._now_ms()) r;
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
