-- pick_turn_merge.sh: the pick and the turns in one UPDATE.
BEGIN;
UPDATE lonnymq.channel c SET last_turn_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint, turn_seq = r.seq, ready_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint FROM (SELECT p.id, nextval('lonnymq.turn_seq') AS seq FROM (SELECT c.id FROM lonnymq.channel c WHERE c.queue_id = 1 AND c.ready_ms <= :now AND NOT c.paused ORDER BY c.ready_ms, c.turn_seq, c.id LIMIT :n FOR NO KEY UPDATE SKIP LOCKED) p) r WHERE c.id = r.id RETURNING r.id;
COMMIT;
