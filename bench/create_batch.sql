-- pgbench script of bench/create_profile.sh and bench/ab_create.sh: a batch of
-- 100 into random channels among the 100 of bench/create_backlog.sql.
SELECT count(*) FROM lonnymq.message_create_batch('bench',
    (SELECT array_agg('c' || (1 + (random() * 99)::int)) FROM generate_series(1, 100)),
    array_fill('x'::bytea, ARRAY[100]));
