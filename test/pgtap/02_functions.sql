-- The SQL API (README, "A tour in SQL"): every function exists with exactly the
-- argument names, types and defaults callers use with named notation, and
-- the documented return type; and calls in named notation work.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(152);

CREATE TEMP TABLE api (name text, args name[], arguments text, result text, returns text);
INSERT INTO api VALUES
('channel_set', '{text,text,integer,bigint,bigint,integer,boolean}',
 'queue text, channel text, max_concurrency integer DEFAULT NULL::integer, release_interval_ms bigint DEFAULT 0, '
 'max_size bigint DEFAULT NULL::bigint, max_attempts integer DEFAULT NULL::integer, retain_completed boolean DEFAULT false',
 'lonnymq.channel', 'lonnymq.channel'),
('channel_delete', '{text,text}', 'queue text, channel text', 'text', 'text'),
('message_create', '{text,text,bytea,timestamp with time zone,bigint,integer,text,bytea}',
 'queue text, channel text, content bytea, dequeue_at timestamp with time zone DEFAULT NULL::timestamp with time zone, '
 'delay_ms bigint DEFAULT 0, priority integer DEFAULT 0, dedup_key text DEFAULT NULL::text, state bytea DEFAULT NULL::bytea, '
 'OUT status text, OUT id bigint',
 'record', 'record'),
('message_create_batch', '{text,text[],bytea[],timestamp with time zone[],text[],text}',
 'queue text, channels text[], contents bytea[], dequeue_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], '
 'dedup_keys text[] DEFAULT NULL::text[], idempotency_key text DEFAULT NULL::text',
 'TABLE(status text, id bigint)', 'setof record'),
('message_dequeue', '{text,bigint,integer}',
 'queue text, lock_ms bigint, max_messages integer DEFAULT 1',
 'TABLE(id bigint, channel text, content bytea, state bytea, num_attempts bigint, dequeue_at timestamp with time zone, recovered boolean)',
 'setof record'),
('message_complete', '{bigint,bigint}', 'id bigint, num_attempts bigint', 'text', 'text'),
('message_complete_batch', '{bigint[],bigint[]}', 'ids bigint[], num_attempts bigint[]',
 'TABLE(id bigint, status text)', 'setof record'),
('message_defer', '{bigint,bigint,timestamp with time zone,bigint,bytea}',
 'id bigint, num_attempts bigint, dequeue_at timestamp with time zone DEFAULT NULL::timestamp with time zone, '
 'delay_ms bigint DEFAULT 0, state bytea DEFAULT NULL::bytea',
 'text', 'text'),
('message_heartbeat', '{bigint,bigint,bigint}', 'id bigint, num_attempts bigint, lock_ms bigint', 'text', 'text'),
('message_fail', '{bigint,bigint,text}', 'id bigint, num_attempts bigint, error text DEFAULT NULL::text', 'text', 'text'),
('message_cancel', '{bigint}', 'id bigint', 'text', 'text'),
('archive_requeue', '{bigint}', 'archive_id bigint, OUT status text, OUT id bigint', 'record', 'record'),
-- The bulk form: a second signature, whose first parameter differs from the
-- single form's in name and type, and it needs two, so neither notation can
-- confuse them.
('archive_requeue', '{text,text,text,timestamp with time zone,timestamp with time zone}',
 'queue text, outcome text, channel text DEFAULT NULL::text, '
 'archived_after timestamp with time zone DEFAULT NULL::timestamp with time zone, '
 'archived_before timestamp with time zone DEFAULT NULL::timestamp with time zone, OUT requeued bigint, OUT dropped bigint',
 'record', 'record'),
('archive_prune', '{interval,text,text,text}',
 'older_than interval, queue text DEFAULT NULL::text, channel text DEFAULT NULL::text, outcome text DEFAULT NULL::text',
 'bigint', 'bigint'),
('channel_pause', '{text,text}', 'queue text, channel text', 'text', 'text'),
('channel_resume', '{text,text}', 'queue text, channel text', 'text', 'text'),
('queue_pause', '{text}', 'queue text', 'text', 'text'),
('queue_resume', '{text}', 'queue text', 'text', 'text'),
-- Bounded inspection for dashboards and metrics (86_dashboard.sql).
('queue_summary', '{integer}', 'count_limit integer DEFAULT 10000',
 'TABLE(queue text, paused boolean, channels bigint, ready bigint, scheduled bigint, locked bigint, archived bigint, oldest_ready_ms bigint)',
 'setof record'),
('channel_summary', '{text,integer,integer}', 'queue text, max_channels integer DEFAULT 100, count_limit integer DEFAULT 1000',
 'TABLE(channel text, paused boolean, explicit boolean, max_concurrency integer, release_interval_ms bigint, max_size bigint, '
 'max_attempts integer, retain_completed boolean, in_flight bigint, ready bigint, scheduled bigint, live bigint, '
 'oldest_ready_ms bigint, saturated boolean)',
 'setof record'),
('message_browse', '{text,text,text,integer}',
 'queue text, channel text DEFAULT NULL::text, state text DEFAULT NULL::text, max_messages integer DEFAULT 50',
 'TABLE(id bigint, message_channel text, num_attempts bigint, dequeue_at timestamp with time zone, '
 'locked_until timestamp with time zone, created_at timestamp with time zone, priority integer, dedup_key text, '
 'content_bytes integer)',
 'setof record'),
('periodic_summary', '{integer}', 'max_rows integer DEFAULT 100',
 'TABLE(queue text, name text, paused boolean, message_id bigint, num_attempts bigint, next_at timestamp with time zone, '
 'locked_until timestamp with time zone, created_at timestamp with time zone, state bytea)',
 'setof record'),
('wait_hint_ms', '{text}', 'queue text', 'bigint', 'bigint'),
('wait_begin', '{text}', 'queue text', 'bigint', 'bigint'),
('wait_end', '{text}', 'queue text', 'void', 'void'),
('schedule_set', '{text,text,text,text,bytea}', 'name text, cron text, queue text, channel text, content bytea',
 'bigint', 'bigint'),
('schedule_delete', '{text}', 'name text', 'text', 'text'),
('verify', '{}', '', 'SETOF text', 'setof text'),
-- Beyond the calls of the tour: the idle-channel sweep and the maintenance job.
('channel_sweep', '{integer}', 'max_channels integer DEFAULT 1000', 'integer', 'integer'),
('maintenance_schedule', '{text,interval}',
 'cron text DEFAULT ''*/10 * * * *''::text, archive_retention interval DEFAULT ''7 days''::interval', 'bigint', 'bigint'),
('maintenance_unschedule', '{}', '', 'text', 'text');

-- The argument types of a function, as has_function names them.
CREATE FUNCTION pg_temp.arg_types(p_oid oid) RETURNS name[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(format_type(t.oid, NULL) ORDER BY t.n), '{}')::name[]
    FROM pg_proc p, unnest(p.proargtypes::oid[]) WITH ORDINALITY t(oid, n) WHERE p.oid = p_oid
$$;

-- 28 signatures x 4 tests.
SELECT has_function('lonnymq', a.name, a.args, a.name || '(' || array_to_string(a.args, ', ') || ') exists')
FROM api a ORDER BY a.name;
SELECT function_returns('lonnymq', a.name, a.args, a.returns, a.name || ' returns ' || a.returns)
FROM api a ORDER BY a.name;
SELECT is(pg_get_function_arguments(p.oid), a.arguments, a.name || ': argument names, types and defaults')
FROM api a JOIN pg_proc p ON p.proname = a.name AND p.pronamespace = 'lonnymq'::regnamespace
                        AND pg_temp.arg_types(p.oid) = a.args
ORDER BY a.name, a.args;
SELECT is(pg_get_function_result(p.oid), a.result, a.name || ': result columns')
FROM api a JOIN pg_proc p ON p.proname = a.name AND p.pronamespace = 'lonnymq'::regnamespace
                        AND pg_temp.arg_types(p.oid) = a.args
ORDER BY a.name, a.args;

-- No other overload (named notation could become ambiguous), and no other
-- public (non-underscore) function than the ones above.
SELECT is((SELECT array_agg(p.proname || pg_temp.arg_types(p.oid)::text ORDER BY p.proname, pg_temp.arg_types(p.oid))
           FROM pg_proc p
           WHERE p.pronamespace = 'lonnymq'::regnamespace AND p.proname NOT LIKE '\_%'),
          (SELECT array_agg(a.name || a.args::text ORDER BY a.name, a.args) FROM api a),
          'the public functions are exactly the API, with exactly these signatures');

-- Named notation, arguments in a different order than declared.
SELECT is((SELECT row(c.max_concurrency, c.release_interval_ms, c.max_size, c.max_attempts, c.retain_completed, c.explicit)::text
           FROM lonnymq.channel_set(retain_completed => true, max_attempts => 3, max_size => 10,
                                    release_interval_ms => 0, max_concurrency => 2, channel => 'c', queue => 'q') c),
          '(2,0,10,3,t,t)', 'channel_set in named notation');
SELECT is((SELECT status FROM lonnymq.message_create(state => 's0', dedup_key => 'k1', priority => 0, delay_ms => 0,
                                                     dequeue_at => now() - interval '1 minute', content => 'm1',
                                                     channel => 'c', queue => 'q')),
          'created', 'message_create in named notation');
SELECT is((SELECT status FROM lonnymq.message_create(content => 'm2', channel => NULL, queue => 'q', priority => 1)),
          'created', 'message_create with only some named arguments');
SELECT results_eq(
    $$SELECT status FROM lonnymq.message_create_batch(idempotency_key => 'b1', dedup_keys => ARRAY[NULL, 'k3'],
                                                     dequeue_ats => ARRAY[NULL, now() - interval '2 minutes'],
                                                     contents => ARRAY['m3', 'm4']::bytea[], channels => ARRAY['c', NULL],
                                                     queue => 'q')$$,
    $$VALUES ('created'), ('created')$$, 'message_create_batch in named notation');
SELECT is((SELECT lonnymq.wait_hint_ms(queue => 'q')), 0::bigint, 'wait_hint_ms in named notation');
SELECT is((SELECT count(*) FROM lonnymq.message_dequeue(max_messages => 4, lock_ms => 60000, queue => 'q')),
          4::bigint, 'message_dequeue in named notation');
SELECT is((SELECT lonnymq.message_heartbeat(lock_ms => 120000, num_attempts => m.num_attempts, id => m.id)
           FROM lonnymq.messages m WHERE m.content = 'm1'),
          'extended', 'message_heartbeat in named notation');
SELECT is((SELECT lonnymq.message_defer(state => 's1', delay_ms => 0, dequeue_at => NULL, num_attempts => m.num_attempts, id => m.id)
           FROM lonnymq.messages m WHERE m.content = 'm1'),
          'deferred', 'message_defer in named notation');
SELECT is((SELECT lonnymq.message_complete(num_attempts => m.num_attempts, id => m.id)
           FROM lonnymq.messages m WHERE m.content = 'm2'),
          'completed', 'message_complete in named notation');
SELECT results_eq(
    $$SELECT status FROM lonnymq.message_complete_batch(
          num_attempts => ARRAY(SELECT num_attempts FROM lonnymq.messages WHERE content = 'm3'),
          ids => ARRAY(SELECT id FROM lonnymq.messages WHERE content = 'm3'))$$,
    $$VALUES ('completed')$$, 'message_complete_batch in named notation');
SELECT is((SELECT lonnymq.message_fail(error => 'boom', num_attempts => m.num_attempts, id => m.id)
           FROM lonnymq.messages m WHERE m.content = 'm4'),
          'failed', 'message_fail in named notation');
SELECT is((SELECT lonnymq.message_cancel(id => m.id) FROM lonnymq.messages m WHERE m.content = 'm1'),
          'cancelled', 'message_cancel in named notation');
SELECT is((SELECT r.status FROM lonnymq.message_archive a, lonnymq.archive_requeue(archive_id => a.id) r
           WHERE a.content = 'm4'),
          'created', 'archive_requeue in named notation');
SELECT is((SELECT lonnymq.archive_prune(older_than => interval '1 day')), 0::bigint, 'archive_prune in named notation');
SELECT is((SELECT lonnymq.archive_prune(outcome => 'dead', channel => 'c', queue => 'q', older_than => interval '0 days')),
          0::bigint, 'archive_prune with filters in named notation');
SELECT is((SELECT row(r.requeued, r.dropped)::text
           FROM lonnymq.archive_requeue(archived_before => now() + interval '1 day', archived_after => NULL,
                                        outcome => 'failed', channel => 'c', queue => 'q') r),
          '(0,0)', 'archive_requeue over a filter in named notation');
SELECT is((SELECT lonnymq.channel_pause(channel => 'c', queue => 'q')), 'paused', 'channel_pause in named notation');
SELECT is((SELECT lonnymq.channel_resume(channel => 'c', queue => 'q')), 'resumed', 'channel_resume in named notation');
SELECT is((SELECT lonnymq.queue_pause(queue => 'q')), 'paused', 'queue_pause in named notation');
SELECT is((SELECT lonnymq.queue_resume(queue => 'q')), 'resumed', 'queue_resume in named notation');
SELECT is((SELECT s.ready FROM lonnymq.queue_summary(count_limit => 5) s WHERE s.queue = 'q'), 1::bigint,
          'queue_summary in named notation');
SELECT is((SELECT count(*) FROM lonnymq.channel_summary(count_limit => 5, max_channels => 10, queue => 'q')), 1::bigint,
          'channel_summary in named notation');
SELECT lonnymq.message_create('q', 'c', 'b', dedup_key => 'browse-me') IS NOT NULL AS created \gset
SELECT is((SELECT bool_or(b.dedup_key = 'browse-me')
           FROM lonnymq.message_browse(max_messages => 50, state => 'ready', channel => 'c', queue => 'q') b),
          true, 'message_browse in named notation');
SELECT is((SELECT count(*) FROM lonnymq.periodic_summary(max_rows => 10)), 0::bigint,
          'periodic_summary in named notation');
SELECT is((SELECT lonnymq.channel_delete(channel => 'nope', queue => 'q')), 'not_found', 'channel_delete in named notation');
SELECT is((SELECT lonnymq.channel_sweep(max_channels => 10)), 0, 'channel_sweep in named notation');
SELECT is((SELECT count(*) FROM lonnymq.verify()), 0::bigint, 'verify() is empty after all of it');

SELECT * FROM finish();
ROLLBACK;
