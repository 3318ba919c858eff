-- A short tour of lonnymq in SQL: tenants as channels, limits, fair dequeue,
-- retries and the archive. Run it with psql against a database that has
-- CREATE EXTENSION lonnymq (scripts/demo does that for you).
\set ON_ERROR_STOP on
\pset footer off
SET lonnymq.notify = off;

\echo '--- 1. Policies: acme may run 1 job at a time; globex at most one start per hour.'
SELECT name, max_concurrency, release_interval_ms, max_attempts
FROM lonnymq.channel_set('tour', 'acme', max_concurrency => 1, max_attempts => 3);
SELECT name, max_concurrency, release_interval_ms
FROM lonnymq.channel_set('tour', 'globex', release_interval_ms => 3600000);

\echo '--- 2. A noisy tenant queues 6 jobs, two small tenants 2 each, plus an urgent one.'
SELECT count(*) AS created FROM lonnymq.message_create_batch('tour',
    ARRAY['noisy','noisy','noisy','noisy','noisy','noisy','acme','acme','globex','globex'],
    ARRAY['n1','n2','n3','n4','n5','n6','a1','a2','g1','g2']::bytea[]);
SELECT status FROM lonnymq.message_create('tour', 'noisy', 'n-urgent', priority => 1);
SELECT channel, ready, scheduled, locked, max_concurrency, release_interval_ms FROM lonnymq.channel_stats
WHERE queue = 'tour' ORDER BY channel;

\echo '--- 3. A worker takes 6: fair across tenants, acme limited to 1, globex to 1 per hour.'
SELECT id, channel, convert_from(content, 'UTF8') AS job, num_attempts
FROM lonnymq.message_dequeue('tour', lock_ms => 30000, max_messages => 6);

\echo '--- 4. Finish everything in flight except a1, which fails transiently and is retried in 1 s.'
SELECT m.id, convert_from(m.content, 'UTF8') AS job,
       CASE WHEN m.content = 'a1' THEN lonnymq.message_defer(m.id, m.num_attempts, delay_ms => 1000,
                                                            state => 'retry after timeout')
            ELSE lonnymq.message_complete(m.id, m.num_attempts) END AS outcome
FROM lonnymq.messages m WHERE m.queue = 'tour' AND m.locked_until IS NOT NULL ORDER BY m.id;
SELECT lonnymq.wait_hint_ms('tour') AS next_ready_in_ms;

\echo '--- 5. A second worker: acme frees up, globex still waits for its hour.'
SELECT id, channel, convert_from(content, 'UTF8') AS job, num_attempts, state
FROM lonnymq.message_dequeue('tour', lock_ms => 30000, max_messages => 10);

\echo '--- 6. One job is poison: it fails into the archive with its error.'
SELECT lonnymq.message_fail(id, num_attempts, 'ValueError: bad input')
FROM lonnymq.messages WHERE queue = 'tour' AND content = 'n6' AND locked_until IS NOT NULL;
SELECT message_id, channel, convert_from(content, 'UTF8') AS job, outcome, error
FROM lonnymq.message_archive WHERE queue = 'tour';

\echo '--- 7. Totals, and the health check (no rows = healthy).'
SELECT * FROM lonnymq.queue_stats WHERE queue = 'tour';
SELECT * FROM lonnymq.verify();
