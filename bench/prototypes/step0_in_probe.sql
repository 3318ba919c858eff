-- A PROTOTYPE, NOT KEPT (session 15): message_dequeue with step 0's pick of the fairest
-- free channel folded into the probe (a scalar subquery FOR NO KEY UPDATE SKIP LOCKED,
-- evaluated only for a single dequeue with no hint due, no lock expired and no channel-less
-- message ready), one statement fewer per single dequeue on channels:
--
--   .venv/bin/python bench/ab_dequeue.py sql/50_dequeue.sql bench/prototypes/step0_in_probe.sql \
--       --rounds 10 --name s15-step0-in-probe
--
-- 0.980x the CPU per message (rounds 0.94-1.00; a first run 0.975x, 0.92-1.00): small, near
-- the harness's A/A noise (0.96-1.09), for a second branch of step 0: not kept.
-- bench/README.md, session 15.
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
    SELECT p.*,
           CASE WHEN message_dequeue.max_messages = 1 AND NOT p.hinted AND NOT p.expired AND NOT (p.queue).paused
                     AND p.channelless_ms IS NULL
                THEN (SELECT c FROM lonnymq.channel c
                      WHERE c.queue_id = (p.queue).id AND c.ready_ms <= v_now_ms AND NOT c.paused
                      ORDER BY c.ready_ms, c.turn_seq, c.id
                      LIMIT 1
                      FOR NO KEY UPDATE SKIP LOCKED) END AS channel
    INTO v_probe
    FROM (
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
           -- Whether any channel is ready, only when channel-less messages
           -- are (a single dequeue with none never needs it): with no channel
           -- ready, they are all there is (see _dequeue_many).
           CASE WHEN f.channelless_ms IS NOT NULL
                THEN EXISTS (SELECT 1 FROM lonnymq.channel c
                             WHERE c.queue_id = q.id AND c.ready_ms <= v_now_ms AND NOT c.paused) END
               AS channels_ready
    FROM lonnymq.queue q
    LEFT JOIN LATERAL (SELECT greatest(m.dequeue_ms, q.channelless_turn_ms) AS channelless_ms
                       FROM lonnymq.message m
                       WHERE m.queue_id = q.id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL
                         AND m.dequeue_ms <= v_now_ms
                       ORDER BY m.dequeue_ms, m.id
                       LIMIT 1) f ON true
    WHERE q.name = message_dequeue.queue
    OFFSET 0) p;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_queue := v_probe.queue;
    IF v_probe.hinted THEN
        v_hinted := lonnymq._absorb_hints(v_queue.id, v_now_ms, message_dequeue.max_messages + 2);
    END IF;
    IF message_dequeue.max_messages = 1 AND NOT v_probe.hinted AND NOT v_probe.expired AND NOT v_queue.paused
       AND v_probe.channelless_ms IS NULL THEN
        IF (v_probe.channel).id IS NOT NULL THEN
            v_one := lonnymq._serve_channel(v_queue, v_probe.channel, v_now_ms, message_dequeue.lock_ms, true);
            IF v_one.id IS NOT NULL THEN
                id := v_one.id;
                channel := (v_probe.channel).name;
                content := v_one.content;
                state := v_one.state;
                num_attempts := v_one.num_attempts;
                dequeue_at := v_one.dequeue_at;
                recovered := false;
                RETURN NEXT;
                RETURN;
            END IF;
            v_tried := ARRAY[(v_probe.channel).id];
        ELSE
            v_held := true;
        END IF;
    ELSIF message_dequeue.max_messages = 1 AND NOT v_probe.expired AND NOT v_queue.paused
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

