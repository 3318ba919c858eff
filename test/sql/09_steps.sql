-- The dequeue steps of 50_dequeue.sql, each called on its own (message_dequeue
-- composes them; 02_dequeue tests the composition). Each returns the ids it
-- claimed in delivery order; the channel steps also say which channels they
-- served, which they took without success, and how many head locks they used.
\i test/prelude.psql
SELECT count(*) FROM (
    SELECT lonnymq.message_create('steps', ch, convert_to(ch || n, 'UTF8'))
    FROM unnest(ARRAY['a', 'b', 'c']) ch, generate_series(1, 2) n
) s;
-- The channel-less messages a few milliseconds later than the channels'
-- heads: dequeue times count in milliseconds, and in a tie the channel-less
-- messages' turn comes first, which some cases below would then show.
SELECT pg_sleep(0.005);
SELECT status FROM lonnymq.message_create('steps', NULL, 'free1');
SELECT status FROM lonnymq.message_create('steps', NULL, 'free2');
CREATE FUNCTION pg_temp.q() RETURNS lonnymq.queue LANGUAGE sql AS
$$ SELECT q FROM lonnymq.queue q WHERE q.name = 'steps' $$;
-- Producers leave hints; a dequeue folds them into the channels' heads first.
SELECT cardinality(lonnymq._absorb_hints((pg_temp.q()).id, lonnymq._now_ms(), 10)) AS busy;
SELECT name, head_ms IS NOT NULL AS has_head FROM lonnymq.channel ORDER BY name;
CREATE FUNCTION pg_temp.contents(p_ids bigint[]) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(convert_from(m.content, 'UTF8'), ' ' ORDER BY o.n), '')
    FROM unnest(p_ids) WITH ORDINALITY o(id, n) JOIN lonnymq.message m ON m.id = o.id
$$;
CREATE FUNCTION pg_temp.names(p_ids bigint[]) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(c.name, ' ' ORDER BY o.n), '')
    FROM unnest(p_ids) WITH ORDINALITY o(id, n) JOIN lonnymq.channel c ON c.id = o.id
$$;
-- The channel-less messages' key as message_dequeue's probe passes it to _dequeue_many.
CREATE FUNCTION pg_temp.channelless_ms() RETURNS bigint LANGUAGE sql AS $$
    SELECT min(dequeue_ms) FROM lonnymq.message WHERE queue_id = (pg_temp.q()).id AND channel_id IS NULL
$$;

-- A round of two: the two fairest channels, one head each, turns recorded
-- (both move behind c), nothing tried, no head lock (neither drained).
BEGIN;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served,
       pg_temp.names(r.tried) AS tried, r.raised
FROM lonnymq._dequeue_round(pg_temp.q(), lonnymq._now_ms(), 60000, 2, NULL, '{}', NULL, 256) r;
SELECT name, locked_count FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id
ORDER BY c.ready_ms, c.turn_seq, c.id;
-- The claimed messages are locked with their attempt counted.
SELECT convert_from(content, 'UTF8') AS content, num_attempts, locked_until_ms IS NOT NULL AS locked
FROM lonnymq.message WHERE queue_id = (pg_temp.q()).id ORDER BY id;
ROLLBACK;

-- p_only restricts the round to the given channels; p_tried passes over them.
-- c, the only channel left, is all there is for the 3 wanted: it takes its
-- quota at once (see _round_quotas), both of its messages.
BEGIN;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served
FROM lonnymq._dequeue_round(pg_temp.q(), lonnymq._now_ms(), 60000, 3, NULL,
                            ARRAY(SELECT id FROM lonnymq.channel WHERE name = 'a'),
                            ARRAY(SELECT id FROM lonnymq.channel WHERE name IN ('a', 'c')), 256) r;
ROLLBACK;

-- A channel whose last due message is taken has its head raised in the same
-- turn (one head lock used); one with nothing due comes back as tried.
BEGIN;
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms + 3600000
WHERE content = 'b2' AND queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served, r.raised
FROM lonnymq._dequeue_round(pg_temp.q(), lonnymq._now_ms(), 60000, 1, NULL, '{}',
                            ARRAY(SELECT id FROM lonnymq.channel WHERE name = 'b'), 256) r;
SELECT head_ms > lonnymq._now_ms() + 3000000 AS head_raised_to_b2, ready_ms > lonnymq._now_ms() AS not_ready
FROM lonnymq.channel WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
-- Its ready key is stale on purpose here (forced back to now): the round finds
-- nothing due, takes no turn, and reports it tried.
UPDATE lonnymq.channel SET ready_ms = lonnymq._now_ms() WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
SELECT cardinality(r.ids) AS claimed, pg_temp.names(r.tried) AS tried, r.raised
FROM lonnymq._dequeue_round(pg_temp.q(), lonnymq._now_ms(), 60000, 1, NULL, '{}',
                            ARRAY(SELECT id FROM lonnymq.channel WHERE name = 'b'), 256) r;
ROLLBACK;
-- With no head lock left in the budget, a drained channel's head stays where
-- it was (early, which is safe) and no lock is used.
BEGIN;
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms + 3600000
WHERE content = 'b2' AND queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(r.ids) AS claimed, r.raised
FROM lonnymq._dequeue_round(pg_temp.q(), lonnymq._now_ms(), 60000, 1, NULL, '{}',
                            ARRAY(SELECT id FROM lonnymq.channel WHERE name = 'b'), 0) r;
SELECT head_ms <= lonnymq._now_ms() AS head_stays FROM lonnymq.channel WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
ROLLBACK;

-- The round c, a, b (not the channels' id order), as a round step gets it.
CREATE FUNCTION pg_temp.round_cab() RETURNS lonnymq.channel[] LANGUAGE sql AS $$
    SELECT ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id
                 ORDER BY pg_catalog.array_position(ARRAY['c', 'a', 'b'], c.name))
$$;
-- _serve_round, a round of several channels (a round of one is served by
-- _serve_channel, below): every head claimed in one statement, every turn in
-- another, in the round's order as given (c, a, b here, not the channels'
-- id order). a's only due message drains it: its head is raised to a2, an
-- hour away. b has nothing due: tried, no turn. Two head locks used.
BEGIN;
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms + 3600000
WHERE content IN ('a2', 'b1', 'b2') AND queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served,
       pg_temp.names(r.tried) AS tried, r.raised
FROM lonnymq._serve_round(pg_temp.q(),
                          pg_temp.round_cab(), lonnymq._now_ms(), 60000, 256) r;
-- The turns are numbered in the round's order; a's key is its raised head.
SELECT string_agg(name, ' ' ORDER BY turn_seq) AS turns_in_order
FROM lonnymq.channel WHERE queue_id = (pg_temp.q()).id AND name IN ('a', 'c');
SELECT name, head_ms > lonnymq._now_ms() + 3000000 AS head_an_hour_away, ready_ms = head_ms AS ready_at_head
FROM lonnymq.channel WHERE queue_id = (pg_temp.q()).id AND name = 'a';
SELECT convert_from(content, 'UTF8') AS content, num_attempts, locked_until_ms IS NOT NULL AS locked
FROM lonnymq.message WHERE queue_id = (pg_temp.q()).id AND channel_id IS NOT NULL ORDER BY id;
ROLLBACK;
-- _round_quotas: how many each channel of a round takes when the round is
-- fewer channels than wanted. 8 over three: 3, 3, 2 (the first ones one
-- more); none when the round holds as many as wanted, when a channel is
-- counted (its next turn is not due at once) or has max_attempts, or past
-- one slice of 100 channels (the last argument: head locks left).
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id ORDER BY c.name),
                             8, 256) AS eight_over_three,
       lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 3, 256) AS three,
       lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 1, 256) AS one;
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id
                                   AND c.name = 'a'), 5, 256) AS five_over_one,
       lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 0, 256) AS none_wanted;
BEGIN;
UPDATE lonnymq.channel SET max_concurrency = 10 WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 8, 256) AS counted;
ROLLBACK;
BEGIN;
UPDATE lonnymq.channel SET max_attempts = 5 WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 8, 256)
    AS with_max_attempts;
ROLLBACK;
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c, generate_series(1, 34)
                                   WHERE c.queue_id = (pg_temp.q()).id), 500, 256) AS past_one_slice;
-- None either with fewer head locks left than channels (a drained channel
-- whose head cannot rise would come round again), or outside READ COMMITTED
-- (where no head rises).
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 8, 2)
    AS two_head_locks_left,
       lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 8, 3)
    AS three_left;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT lonnymq._round_quotas(ARRAY(SELECT c FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id), 8, 256)
    AS repeatable_read;
ROLLBACK;

-- _serve_quotas: the round c, a, b takes 3, 2 and 2. c gives both
-- of its messages, a its one due message, b none (both an hour away). The
-- deliveries come round by round (c1 a1, then c2); b's empty turn is in the
-- first round, a's last turn too, c's in the second: served a then c, b
-- tried, and a's and c's heads raised (both drained: a's to a2, an hour
-- away; c has nothing left), three head locks.
BEGIN;
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms + 3600000
WHERE content IN ('a2', 'b1', 'b2') AND queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served,
       pg_temp.names(r.tried) AS tried, r.raised
FROM lonnymq._serve_quotas(pg_temp.q(),
                           pg_temp.round_cab(), lonnymq._now_ms(), 60000, 256, ARRAY[3, 2, 2]) r;
SELECT string_agg(name, ' ' ORDER BY turn_seq) AS turns_in_order
FROM lonnymq.channel WHERE queue_id = (pg_temp.q()).id AND name IN ('a', 'c');
SELECT name, head_ms > lonnymq._now_ms() + 3000000 AS head_an_hour_away, ready_ms IS NULL AS none_ready
FROM lonnymq.channel WHERE queue_id = (pg_temp.q()).id AND name IN ('a', 'c') ORDER BY name;
ROLLBACK;

-- _channel_head_ms, the head a raise sets: the earliest unlocked message of
-- the channel, due or not (a locked one does not count; an hour-away one
-- does once nothing earlier is unlocked); NULL with none unlocked.
BEGIN;
SELECT status FROM lonnymq.message_create('heads', 'h', 'h1');
SELECT status FROM lonnymq.message_create('heads', 'h', 'h2', dequeue_at => now() + interval '1 hour');
CREATE TEMP TABLE h_ids AS
SELECT c.queue_id, c.id AS channel_id, min(m.dequeue_ms) AS first_ms, max(m.dequeue_ms) AS later_ms
FROM lonnymq.channel c JOIN lonnymq.message m ON m.channel_id = c.id
JOIN lonnymq.queue q ON q.id = c.queue_id WHERE q.name = 'heads' GROUP BY c.queue_id, c.id;
SELECT lonnymq._channel_head_ms(queue_id, channel_id) = first_ms AS first_unlocked FROM h_ids;
UPDATE lonnymq.message m SET locked_until_ms = lonnymq._now_ms() + 60000
FROM h_ids WHERE m.channel_id = h_ids.channel_id AND m.dequeue_ms = h_ids.first_ms;
SELECT lonnymq._channel_head_ms(queue_id, channel_id) = later_ms AS past_the_locked FROM h_ids;
UPDATE lonnymq.message m SET locked_until_ms = lonnymq._now_ms() + 60000
FROM h_ids WHERE m.channel_id = h_ids.channel_id;
SELECT lonnymq._channel_head_ms(queue_id, channel_id) IS NULL AS none_unlocked FROM h_ids;
ROLLBACK;

-- A round of more than 100 channels is served 100 at a time, in order: a
-- batch over 150 fresh channels takes one message of each in the round's order
-- (their keys tie, so by id) and numbers their turns in that order, across
-- the slices.
BEGIN;
SELECT count(*) AS created FROM lonnymq.message_create_batch('slices',
    (SELECT array_agg('s' || i) FROM generate_series(1, 150) i),
    (SELECT array_agg(convert_to('m' || i, 'UTF8')) FROM generate_series(1, 150) i));
SELECT count(*) AS delivered, count(DISTINCT d.channel) AS channels,
       array_agg(d.channel ORDER BY d.n) = (SELECT array_agg(c.name ORDER BY c.id) FROM lonnymq.channel c
                                            JOIN lonnymq.queue q ON q.id = c.queue_id
                                            WHERE q.name = 'slices') AS in_round_order
FROM lonnymq.message_dequeue('slices', 60000, 150)
     WITH ORDINALITY AS d(id, channel, content, state, num_attempts, dequeue_at, recovered, n);
SELECT array_agg(c.name ORDER BY c.turn_seq) = array_agg(c.name ORDER BY c.id) AS turns_in_round_order
FROM lonnymq.channel c JOIN lonnymq.queue q ON q.id = c.queue_id WHERE q.name = 'slices';
ROLLBACK;

-- Channel-less messages: in order, up to p_want without a turn, or one with
-- a turn recorded on the queue row.
BEGIN;
SELECT pg_temp.contents(lonnymq._dequeue_channelless(pg_temp.q(), lonnymq._now_ms(), 60000, 5, NULL)) AS claimed;
ROLLBACK;
BEGIN;
SELECT pg_temp.contents(lonnymq._dequeue_channelless(pg_temp.q(), lonnymq._now_ms(), 60000, 5, 424242)) AS claimed;
SELECT channelless_turn_seq FROM lonnymq.queue WHERE name = 'steps';
ROLLBACK;

-- Expired locks: redelivered earliest expiry first, attempts counted; one out
-- of attempts is dead-lettered instead.
BEGIN;
SELECT count(*) FROM lonnymq.message_dequeue('steps', 60000, 8);
UPDATE lonnymq.message SET locked_until_ms = 1000 + id WHERE queue_id = (pg_temp.q()).id
  AND content IN ('a1', 'b1', 'free2');
UPDATE lonnymq.message SET locked_until_ms = 1 WHERE queue_id = (pg_temp.q()).id AND content = 'c1';
SELECT name, max_attempts FROM lonnymq.channel_set('steps', 'c', max_attempts => 1);
SELECT pg_temp.contents(lonnymq._dequeue_expired(pg_temp.q(), lonnymq._now_ms(), 60000, 10)) AS redelivered;
SELECT convert_from(content, 'UTF8') AS content, num_attempts FROM lonnymq.message
WHERE queue_id = (pg_temp.q()).id AND content IN ('a1', 'b1', 'free2') ORDER BY id;
SELECT convert_from(content, 'UTF8') AS content, outcome FROM lonnymq.message_archive WHERE queue = 'steps';
-- p_want bounds it.
UPDATE lonnymq.message SET locked_until_ms = 1000 + id WHERE queue_id = (pg_temp.q()).id
  AND content IN ('a1', 'b1', 'free2');
SELECT pg_temp.contents(lonnymq._dequeue_expired(pg_temp.q(), lonnymq._now_ms(), 60000, 2)) AS redelivered;
ROLLBACK;

-- The held step takes a channel's messages without a turn, up to p_want, in
-- order, whether another transaction holds the channel or not (held ones:
-- iso_held_many.spec, iso_hot_channel.spec); the fairest channel's first,
-- then the next one's; one with nothing to give comes back as tried.
BEGIN;
SELECT turn_seq AS a_seq FROM lonnymq.channel WHERE name = 'a' AND queue_id = (pg_temp.q()).id \gset
SELECT pg_temp.contents(lonnymq._serve_held(pg_temp.q(), (SELECT c FROM lonnymq.channel c WHERE c.name = 'a'),
                                            lonnymq._now_ms(), 60000, 5)) AS claimed;
SELECT turn_seq = :a_seq AS no_turn FROM lonnymq.channel WHERE name = 'a' AND queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served, pg_temp.names(r.tried) AS tried
FROM lonnymq._dequeue_held(pg_temp.q(), lonnymq._now_ms(), 60000, 3, NULL, '{}', '{}') r;
ROLLBACK;
-- Channels whose new work only their holder has folded in (p_hinted, from
-- _absorb_hints) are served too when no ready channel is found: none is ready
-- here, so only b is.
BEGIN;
UPDATE lonnymq.channel SET ready_ms = NULL WHERE queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served
FROM lonnymq._dequeue_held(pg_temp.q(), lonnymq._now_ms(), 60000, 5, NULL, '{}', '{}') r;
SELECT pg_temp.contents(r.ids) AS claimed, pg_temp.names(r.served) AS served
FROM lonnymq._dequeue_held(pg_temp.q(), lonnymq._now_ms(), 60000, 5, NULL, '{}',
                           ARRAY(SELECT id FROM lonnymq.channel WHERE name = 'b')) r;
ROLLBACK;
-- A held channel's due heads out of attempts go to the archive as dead first
-- (c1 here), then its messages are claimed (c2).
BEGIN;
SELECT name, max_attempts FROM lonnymq.channel_set('steps', 'c', max_attempts => 1);
UPDATE lonnymq.message SET num_attempts = 1 WHERE content = 'c1' AND queue_id = (pg_temp.q()).id;
SELECT pg_temp.contents(lonnymq._serve_held(pg_temp.q(), (SELECT c FROM lonnymq.channel c WHERE c.name = 'c'),
                                            lonnymq._now_ms(), 60000, 5)) AS claimed;
SELECT convert_from(content, 'UTF8') AS content, outcome FROM lonnymq.message_archive WHERE queue = 'steps';
ROLLBACK;
-- It goes by the channel's policy as it is now, not as the row it is given
-- (the pick's snapshot) shows it: a channel made accounted or paused since
-- is neither served nor dead-lettered while held (c1, out of attempts, stays:
-- archiving it without the row of a channel with a capacity would miss its
-- count).
BEGIN;
SELECT name, max_attempts FROM lonnymq.channel_set('steps', 'c', max_attempts => 1);
UPDATE lonnymq.message SET num_attempts = 1 WHERE content = 'c1' AND queue_id = (pg_temp.q()).id;
CREATE TEMP TABLE picked ON COMMIT DROP AS SELECT c FROM lonnymq.channel c WHERE c.name IN ('a', 'b', 'c');
SELECT name, max_concurrency FROM lonnymq.channel_set('steps', 'a', max_concurrency => 2);
SELECT lonnymq.channel_pause('steps', 'b') AS paused;
SELECT name, max_size FROM lonnymq.channel_set('steps', 'c', max_size => 10, max_attempts => 1);
SELECT (p.c).name, pg_temp.contents(lonnymq._serve_held(pg_temp.q(), p.c, lonnymq._now_ms(), 60000, 5)) AS claimed
FROM picked p ORDER BY 1;
SELECT count(*) AS archived FROM lonnymq.message_archive WHERE queue = 'steps';
ROLLBACK;

-- _serve_channel, a round of one channel locked by the caller: its head
-- claimed and returned as delivered (the row as it is now in the table), its
-- turn recorded (the channel moves behind the others), a limited channel's
-- slot counted, no head lock (b2 is still due).
BEGIN;
SELECT name, max_concurrency FROM lonnymq.channel_set('steps', 'b', max_concurrency => 2);
CREATE TEMP TABLE served ON COMMIT DROP AS
SELECT * FROM lonnymq._serve_channel(pg_temp.q(),
                                     (SELECT c FROM lonnymq.channel c WHERE c.name = 'b' FOR NO KEY UPDATE),
                                     lonnymq._now_ms(), 60000, true);
SELECT convert_from(s.content, 'UTF8') AS content, s.num_attempts, s.raised,
       (s.id, s.content, s.state, s.num_attempts, s.dequeue_at)
       IS NOT DISTINCT FROM (m.id, m.content, m.state, m.num_attempts,
                             lonnymq._dequeue_at(m.dequeue_ms, m.priority)) AS as_stored
FROM served s LEFT JOIN lonnymq.message m ON m.id = s.id AND m.locked_until_ms IS NOT NULL;
SELECT name, locked_count FROM lonnymq.channel c WHERE c.queue_id = (pg_temp.q()).id
ORDER BY c.ready_ms, c.turn_seq, c.id;
-- Nothing due (b2 deferred): no delivery, and one head lock counted against
-- the budget; with none allowed (p_may_raise false) the head stays early (the
-- channel takes an empty turn instead) and no slot moves.
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms + 3600000
WHERE content = 'b2' AND queue_id = (pg_temp.q()).id;
UPDATE lonnymq.channel SET ready_ms = lonnymq._now_ms() WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
SELECT turn_seq AS seq_before FROM lonnymq.channel WHERE name = 'b' AND queue_id = (pg_temp.q()).id \gset
SELECT s.id IS NULL AS nothing, s.raised
FROM lonnymq._serve_channel(pg_temp.q(), (SELECT c FROM lonnymq.channel c WHERE c.name = 'b' FOR NO KEY UPDATE),
                            lonnymq._now_ms(), 60000, false) s;
SELECT head_ms <= lonnymq._now_ms() AS head_stays, locked_count, turn_seq > :seq_before AS empty_turn
FROM lonnymq.channel WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
ROLLBACK;

-- _dequeue_single: the fairest free channel's head, with its channel's name.
-- When the fairest has nothing due, it reports that channel as tried; when
-- no free channel is ready, nothing as tried (the next step is the held one).
BEGIN;
SELECT d.channel, convert_from(d.content, 'UTF8') AS content, d.num_attempts, d.tried
FROM lonnymq._dequeue_single(pg_temp.q(), lonnymq._now_ms(), 60000, false) d;
UPDATE lonnymq.message SET dequeue_ms = dequeue_ms + 3600000
WHERE content IN ('b1', 'b2') AND queue_id = (pg_temp.q()).id;
UPDATE lonnymq.channel SET ready_ms = 0 WHERE name = 'b' AND queue_id = (pg_temp.q()).id;
SELECT d.id IS NULL AS nothing, pg_temp.names(d.tried) AS tried
FROM lonnymq._dequeue_single(pg_temp.q(), lonnymq._now_ms(), 60000, false) d;
UPDATE lonnymq.channel SET ready_ms = NULL WHERE queue_id = (pg_temp.q()).id;
SELECT d.id IS NULL AS nothing, d.tried
FROM lonnymq._dequeue_single(pg_temp.q(), lonnymq._now_ms(), 60000, false) d;
-- With p_channelless (no channel is ready, the channel-less messages are all
-- there is): the first channel-less message, no channel, no turn recorded.
SELECT d.channel IS NULL AS channelless, convert_from(d.content, 'UTF8') AS content, d.num_attempts, d.tried
FROM lonnymq._dequeue_single(pg_temp.q(), lonnymq._now_ms(), 60000, true) d;
SELECT channelless_turn_seq FROM lonnymq.queue WHERE name = 'steps';
-- With no channel ready, message_dequeue delivers the next channel-less
-- message, then finds nothing.
SELECT d.channel IS NULL AS channelless, convert_from(d.content, 'UTF8') AS content, d.recovered
FROM lonnymq.message_dequeue('steps', 60000) d;
SELECT count(*) AS nothing_left FROM lonnymq.message_dequeue('steps', 60000);
ROLLBACK;
-- A due hint keeps a channel-less single dequeue off step 0: the hint may make
-- a channel ready that comes first. Here x's message, created before the
-- channel-less one, is only in a hint when the dequeue starts; x is then the
-- fairer and its message comes back (step 0 alone would have returned the
-- channel-less one).
BEGIN;
SELECT status FROM lonnymq.message_create('guard', 'x', 'x1');
SELECT pg_sleep(0.01);
SELECT status FROM lonnymq.message_create('guard', NULL, 'free');
SELECT count(*) AS hints, bool_and(c.ready_ms IS NULL) AS x_not_ready_yet
FROM lonnymq.channel_hint h JOIN lonnymq.channel c ON c.id = h.channel_id
JOIN lonnymq.queue q ON q.id = c.queue_id WHERE q.name = 'guard';
SELECT d.channel, convert_from(d.content, 'UTF8') AS content FROM lonnymq.message_dequeue('guard', 60000) d;
ROLLBACK;

-- _dequeue_many goes on where step 0 stopped: the channels in p_tried are
-- passed over, the rest served in rounds. Expired locks come first and are
-- counted as recovered; the channel-less messages take their turns between
-- the channels'.
BEGIN;
SELECT pg_temp.contents(r.ids) AS claimed, r.recovered
FROM lonnymq._dequeue_many(pg_temp.q(), lonnymq._now_ms(), 60000, 3, NULL, false, NULL, '{}',
                           ARRAY(SELECT id FROM lonnymq.channel WHERE name = 'a'), false) r;
UPDATE lonnymq.message SET locked_until_ms = 1 WHERE queue_id = (pg_temp.q()).id AND content = 'b1';
SELECT pg_temp.contents(r.ids) AS claimed, r.recovered
FROM lonnymq._dequeue_many(pg_temp.q(), lonnymq._now_ms(), 60000, 10,
                           pg_temp.channelless_ms(), true, NULL, '{}', '{}', false) r;
ROLLBACK;
-- Told that no channel is ready (the probe saw none), it takes the
-- channel-less messages, as many as wanted, in one statement and no turn;
-- told nothing (NULL), it looks, finds the channels and interleaves turns.
BEGIN;
SELECT pg_temp.contents(r.ids) AS claimed
FROM lonnymq._dequeue_many(pg_temp.q(), lonnymq._now_ms(), 60000, 3,
                           pg_temp.channelless_ms(), false, false, '{}', '{}', false) r;
SELECT channelless_turn_seq FROM lonnymq.queue WHERE name = 'steps';
ROLLBACK;
BEGIN;
SELECT pg_temp.contents(r.ids) AS claimed
FROM lonnymq._dequeue_many(pg_temp.q(), lonnymq._now_ms(), 60000, 4,
                           pg_temp.channelless_ms(), false, NULL, '{}', '{}', false) r;
SELECT channelless_turn_seq > 0 AS channelless_turn FROM lonnymq.queue WHERE name = 'steps';
ROLLBACK;
-- A single dequeue whose fairest channels have nothing due (stale keys: two
-- here, one taken by step 0, one by a round of _dequeue_many) goes on to the
-- next ready channel, a limited one included. (1.5 went to the held step
-- after the first, which never serves an accounted channel: nothing came back.)
BEGIN;
SELECT name, max_concurrency FROM lonnymq.channel_set('stale', 'limited', max_concurrency => 1);
SELECT status FROM lonnymq.message_create('stale', 'limited', 'l1');
SELECT x.status FROM unnest(ARRAY['early1', 'early2']) ch,
     lonnymq.message_create('stale', ch, 'e', dequeue_at => now() + interval '1 hour') x;
UPDATE lonnymq.channel c SET ready_ms = 0 FROM lonnymq.queue q
WHERE q.id = c.queue_id AND q.name = 'stale' AND c.name IN ('early1', 'early2');
SELECT d.channel, convert_from(d.content, 'UTF8') AS content FROM lonnymq.message_dequeue('stale', 60000) d;
-- Both passed over: each had its head raised to its message an hour away (or,
-- had a producer been in flight, taken an empty turn), so neither is ready now.
SELECT c.name, c.ready_ms <= lonnymq._now_ms() AS ready FROM lonnymq.channel c
JOIN lonnymq.queue q ON q.id = c.queue_id WHERE q.name = 'stale' ORDER BY c.name;
ROLLBACK;
-- The same in a batch, as single dequeues in a row: a round of two locks the
-- stale channel and the first limited one; the next round looks at every
-- other ready channel again and serves the second limited one. (1.5 then
-- looked only at the channels it already held: one message, not two.)
BEGIN;
SELECT x.name, x.max_concurrency FROM unnest(ARRAY['limited1', 'limited2']) ch,
     lonnymq.channel_set('stale', ch, max_concurrency => 1) x;
SELECT status FROM lonnymq.message_create('stale', 'limited1', 'l1');
SELECT status FROM lonnymq.message_create('stale', 'limited2', 'l2');
SELECT status FROM lonnymq.message_create('stale', 'early', 'e', dequeue_at => now() + interval '1 hour');
UPDATE lonnymq.channel c SET ready_ms = 0 FROM lonnymq.queue q
WHERE q.id = c.queue_id AND q.name = 'stale' AND c.name = 'early';
SELECT string_agg(convert_from(d.content, 'UTF8'), ' ' ORDER BY d.n) AS delivered
FROM lonnymq.message_dequeue('stale', 60000, 2)
     WITH ORDINALITY AS d(id, channel, content, state, num_attempts, dequeue_at, recovered, n);
ROLLBACK;

-- Functions whose statements take arrays plan them once (generic plans): a
-- custom plan knows an array's length, so the plan cache would plan them
-- again at every call (bench/README.md, "plan cache").
SELECT p.proname FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'lonnymq'::regnamespace AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig)
ORDER BY 1;
