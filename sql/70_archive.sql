-- ===========================================================================
-- The archive: redrive and pruning.
-- ===========================================================================

-- Re-creates an archived message (redrive) with its content and state and
-- fresh attempts, through the normal creation path (limits apply). The
-- archive row is removed once the message exists again.
-- Returns (status, id): created, dropped, or not_found.
CREATE OR REPLACE FUNCTION lonnymq.archive_requeue(archive_id bigint, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_archived lonnymq.message_archive;
    v_result record;
BEGIN
    IF archive_requeue.archive_id IS NULL THEN
        PERFORM lonnymq._invalid('archive_id must not be NULL');
    END IF;
    SELECT a.* INTO v_archived FROM lonnymq.message_archive a WHERE a.id = archive_requeue.archive_id FOR UPDATE;
    IF v_archived.id IS NULL THEN
        status := 'not_found';
        RETURN;
    END IF;
    SELECT r.status, r.id INTO v_result
    FROM lonnymq._create_one(lonnymq._queue_id(v_archived.queue, true), v_archived.queue, v_archived.channel,
                             v_archived.content, lonnymq._now_ms(), 0, NULL, v_archived.state, 0, 'requeued',
                             true) r;
    IF v_result.status = 'created' THEN
        DELETE FROM lonnymq.message_archive a WHERE a.id = v_archived.id;
    END IF;
    status := v_result.status;
    id := v_result.id;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_requeue(bigint) IS 'Redrives an archived message: (created|dropped|not_found, id).';

-- Deletes archive rows (and spent batch idempotency keys) archived longer
-- ago than older_than. Returns the number of archive rows removed.
CREATE OR REPLACE FUNCTION lonnymq.archive_prune(older_than interval) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_removed bigint;
BEGIN
    PERFORM lonnymq._check_age(archive_prune.older_than, 'older_than');
    -- Nothing was archived 6000 years ago, and now() minus a longer interval
    -- may not be a timestamp at all (the earliest is 4714 BC).
    IF archive_prune.older_than > '6000 years'::interval THEN
        RETURN 0;
    END IF;
    DELETE FROM lonnymq.message_archive a WHERE a.archived_at < pg_catalog.now() - archive_prune.older_than;
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    DELETE FROM lonnymq.batch b WHERE b.created_at < pg_catalog.now() - archive_prune.older_than;
    RETURN v_removed;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_prune(interval) IS 'Removes archive rows older than the interval; returns the count.';
