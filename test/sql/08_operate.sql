-- Operator controls: channel_pause/resume, queue_pause/resume, and the bulk
-- archive calls (archive_requeue over a filter, archive_prune with filters).
\i test/prelude.psql

-- Two tenants with work; pausing one leaves the other served.
SELECT count(*) FROM (SELECT lonnymq.message_create('jobs', ch, ch::bytea)
                      FROM unnest(ARRAY['a', 'a', 'a', 'b', 'b']) ch) s;
SELECT lonnymq.channel_pause('jobs', 'a');
SELECT lonnymq.channel_pause('jobs', 'a');  -- again: still paused
SELECT channel, ready, paused FROM lonnymq.channel_stats WHERE queue = 'jobs' ORDER BY channel;
SELECT channel, convert_from(content, 'UTF8') FROM lonnymq.message_dequeue('jobs', 60000, 10) ORDER BY id;
SELECT count(*) AS nothing_more FROM lonnymq.message_dequeue('jobs', 60000, 10);
-- The paused tenant is not counted as ready work by the worker's hint.
SELECT lonnymq.wait_hint_ms('jobs') > 50000 AS only_lock_expiries_left;
-- Producers keep enqueueing into a paused channel.
SELECT status FROM lonnymq.message_create('jobs', 'a', 'a4');
SELECT lonnymq.channel_resume('jobs', 'a');
SELECT lonnymq.wait_hint_ms('jobs') AS hint_resumed;
SELECT channel, convert_from(content, 'UTF8') FROM lonnymq.message_dequeue('jobs', 60000, 10) ORDER BY id;

-- In-flight work of a paused channel settles normally, and the accounting
-- of a limited channel stays exact.
SELECT max_concurrency FROM lonnymq.channel_set('lim', 'c', max_concurrency => 1);
SELECT count(*) FROM (SELECT lonnymq.message_create('lim', 'c', ('c' || i)::bytea) FROM generate_series(1, 3) i) s;
CREATE TEMP TABLE held AS SELECT id, num_attempts FROM lonnymq.message_dequeue('lim', 60000);
SELECT lonnymq.channel_pause('lim', 'c');
SELECT lonnymq.message_complete(id, num_attempts) FROM held;
SELECT count(*) AS paused_not_served FROM lonnymq.message_dequeue('lim', 60000);
SELECT locked_count, ready_ms IS NOT NULL AS keeps_its_place FROM lonnymq.channel WHERE name = 'c';
SELECT lonnymq.channel_resume('lim', 'c');
SELECT convert_from(content, 'UTF8') AS served_after_resume FROM lonnymq.message_dequeue('lim', 60000, 5);
SELECT * FROM lonnymq.verify();

-- A paused implicit channel survives the idle sweep even when empty.
SET lonnymq.channel_idle_ms = 0;
SELECT status FROM lonnymq.message_create('sweep', 'idle', 'x');
SELECT lonnymq.message_complete(id, num_attempts) FROM lonnymq.message_dequeue('sweep', 60000);
SELECT lonnymq.channel_pause('sweep', 'idle');
SELECT lonnymq.channel_sweep() AS swept_while_paused;
SELECT lonnymq.channel_resume('sweep', 'idle');
SELECT lonnymq.channel_sweep() AS swept_after_resume;
RESET lonnymq.channel_idle_ms;

-- Queue pause: nothing is served, channel-less messages included; the
-- queue_stats row says so.
SELECT status FROM lonnymq.message_create('whole', NULL, 'free');
SELECT status FROM lonnymq.message_create('whole', 't', 'tenant');
SELECT lonnymq.queue_pause('whole');
SELECT queue, ready, paused FROM lonnymq.queue_stats WHERE queue = 'whole';
SELECT count(*) AS none_while_paused FROM lonnymq.message_dequeue('whole', 60000, 10);
SELECT lonnymq.wait_hint_ms('whole') AS hint_while_paused;
SELECT status FROM lonnymq.message_create('whole', 't', 'tenant2');
SELECT lonnymq.queue_resume('whole');
SELECT count(*) AS all_after_resume FROM lonnymq.message_dequeue('whole', 60000, 10);

-- Expected outcomes are statuses; mistakes are 22023 and change nothing.
SELECT lonnymq.channel_pause('jobs', 'nobody'), lonnymq.channel_resume('nowhere', 'a'),
       lonnymq.queue_pause('nowhere'), lonnymq.queue_resume('nowhere');
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.channel_pause(NULL, 'a')$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_pause('jobs', '')$$);
SELECT pg_temp.try($$SELECT lonnymq.channel_resume('jobs', NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.queue_pause(NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.queue_resume(repeat('x', 257))$$);
SELECT pg_temp.state() = :'before' AS unchanged;

-- Bulk redrive: fail six messages in two channels, then requeue by filter.
SELECT count(*) FROM (SELECT lonnymq.message_create('redrive', CASE WHEN i <= 4 THEN 'x' ELSE 'y' END, ('r' || i)::bytea)
                      FROM generate_series(1, 6) i) s;
SELECT count(*) FROM (SELECT lonnymq.message_fail(id, num_attempts, 'boom ' || convert_from(content, 'UTF8'))
                      FROM lonnymq.message_dequeue('redrive', 60000, 10)) s;
UPDATE lonnymq.message_archive SET archived_at = '2020-01-01' WHERE content IN ('r1', 'r2');
SELECT channel, outcome, count(*) FROM lonnymq.message_archive WHERE queue = 'redrive' GROUP BY 1, 2 ORDER BY 1;
-- Only the old ones of channel x.
SELECT * FROM lonnymq.archive_requeue('redrive', NULL, channel => 'x', archived_before => '2021-01-01');
SELECT convert_from(content, 'UTF8') AS back FROM lonnymq.messages WHERE queue = 'redrive' ORDER BY id;
-- An outcome that matches nothing.
SELECT * FROM lonnymq.archive_requeue('redrive', outcome => 'dead');
-- A full channel keeps the rest archived and says how many.
SELECT max_size FROM lonnymq.channel_set('redrive', 'x', max_size => 3);
SELECT * FROM lonnymq.archive_requeue('redrive', 'failed', 'x');
SELECT count(*) AS still_archived FROM lonnymq.message_archive WHERE queue = 'redrive' AND channel = 'x';
-- Everything else of the queue.
SELECT * FROM lonnymq.archive_requeue('redrive', outcome => 'failed', archived_after => now() - interval '1 hour');
SELECT channel, count(*) FROM lonnymq.messages WHERE queue = 'redrive' GROUP BY 1 ORDER BY 1;
-- The single-row form is unchanged.
SELECT * FROM lonnymq.archive_requeue(archive_id => (SELECT min(id) FROM lonnymq.message_archive WHERE queue = 'redrive'));
SELECT * FROM lonnymq.archive_requeue(-1);
-- One argument is always the single form, even quoted or NULL.
SELECT * FROM lonnymq.archive_requeue('-1');
SELECT pg_temp.try($$SELECT lonnymq.archive_requeue(NULL)$$);
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.try($$SELECT lonnymq.archive_requeue(queue => NULL, outcome => NULL)$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_requeue('redrive', outcome => 'lost')$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_requeue('redrive', NULL, archived_after => now(), archived_before => now() - interval '1 day')$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_requeue('redrive', NULL, channel => '')$$);
SELECT pg_temp.state() = :'before' AS unchanged;

-- Filtered prune: by queue, channel and outcome; the plain form as before.
SELECT count(*) FROM (SELECT lonnymq.message_create(q, 'p', 'p'::bytea) FROM unnest(ARRAY['pa', 'pa', 'pb']) q) s;
SELECT count(*) FROM (SELECT lonnymq.message_fail(id, num_attempts) FROM lonnymq.message_dequeue('pa', 60000, 10)) s;
SELECT count(*) FROM (SELECT lonnymq.message_fail(id, num_attempts) FROM lonnymq.message_dequeue('pb', 60000, 10)) s;
SELECT lonnymq.archive_prune('0 seconds', queue => 'pa', outcome => 'dead') AS none_dead;
SELECT lonnymq.archive_prune('0 seconds', queue => 'pa', channel => 'other') AS none_other;
SELECT lonnymq.archive_prune('1 hour', queue => 'pa') AS none_that_old;
SELECT lonnymq.archive_prune('0 seconds', queue => 'pa', channel => 'p', outcome => 'failed') AS pruned_pa;
SELECT queue, count(*) FROM lonnymq.message_archive WHERE queue IN ('pa', 'pb') GROUP BY 1;
SELECT lonnymq.archive_prune(interval '0 seconds') > 0 AS pruned_all;
SELECT count(*) AS archive_left FROM lonnymq.message_archive;
SELECT pg_temp.try($$SELECT lonnymq.archive_prune('0 seconds', outcome => 'gone')$$);
SELECT pg_temp.try($$SELECT lonnymq.archive_prune('0 seconds', queue => '')$$);

-- channel_summary puts saturated channels first, also when max_channels cuts
-- the list: here the saturated 'z' wins over 'a', whose work waited longer.
SELECT count(*) FROM (SELECT lonnymq.message_create('sum', 'a', c::bytea) FROM unnest(ARRAY['a1', 'a2']) c) s;
SELECT max_concurrency FROM lonnymq.channel_set('sum', 'z', max_concurrency => 1);
SELECT count(*) FROM (SELECT lonnymq.message_create('sum', 'z', c::bytea) FROM unnest(ARRAY['z1', 'z2']) c) s;
SELECT channel FROM lonnymq.message_dequeue('sum', 60000, 2) ORDER BY 1;
SELECT channel, saturated FROM lonnymq.channel_summary('sum', max_channels => 1);
SELECT channel, saturated FROM lonnymq.channel_summary('sum');

-- periodic_summary lists the periodic messages of every queue (a Worker's
-- every(NAME): channel 'lonnymq.every:NAME', dedup key the same), running or
-- not, paused or not; a tenant's channel is not listed; max_rows cuts the list.
SELECT status FROM lonnymq.message_create('per', 'lonnymq.every:tick', '{"every": "tick"}', delay_ms => 3600000,
                                          dedup_key => 'lonnymq.every:tick');
SELECT status FROM lonnymq.message_create('per', 'lonnymq.every:busy', '{"every": "busy"}',
                                          dedup_key => 'lonnymq.every:busy');
SELECT status FROM lonnymq.message_create('per', 'tenant', 'x');
SELECT status FROM lonnymq.message_create('per2', 'lonnymq.every:other', 'o', dedup_key => 'lonnymq.every:other');
SELECT channel FROM lonnymq.message_dequeue('per', 60000, 5) ORDER BY 1;
SELECT lonnymq.channel_pause('per', 'lonnymq.every:tick');
SELECT queue, name, paused, message_id IS NOT NULL AS has_message, num_attempts,
       next_at > now() + interval '59 minutes' AS next_in_an_hour, locked_until > now() AS running
FROM lonnymq.periodic_summary() WHERE queue LIKE 'per%';
SELECT count(*) FROM lonnymq.periodic_summary(max_rows => 1);
SELECT pg_temp.try($$SELECT * FROM lonnymq.periodic_summary(0)$$);
SELECT pg_temp.try($$SELECT * FROM lonnymq.periodic_summary(NULL)$$);
