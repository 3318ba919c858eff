-- ===========================================================================
-- Periodic work through pg_cron (optional). Everything else works without
-- pg_cron; these functions say clearly when it is missing. They run as the
-- caller (SECURITY INVOKER): the cron job then runs with the caller's rights,
-- never with more.
-- ===========================================================================

-- Raises a clear error unless pg_cron is installed in this database.
CREATE OR REPLACE FUNCTION lonnymq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron') THEN
        RAISE EXCEPTION 'lonnymq: pg_cron is not installed in this database'
            USING ERRCODE = '55000',
                  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database, '
                         'and run CREATE EXTENSION pg_cron.';
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._require_pg_cron() IS 'Raises 55000 when pg_cron is not installed here.';

-- Creates (or replaces) a pg_cron job named 'lonnymq:<name>' that creates
-- one message on the cron schedule. Returns the pg_cron job id.
CREATE OR REPLACE FUNCTION lonnymq.schedule_set(name text, cron text, queue text, channel text, content bytea) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job_id bigint;
BEGIN
    IF schedule_set.name IS NULL OR pg_catalog.length(schedule_set.name) = 0
       OR pg_catalog.length(schedule_set.name) > 200 THEN
        PERFORM lonnymq._invalid('name must be 1 to 200 characters long');
    END IF;
    IF schedule_set.cron IS NULL OR pg_catalog.length(schedule_set.cron) = 0 THEN
        PERFORM lonnymq._invalid('cron must be a cron schedule such as ''*/5 * * * *''');
    END IF;
    PERFORM lonnymq._check_name(schedule_set.queue, 'queue', false);
    PERFORM lonnymq._check_name(schedule_set.channel, 'channel', true);
    PERFORM lonnymq._check_create(schedule_set.content, 0, 0, NULL);
    PERFORM lonnymq._require_pg_cron();
    BEGIN
        v_job_id := cron.schedule('lonnymq:' || schedule_set.name, schedule_set.cron,
            pg_catalog.format('SELECT lonnymq.message_create(queue => %L, channel => %L, content => %L::bytea)',
                              schedule_set.queue, schedule_set.channel, schedule_set.content));
    EXCEPTION WHEN invalid_parameter_value OR internal_error THEN
        -- pg_cron rejects a bad schedule with a bare message; make it ours.
        PERFORM lonnymq._invalid(pg_catalog.format('invalid cron schedule %L: %s', schedule_set.cron, SQLERRM));
    END;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION lonnymq.schedule_set(text, text, text, text, bytea)
    IS 'Creates or replaces a pg_cron job that creates a message periodically.';

-- Removes the pg_cron job of schedule_set. Status: deleted, not_found.
CREATE OR REPLACE FUNCTION lonnymq.schedule_delete(name text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF schedule_delete.name IS NULL OR pg_catalog.length(schedule_delete.name) = 0 THEN
        PERFORM lonnymq._invalid('name must not be empty');
    END IF;
    PERFORM lonnymq._require_pg_cron();
    IF NOT EXISTS (SELECT 1 FROM cron.job j WHERE j.jobname = 'lonnymq:' || schedule_delete.name
                                             AND j.username = CURRENT_USER) THEN
        RETURN 'not_found';
    END IF;
    PERFORM cron.unschedule('lonnymq:' || schedule_delete.name);
    RETURN 'deleted';
END
$$;
COMMENT ON FUNCTION lonnymq.schedule_delete(text) IS 'Removes a schedule_set job: deleted, not_found.';

-- Schedules the maintenance job 'lonnymq-maintenance': prunes the archive
-- and spent idempotency keys older than archive_retention, and sweeps idle
-- channels. Returns the pg_cron job id; schedule it again to change it.
CREATE OR REPLACE FUNCTION lonnymq.maintenance_schedule(cron text DEFAULT '*/10 * * * *',
                                             archive_retention interval DEFAULT '7 days') RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job_id bigint;
BEGIN
    IF maintenance_schedule.cron IS NULL OR pg_catalog.length(maintenance_schedule.cron) = 0 THEN
        PERFORM lonnymq._invalid('cron must be a cron schedule such as ''*/10 * * * *''');
    END IF;
    PERFORM lonnymq._check_age(maintenance_schedule.archive_retention, 'archive_retention');
    PERFORM lonnymq._require_pg_cron();
    BEGIN
        v_job_id := cron.schedule('lonnymq-maintenance', maintenance_schedule.cron,
            pg_catalog.format('SELECT lonnymq.archive_prune(%L::interval), lonnymq.channel_sweep()',
                              maintenance_schedule.archive_retention));
    EXCEPTION WHEN invalid_parameter_value OR internal_error THEN
        PERFORM lonnymq._invalid(pg_catalog.format('invalid cron schedule %L: %s', maintenance_schedule.cron, SQLERRM));
    END;
    RETURN v_job_id;
END
$$;
COMMENT ON FUNCTION lonnymq.maintenance_schedule(text, interval)
    IS 'Schedules archive pruning and the idle-channel sweep through pg_cron.';

-- Removes the maintenance job. Status: deleted, not_found.
CREATE OR REPLACE FUNCTION lonnymq.maintenance_unschedule() RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM lonnymq._require_pg_cron();
    IF NOT EXISTS (SELECT 1 FROM cron.job j WHERE j.jobname = 'lonnymq-maintenance'
                                             AND j.username = CURRENT_USER) THEN
        RETURN 'not_found';
    END IF;
    PERFORM cron.unschedule('lonnymq-maintenance');
    RETURN 'deleted';
END
$$;
COMMENT ON FUNCTION lonnymq.maintenance_unschedule() IS 'Removes the maintenance job: deleted, not_found.';
