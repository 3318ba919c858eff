-- pick_turn_merge.sh: the pick, then the turns by id (what _serve_round does).
BEGIN;
SELECT array_agg(r.id ORDER BY r.ready_ms, r.turn_seq, r.id) AS ids FROM (SELECT c.id, c.ready_ms, c.turn_seq FROM lonnymq.channel c WHERE c.queue_id = 1 AND c.ready_ms <= :now AND NOT c.paused ORDER BY c.ready_ms, c.turn_seq, c.id LIMIT :n FOR NO KEY UPDATE SKIP LOCKED) r \gset
UPDATE lonnymq.channel c SET last_turn_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint, turn_seq = nextval('lonnymq.turn_seq'), ready_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint WHERE c.id = ANY (:ids::bigint[]);
COMMIT;
