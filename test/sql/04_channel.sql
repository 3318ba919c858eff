-- channel_set, channel_delete, the idle sweep, capacity (max_size),
-- retain_completed, archive_requeue and archive_prune.
\i test/prelude.psql

-- channel_set returns the channel row; calling it again updates the policy.
SELECT name, explicit, max_concurrency, release_interval_ms, max_size, max_attempts, retain_completed, locked_count
FROM lonnymq.channel_set('jobs', 'acme', max_concurrency => 3, release_interval_ms => 10, max_size => 100,
                         max_attempts => 5, retain_completed => true);
SELECT name, max_concurrency, release_interval_ms, max_size, max_attempts, retain_completed
FROM lonnymq.channel_set('jobs', 'acme');
SELECT channel, max_concurrency, release_interval_ms, max_size, max_attempts, retain_completed
FROM lonnymq.channel_stats WHERE queue = 'jobs';

-- Capacity: creates beyond max_size are dropped; removals make room again.
SELECT max_size FROM lonnymq.channel_set('cap', 'small', max_size => 2);
SELECT * FROM lonnymq.message_create('cap', 'small', 's1');
SELECT * FROM lonnymq.message_create('cap', 'small', 's2', dedup_key => 'same');
SELECT * FROM lonnymq.message_create('cap', 'small', 's3');
-- Full, but a live duplicate is still reported as such.
SELECT * FROM lonnymq.message_create('cap', 'small', 's2-again', dedup_key => 'same');
SELECT * FROM lonnymq.message_create_batch('cap', ARRAY['small', 'other'], ARRAY['s4', 'o1']::bytea[]);
SELECT count(*) AS live_in_small FROM lonnymq.messages WHERE channel = 'small';
SELECT lonnymq.message_cancel(1);
SELECT * FROM lonnymq.message_create('cap', 'small', 's5');
SELECT channel, lonnymq.message_complete(id, num_attempts) FROM lonnymq.message_dequeue('cap', 60000, 10)
ORDER BY channel;
SELECT * FROM lonnymq.message_create('cap', 'small', 's6');
SELECT * FROM lonnymq.message_create('cap', 'small', 's7');
SELECT * FROM lonnymq.message_create('cap', 'small', 's8');
-- Turning the limit on over existing messages counts them exactly.
SELECT count(*) FROM (SELECT lonnymq.message_create('cap', 'later-capped', 'x') FROM generate_series(1, 3)) s;
SELECT max_size FROM lonnymq.channel_set('cap', 'later-capped', max_size => 3);
SELECT status FROM lonnymq.message_create('cap', 'later-capped', 'one too many');
SELECT max_size FROM lonnymq.channel_set('cap', 'later-capped', max_size => NULL);
SELECT status FROM lonnymq.message_create('cap', 'later-capped', 'unlimited again');
-- max_size 0 refuses everything.
SELECT max_size FROM lonnymq.channel_set('cap', 'closed', max_size => 0);
SELECT status FROM lonnymq.message_create('cap', 'closed', 'no');
SELECT channel, ready FROM lonnymq.channel_stats WHERE queue = 'cap' ORDER BY channel;

-- retain_completed keeps completed messages in the archive; others are not kept.
SELECT retain_completed FROM lonnymq.channel_set('arch', 'kept', retain_completed => true);
SELECT status FROM lonnymq.message_create('arch', 'kept', 'keep me', state => 'st');
SELECT status FROM lonnymq.message_create('arch', 'plain', 'forget me');
SELECT lonnymq.message_complete(id, num_attempts) FROM lonnymq.message_dequeue('arch', 60000, 20);
SELECT queue, channel, convert_from(content, 'UTF8') AS content, state, num_attempts, outcome, error,
       archived_at >= created_at AS ordered_times
FROM lonnymq.message_archive ORDER BY id;

-- archive_requeue: the message comes back with its content and state and
-- fresh attempts; the archive row goes.
SELECT id AS archived FROM lonnymq.message_archive WHERE channel = 'kept' \gset
SELECT status, id IS NOT NULL AS has_id FROM lonnymq.archive_requeue(:archived);
SELECT channel, convert_from(content, 'UTF8') AS content, state, num_attempts FROM lonnymq.messages
WHERE queue = 'arch';
SELECT count(*) AS archive_rows_left FROM lonnymq.message_archive WHERE channel = 'kept';
SELECT * FROM lonnymq.archive_requeue(:archived);
-- Into a full channel: dropped, and the archive row stays.
SELECT lonnymq.message_fail(d.id, d.num_attempts, 'broken')
FROM (SELECT * FROM lonnymq.message_dequeue('cap', 60000, 10) WHERE channel = 'small' ORDER BY id LIMIT 1) d;
SELECT status FROM lonnymq.message_create('cap', 'small', 'fills the gap');
SELECT id AS failed_small FROM lonnymq.message_archive WHERE channel = 'small' AND outcome = 'failed' \gset
SELECT status FROM lonnymq.archive_requeue(:failed_small);
SELECT count(*) AS still_archived FROM lonnymq.message_archive WHERE id = :failed_small;

-- archive_prune removes rows older than the interval (and spent batch keys).
SELECT count(*) AS archived_now FROM lonnymq.message_archive;
SELECT lonnymq.archive_prune('1 hour') AS pruned_recent;
UPDATE lonnymq.message_archive SET archived_at = archived_at - interval '2 hours';  -- test-only aging
SELECT lonnymq.archive_prune('300000 years') AS nothing_that_old;
SELECT lonnymq.archive_prune('1 hour') AS pruned_old;
SELECT count(*) AS archive_left FROM lonnymq.message_archive;

-- channel_delete: not_empty, deleted, not_found.
SELECT lonnymq.channel_delete('jobs', 'acme');
SELECT lonnymq.channel_delete('jobs', 'acme');
SELECT lonnymq.channel_delete('cap', 'small');
SELECT lonnymq.channel_delete('nowhere', 'acme');

-- The sweep removes implicit channels once empty and idle, never explicit
-- ones, never channels with messages.
SELECT status FROM lonnymq.message_create('sweep', 'busy', 'stays', delay_ms => 3600000);
SELECT status FROM lonnymq.message_create('sweep', 'done', 'goes');
SELECT channel, lonnymq.message_complete(id, num_attempts) FROM lonnymq.message_dequeue('sweep', 60000, 5);
SELECT max_size FROM lonnymq.channel_set('sweep', 'configured');
SELECT lonnymq.channel_sweep() AS swept_with_default_idle_time;
SET lonnymq.channel_idle_ms = 0;
SELECT lonnymq.channel_sweep() AS swept;
SELECT channel FROM lonnymq.channel_stats WHERE queue = 'sweep' ORDER BY channel;
-- Creating a new channel sweeps idle ones too (creation pays for removal).
SELECT lonnymq.message_cancel(id) FROM lonnymq.messages WHERE queue = 'sweep';
SELECT count(*) AS refreshed FROM lonnymq.message_dequeue('sweep', 60000);  -- notices busy is empty
SELECT status FROM lonnymq.message_create('sweep', 'newcomer', 'hello');
SELECT channel, ready FROM lonnymq.channel_stats WHERE queue = 'sweep' ORDER BY channel;
-- A batch into an idle channel and a new one sweeps once, for the new one.
-- The sweep removes the idle channel the batch has just pinned (its own lock
-- does not stop it); the batch creates it again, and every message lands in
-- a live channel.
SELECT channel, lonnymq.message_complete(id, num_attempts) FROM lonnymq.message_dequeue('sweep', 60000);
SELECT count(*) AS refreshed FROM lonnymq.message_dequeue('sweep', 60000);  -- notices newcomer is empty
SELECT c.id AS newcomer_id FROM lonnymq.channel c WHERE c.name = 'newcomer' \gset
SELECT status, count(*) FROM lonnymq.message_create_batch('sweep', ARRAY['newcomer', 'fresh', 'newcomer'],
                                                          ARRAY['a', 'b', 'c']::bytea[]) GROUP BY status;
SELECT c.name, c.id <> :newcomer_id AS created_again FROM lonnymq.channel c WHERE c.name = 'newcomer';
SELECT channel, ready FROM lonnymq.channel_stats WHERE queue = 'sweep' ORDER BY channel;
SELECT channel, convert_from(content, 'UTF8') AS content FROM lonnymq.message_dequeue('sweep', 60000, 10)
ORDER BY content;
RESET lonnymq.channel_idle_ms;

-- Invalid arguments: 22023 and nothing changed.
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set(NULL, 'c')$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', 'c', max_concurrency => 0)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', 'c', release_interval_ms => -1)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', 'c', release_interval_ms => NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', 'c', max_size => -1)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', 'c', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_set('q', 'c', retain_completed => NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_delete('q', NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_sweep(-1)$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_requeue(NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_prune(NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_prune('-1 day')$$);
SET lonnymq.channel_idle_ms = 'soon';
SELECT pg_temp.try($$SELECT lonnymq.channel_sweep()$$);
RESET lonnymq.channel_idle_ms;
SELECT pg_temp.state() = :'before' AS nothing_changed;

SELECT count(*) AS broken_invariants FROM lonnymq.verify();
