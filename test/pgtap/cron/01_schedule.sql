-- Periodic messages and maintenance through a real pg_cron (preloaded in the
-- test cluster, cron.database_name = this database). Not wrapped in a
-- transaction: pg_cron's scheduler only sees committed jobs. One real job
-- fires; the wait for the next minute boundary is the only slow part.

CREATE EXTENSION IF NOT EXISTS pg_cron;
CREATE EXTENSION lonnymq;
SELECT plan(22);

-- schedule_set creates a job named 'lonnymq:<name>' that creates the message.
SELECT lonnymq.schedule_set('nightly', '0 3 * * *', 'reports', 'acme', 'build') AS first_job_id \gset
SELECT is((SELECT jobid FROM cron.job WHERE jobname = 'lonnymq:nightly'), :first_job_id::bigint,
          'schedule_set returns the id of the job named lonnymq:nightly');
SELECT is((SELECT schedule FROM cron.job WHERE jobname = 'lonnymq:nightly'), '0 3 * * *', 'with the schedule');
SELECT is((SELECT username::text FROM cron.job WHERE jobname = 'lonnymq:nightly'), current_user::text,
          'owned by the caller (the job runs with the caller''s rights)');
SELECT is((SELECT database FROM cron.job WHERE jobname = 'lonnymq:nightly'), current_database()::text,
          'in this database');
SELECT matches((SELECT command FROM cron.job WHERE jobname = 'lonnymq:nightly'),
               'lonnymq\.message_create\(.*reports.*acme', 'its command creates the message');

-- A second call replaces it: one job, the new schedule and command.
SELECT lonnymq.schedule_set(name => 'nightly', cron => '30 4 * * 1', queue => 'reports', channel => NULL,
                            content => 'rebuild') AS second_job_id \gset
SELECT is((SELECT count(*) FROM cron.job WHERE jobname = 'lonnymq:nightly'), 1::bigint,
          'a second schedule_set replaces the job');
SELECT is((SELECT schedule FROM cron.job WHERE jobname = 'lonnymq:nightly'), '30 4 * * 1', 'with the new schedule');
SELECT is(:second_job_id::bigint, :first_job_id::bigint, 'and the same job id');
-- The job's command is what creates the message: running it by hand does.
DO $$ BEGIN EXECUTE (SELECT command FROM cron.job WHERE jobname = 'lonnymq:nightly'); END $$;
SELECT is((SELECT coalesce(channel, '(none)') || ':' || convert_from(content, 'UTF8') FROM lonnymq.messages
           WHERE queue = 'reports'),
          '(none):rebuild', 'the new command creates the new message');

-- Invalid schedules and arguments: 22023, nothing scheduled.
SELECT throws_ok($$SELECT lonnymq.schedule_set('bad', 'not a cron line', 'q', 'c', 'x')$$, '22023', NULL,
                 'an invalid cron schedule raises 22023');
SELECT throws_ok($$SELECT lonnymq.schedule_set('bad', '61 * * * *', 'q', 'c', 'x')$$, '22023', NULL,
                 'an out-of-range cron schedule raises 22023');
SELECT throws_ok($$SELECT lonnymq.schedule_set(NULL, '* * * * *', 'q', 'c', 'x')$$, '22023', NULL,
                 'a NULL name raises 22023');
SELECT is((SELECT count(*) FROM cron.job WHERE jobname = 'lonnymq:bad'), 0::bigint, 'nothing was scheduled');

-- schedule_delete: deleted, then not_found.
SELECT is(lonnymq.schedule_delete('nightly'), 'deleted', 'schedule_delete removes the job');
SELECT is(lonnymq.schedule_delete('nightly'), 'not_found', 'a second schedule_delete finds nothing');

-- The maintenance job.
SELECT lonnymq.maintenance_schedule('*/5 * * * *', '2 days') AS maintenance_job_id \gset
SELECT matches((SELECT command FROM cron.job WHERE jobname = 'lonnymq-maintenance'),
               'lonnymq\.archive_prune\(.*2 days.*lonnymq\.channel_sweep\(',
               'maintenance_schedule prunes the archive and sweeps idle channels');
SELECT is(lonnymq.maintenance_schedule(), :maintenance_job_id::bigint, 'scheduling it again replaces it');
SELECT is((SELECT schedule FROM cron.job WHERE jobname = 'lonnymq-maintenance'), '*/10 * * * *',
          'with the default schedule');
SELECT is(lonnymq.maintenance_unschedule(), 'deleted', 'maintenance_unschedule removes it');
SELECT is(lonnymq.maintenance_unschedule(), 'not_found', 'a second maintenance_unschedule finds nothing');

-- A real job firing: every minute, into queue cron_tick. Wait (at most 75 s)
-- for the scheduler to run it.
SELECT lonnymq.schedule_set('tick', '* * * * *', 'cron_tick', 'timer', 'tick') IS NOT NULL AS scheduled \gset
CREATE FUNCTION pg_temp.wait_for_tick(p_timeout_s integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. p_timeout_s LOOP
        IF EXISTS (SELECT 1 FROM lonnymq.messages m WHERE m.queue = 'cron_tick') THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(1);
    END LOOP;
    RETURN false;
END
$$;
SELECT ok(pg_temp.wait_for_tick(75), 'the pg_cron job fired and created a message');
SELECT is((SELECT channel || ':' || convert_from(content, 'UTF8') FROM lonnymq.messages
           WHERE queue = 'cron_tick' ORDER BY id LIMIT 1),
          'timer:tick', 'with the scheduled channel and content');
-- What the job runs said, should the wait have failed.
SELECT diag(j.status || ': ' || coalesce(j.return_message, ''))
FROM cron.job_run_details j JOIN cron.job c ON c.jobid = j.jobid
WHERE c.jobname = 'lonnymq:tick' AND j.status <> 'succeeded';

SELECT lonnymq.schedule_delete('tick') AS tick_deleted \gset

SELECT * FROM finish();
DROP EXTENSION lonnymq CASCADE;
DROP EXTENSION pg_cron;
