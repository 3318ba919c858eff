-- message_create_batch's set-based engine (_create_set): dedup keys and
-- max_size decided for a whole set exactly as message_create decides them one
-- by one; large sets; invalid arguments (22023, nothing changed).
\i test/prelude.psql

-- A capped channel (room for 3) holding one message with key k0, an
-- uncapped one, and channel-less messages, in one batch.
SELECT name, max_size FROM lonnymq.channel_set('capq', 'cap', max_size => 3);
SELECT status FROM lonnymq.message_create('capq', 'cap', 'old', dedup_key => 'k0');
-- (A function's writes are not visible to the statement that calls it:
-- results go through a temporary table before they are joined to messages.)
CREATE TEMP TABLE answer AS
SELECT * FROM lonnymq.message_create_batch('capq',
    ARRAY['cap', 'cap', 'cap', 'cap', 'cap', 'cap', 'cap', 'free', NULL, NULL, 'free'],
    ARRAY['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k']::bytea[],
    dedup_keys => ARRAY['k1', 'k0', NULL, 'k1', 'k2', 'k2', 'k0', 'k1', 'k1', 'k1', NULL])
     WITH ORDINALITY AS r(status, id, ord);
SELECT r.ord, r.status, convert_from(m.content, 'UTF8') AS message
FROM answer r LEFT JOIN lonnymq.message m ON m.id = r.id ORDER BY r.ord;
-- Admitted: old, a, c; the channel is full, and its admission count says so.
SELECT a.admitted, c.removed_count FROM lonnymq.channel_admission a
JOIN lonnymq.channel c ON c.id = a.channel_id WHERE c.name = 'cap';
-- Ids follow input order within the batch.
SELECT string_agg(convert_from(content, 'UTF8'), ',' ORDER BY id) AS by_id
FROM lonnymq.message WHERE queue_id = (SELECT id FROM lonnymq.queue WHERE name = 'capq');
-- A full channel still answers a live duplicate, and drops the rest.
TRUNCATE answer;
INSERT INTO answer
SELECT * FROM lonnymq.message_create_batch('capq', ARRAY['cap', 'cap', 'cap'], ARRAY['x', 'y', 'z']::bytea[],
    dedup_keys => ARRAY['k1', NULL, 'k9']) WITH ORDINALITY AS r(status, id, ord);
SELECT r.status, convert_from(m.content, 'UTF8') AS message
FROM answer r LEFT JOIN lonnymq.message m ON m.id = r.id ORDER BY r.ord;
-- A repeated idempotency key answers the first call's ids, NULL where dropped.
SELECT r.status, r.id IS NULL AS no_id FROM lonnymq.message_create_batch('capq', ARRAY['cap', 'free'],
    ARRAY['p', 'q']::bytea[], idempotency_key => 'once') r;
SELECT r.status, r.id IS NULL AS no_id FROM lonnymq.message_create_batch('capq', ARRAY['cap', 'free'],
    ARRAY['p', 'q']::bytea[], idempotency_key => 'once') r;

-- Outside READ COMMITTED the same rules hold: keys scoped to the channel
-- (channel-less ones too), room for one in a capped channel.
SELECT name, max_size FROM lonnymq.channel_set('rrq', 'one', max_size => 1);
BEGIN ISOLATION LEVEL REPEATABLE READ;
CREATE TEMP TABLE rr_answer AS
SELECT * FROM lonnymq.message_create_batch('rrq', ARRAY['one', 'one', 'one', NULL, NULL, 'new'],
    ARRAY['a', 'b', 'c', 'd', 'e', 'f']::bytea[], dedup_keys => ARRAY['k', 'k', NULL, 'k', 'k', NULL])
    WITH ORDINALITY AS r(status, id, ord);
SELECT r.ord, r.status, convert_from(m.content, 'UTF8') AS answered_by
FROM rr_answer r LEFT JOIN lonnymq.message m ON m.id = r.id ORDER BY r.ord;
COMMIT;
SELECT string_agg(convert_from(content, 'UTF8'), ',' ORDER BY id) AS rrq_messages
FROM lonnymq.message WHERE queue_id = (SELECT id FROM lonnymq.queue WHERE name = 'rrq');

-- The same elements, one batch in queue setq and one message_create each in
-- queue oneq, from the same start: every element gets the same status and
-- names the same element's message. 3000 elements over capped (room 60, 0,
-- 500, 5000) and uncapped channels and channel-less ones, with keys that
-- repeat inside the batch and keys of messages created before.
CREATE TEMP TABLE elem AS
SELECT g AS ord,
       CASE WHEN g % 7 = 0 THEN NULL ELSE 'c' || (g % 5) END AS channel,
       pg_catalog.convert_to('e' || g, 'UTF8') AS content,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'k' || (g * 7 % 97) END AS dedup_key,
       CASE WHEN g % 11 = 0 THEN now() + (g || ' seconds')::interval END AS dequeue_at
FROM generate_series(1, 3000) g;
DO $$
DECLARE
    q text;
    c text;
    n integer;
BEGIN
    FOREACH q IN ARRAY ARRAY['setq', 'oneq'] LOOP
        PERFORM lonnymq.channel_set(q, 'c0', max_size => 60);
        PERFORM lonnymq.channel_set(q, 'c1', max_size => 0);
        PERFORM lonnymq.channel_set(q, 'c2', max_size => 500);
        PERFORM lonnymq.channel_set(q, 'c4', max_size => 5000);
        FOREACH c IN ARRAY ARRAY['c0', 'c1', 'c2', 'c3', 'c4', NULL] LOOP
            FOR n IN 0 .. 9 LOOP
                PERFORM lonnymq.message_create(q, c, pg_catalog.convert_to('pre-' || coalesce(c, '-') || n, 'UTF8'),
                                               dedup_key => 'k' || (n * 5));
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;
CREATE TEMP TABLE one_result (ord integer, status text, id bigint);
DO $$
DECLARE
    e record;
BEGIN
    FOR e IN SELECT * FROM elem ORDER BY ord LOOP
        INSERT INTO one_result
        SELECT e.ord, r.status, r.id
        FROM lonnymq.message_create('oneq', e.channel, e.content, dequeue_at => e.dequeue_at,
                                    dedup_key => e.dedup_key) r;
    END LOOP;
END
$$;
CREATE TEMP TABLE set_result AS
SELECT r.ord, r.status, r.id
FROM (SELECT array_agg(channel ORDER BY ord) AS channels, array_agg(content ORDER BY ord) AS contents,
             array_agg(dequeue_at ORDER BY ord) AS dequeue_ats, array_agg(dedup_key ORDER BY ord) AS dedup_keys
      FROM elem) a,
     lonnymq.message_create_batch('setq', a.channels, a.contents, a.dequeue_ats, a.dedup_keys)
         WITH ORDINALITY AS r(status, id, ord);
SELECT status, count(*) FROM set_result GROUP BY status ORDER BY status;
SELECT count(*) AS differences
FROM set_result s
JOIN one_result o USING (ord)
JOIN elem e USING (ord)
LEFT JOIN lonnymq.message sm ON sm.id = s.id
LEFT JOIN lonnymq.message om ON om.id = o.id
WHERE s.status IS DISTINCT FROM o.status OR sm.content IS DISTINCT FROM om.content
   OR (s.status = 'created' AND e.dequeue_at IS NOT NULL AND sm.dequeue_ms IS DISTINCT FROM om.dequeue_ms);
-- The channels end in the same state: live messages and admission counts.
SELECT count(*) AS channel_differences
FROM (SELECT c.name, count(m.id) AS live, a.admitted
      FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id
      LEFT JOIN lonnymq.message m ON m.channel_id = c.id
      LEFT JOIN lonnymq.channel_admission a ON a.channel_id = c.id
      WHERE q.name = 'setq' GROUP BY c.name, a.admitted) s
FULL JOIN (SELECT c.name, count(m.id) AS live, a.admitted
      FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id
      LEFT JOIN lonnymq.message m ON m.channel_id = c.id
      LEFT JOIN lonnymq.channel_admission a ON a.channel_id = c.id
      WHERE q.name = 'oneq' GROUP BY c.name, a.admitted) o USING (name)
WHERE s.live IS DISTINCT FROM o.live OR s.admitted IS DISTINCT FROM o.admitted;
-- Created ids rise with input order.
SELECT count(*) AS out_of_order
FROM (SELECT id, lag(id) OVER (ORDER BY ord) AS previous FROM set_result WHERE status = 'created') x
WHERE id <= previous;

-- A set of 100000 (the most a batch holds): 1000 elements without keys in a
-- channel with room for 600; 24000 with keys (4800 distinct (channel, key)
-- pairs, each five times) over 49 uncapped channels.
SELECT name, max_size FROM lonnymq.channel_set('bigq', 'capped', max_size => 600);
SELECT r.status, count(*), count(DISTINCT r.id) AS ids
FROM lonnymq.message_create_batch('bigq',
    ARRAY(SELECT CASE WHEN g % 100 = 0 THEN 'capped' ELSE 't' || (g % 50) END FROM generate_series(1, 100000) g),
    ARRAY(SELECT pg_catalog.convert_to('b' || g, 'UTF8') FROM generate_series(1, 100000) g),
    dedup_keys => ARRAY(SELECT CASE WHEN g % 4 = 0 AND g % 100 <> 0 THEN 'k' || (g % 20000) END
                        FROM generate_series(1, 100000) g)) r
GROUP BY r.status ORDER BY r.status;
SELECT count(*) AS hints_per_channel_above_one
FROM (SELECT channel_id FROM lonnymq.channel_hint GROUP BY channel_id HAVING count(*) > 1) x
WHERE channel_id IN (SELECT c.id FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id WHERE q.name = 'bigq');

-- Invalid large sets: SQLSTATE 22023 and nothing changed, wherever the bad element is.
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('bigq', NULL,
    ARRAY(SELECT 'x'::bytea FROM generate_series(1, 100001)))$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('bigq',
    ARRAY(SELECT CASE WHEN g = 50000 THEN '' ELSE 'new' || g END FROM generate_series(1, 50000) g),
    ARRAY(SELECT 'x'::bytea FROM generate_series(1, 50000)))$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('bigq', NULL,
    ARRAY(SELECT CASE WHEN g < 50000 THEN 'x'::bytea END FROM generate_series(1, 50000) g))$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('bigq', ARRAY(SELECT 'capped' FROM generate_series(1, 50000)),
    ARRAY(SELECT 'x'::bytea FROM generate_series(1, 50000)),
    dedup_keys => ARRAY(SELECT CASE WHEN g = 50000 THEN repeat('k', 513) ELSE 'k' || g END FROM generate_series(1, 50000) g))$$);
SELECT pg_temp.try($$SELECT lonnymq.message_create_batch('bigq', NULL, ARRAY(SELECT 'x'::bytea FROM generate_series(1, 50000)),
    dequeue_ats => ARRAY(SELECT CASE WHEN g = 50000 THEN 'infinity'::timestamptz END FROM generate_series(1, 50000) g))$$);
SELECT pg_temp.state() = :'before' AS nothing_changed;

-- The plain path (no keys, no capped channel): every element lands in its
-- own channel (the set finds it in the list of the batch's channels, read
-- once), a channel-less one in none, and ids follow input order. The names
-- come in no order, repeated, with gaps.
CREATE TEMP TABLE plain_in AS
SELECT g AS ord, CASE WHEN g % 7 = 0 THEN NULL ELSE 'p' || (g * 37 % 23) END AS channel
FROM generate_series(1, 200) g;
CREATE TEMP TABLE plain_out AS
SELECT * FROM lonnymq.message_create_batch('plainq', ARRAY(SELECT channel FROM plain_in ORDER BY ord),
                                           ARRAY(SELECT convert_to(p.ord::text, 'UTF8') FROM plain_in p ORDER BY p.ord))
     WITH ORDINALITY AS r(status, id, ord);
SELECT count(*) AS elements, count(*) FILTER (WHERE o.status = 'created') AS created,
       count(*) FILTER (WHERE c.name IS NOT DISTINCT FROM i.channel
                          AND convert_from(m.content, 'UTF8') = i.ord::text) AS in_their_channel,
       count(*) FILTER (WHERE m.channel_id IS NULL) AS channelless,
       count(DISTINCT m.channel_id) AS channels
FROM plain_in i JOIN plain_out o ON o.ord = i.ord
JOIN lonnymq.message m ON m.id = o.id LEFT JOIN lonnymq.channel c ON c.id = m.channel_id;
SELECT bool_and(x.id < x.next) AS ids_in_input_order
FROM (SELECT o.id, lead(o.id) OVER (ORDER BY o.ord) AS next FROM plain_out o) x WHERE x.next IS NOT NULL;
-- _pin_named, the batch's first step: the existing channels among the names,
-- pinned, in name order.
SELECT lonnymq._pin_named((SELECT id FROM lonnymq.queue WHERE name = 'plainq'), ARRAY['p5', 'nope', 'p1', NULL]) AS pinned;

SELECT count(*) AS broken_invariants FROM lonnymq.verify();
