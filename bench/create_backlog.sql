-- The database that bench/create_profile.sh and bench/ab_create.sh measure
-- message_create_batch in (after CREATE EXTENSION lonnymq): 100 channels with
-- a backlog whose heads are set (one dequeue ran), so a batch writes no hints.
SELECT count(*) FROM lonnymq.message_create_batch('bench',
    (SELECT array_agg('c' || (i % 100 + 1)) FROM generate_series(1, 10000) i),
    (SELECT array_agg('x'::bytea) FROM generate_series(1, 10000)));
SELECT count(*) FROM lonnymq.message_dequeue('bench', 600000, 200);
VACUUM ANALYZE;
