-- Without pg_cron in the database, the scheduling calls fail with a clear
-- error (SQLSTATE 55000, object_not_in_prerequisite_state) and change
-- nothing; the rest of the extension works.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(8);

SELECT hasnt_extension('pg_cron', 'pg_cron is not installed in this database');
SELECT throws_ok($$SELECT lonnymq.schedule_set('tick', '* * * * *', 'q', 'c', 'x')$$,
                 '55000', 'lonnymq: pg_cron is not installed in this database',
                 'schedule_set: 55000 with a clear message');
SELECT throws_ok($$SELECT lonnymq.schedule_set(name => 'tick', cron => '* * * * *', queue => 'q', channel => NULL, content => 'x')$$,
                 '55000', 'lonnymq: pg_cron is not installed in this database',
                 'schedule_set in named notation: the same');
SELECT throws_ok($$SELECT lonnymq.schedule_delete('tick')$$,
                 '55000', 'lonnymq: pg_cron is not installed in this database', 'schedule_delete: 55000');
SELECT throws_ok($$SELECT lonnymq.maintenance_schedule()$$,
                 '55000', 'lonnymq: pg_cron is not installed in this database', 'maintenance_schedule: 55000');
SELECT throws_ok($$SELECT lonnymq.maintenance_unschedule()$$,
                 '55000', 'lonnymq: pg_cron is not installed in this database', 'maintenance_unschedule: 55000');
-- Invalid arguments are still reported as such first.
SELECT throws_ok($$SELECT lonnymq.schedule_set('tick', '* * * * *', 'q', 'c', NULL)$$,
                 '22023', NULL, 'schedule_set: NULL content is 22023 before anything else');
-- Everything else works.
SELECT is((SELECT status FROM lonnymq.message_create('q', 'c', 'x')), 'created', 'message_create works without pg_cron');

SELECT * FROM finish();
ROLLBACK;
