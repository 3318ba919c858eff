-- ===========================================================================
-- The archive: redrive and pruning.
-- ===========================================================================

-- Re-creates an archived message (redrive) with its content and state and
-- fresh attempts, through the normal creation path (limits apply). The
-- archive row, which the caller holds locked, is removed once the message
-- exists again. Returns (status, id): created or dropped.
CREATE OR REPLACE FUNCTION lonnymq._requeue(p_archived lonnymq.message_archive, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    SELECT r.status, r.id INTO status, id
    FROM lonnymq._create_one(lonnymq._queue_id(p_archived.queue, true), p_archived.queue, p_archived.channel,
                             p_archived.content, lonnymq._now_ms(), 0, NULL, p_archived.state, 0, 'requeued',
                             true) r;
    IF status = 'created' THEN
        DELETE FROM lonnymq.message_archive a WHERE a.id = p_archived.id;
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._requeue(lonnymq.message_archive) IS 'Re-creates a locked archive row as a message.';

-- Redrives one archived message. Returns (status, id): created, dropped
-- (its channel is full), or not_found.
CREATE OR REPLACE FUNCTION lonnymq.archive_requeue(archive_id bigint, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_archived lonnymq.message_archive;
BEGIN
    IF archive_requeue.archive_id IS NULL THEN
        PERFORM lonnymq._invalid('archive_id must not be NULL');
    END IF;
    SELECT a.* INTO v_archived FROM lonnymq.message_archive a WHERE a.id = archive_requeue.archive_id FOR UPDATE;
    IF v_archived.id IS NULL THEN
        status := 'not_found';
        RETURN;
    END IF;
    SELECT r.status, r.id INTO status, id FROM lonnymq._requeue(v_archived) r;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_requeue(bigint) IS 'Redrives an archived message: (created|dropped|not_found, id).';

-- Validates the filter shared by the bulk archive calls.
CREATE OR REPLACE FUNCTION lonnymq._check_archive_filter(p_queue text, p_queue_nullable boolean, p_channel text,
                                                         p_outcome text, p_after timestamptz,
                                                         p_before timestamptz) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM lonnymq._check_name(p_queue, 'queue', p_queue_nullable);
    PERFORM lonnymq._check_name(p_channel, 'channel', true);
    IF p_outcome IS NOT NULL AND p_outcome NOT IN ('completed', 'failed', 'dead') THEN
        PERFORM lonnymq._invalid(pg_catalog.format('outcome must be completed, failed, dead or NULL, got %s',
                                                   p_outcome));
    END IF;
    IF p_after >= p_before THEN
        PERFORM lonnymq._invalid('archived_after must be earlier than archived_before');
    END IF;
END
$$;
COMMENT ON FUNCTION lonnymq._check_archive_filter(text, boolean, text, text, timestamptz, timestamptz)
    IS 'Validates a bulk archive filter, 22023 otherwise.';

-- Redrives every archived message of a queue that matches the filter (NULL:
-- any outcome, any channel, no time bound; archived_after inclusive,
-- archived_before exclusive), oldest first, each as archive_requeue would.
-- Rows another transaction is requeueing are passed over. Returns how many
-- were requeued and how many stay archived because their channel is full.
-- outcome has no default: a call with one argument is always the single
-- form above, so archive_requeue('42') cannot redrive a queue named "42".
CREATE OR REPLACE FUNCTION lonnymq.archive_requeue(queue text, outcome text, channel text DEFAULT NULL,
                                                   archived_after timestamptz DEFAULT NULL,
                                                   archived_before timestamptz DEFAULT NULL,
                                                   OUT requeued bigint, OUT dropped bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_archived lonnymq.message_archive;
BEGIN
    PERFORM lonnymq._check_archive_filter(archive_requeue.queue, false, archive_requeue.channel,
                                          archive_requeue.outcome, archive_requeue.archived_after,
                                          archive_requeue.archived_before);
    requeued := 0;
    dropped := 0;
    FOR v_archived IN
        SELECT a.* FROM lonnymq.message_archive a
        WHERE a.queue = archive_requeue.queue
          AND (archive_requeue.channel IS NULL OR a.channel = archive_requeue.channel)
          AND (archive_requeue.outcome IS NULL OR a.outcome = archive_requeue.outcome)
          AND (archive_requeue.archived_after IS NULL OR a.archived_at >= archive_requeue.archived_after)
          AND (archive_requeue.archived_before IS NULL OR a.archived_at < archive_requeue.archived_before)
        ORDER BY a.archived_at, a.id
        FOR UPDATE SKIP LOCKED
    LOOP
        IF (lonnymq._requeue(v_archived)).status = 'created' THEN
            requeued := requeued + 1;
        ELSE
            dropped := dropped + 1;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_requeue(text, text, text, timestamptz, timestamptz)
    IS 'Redrives every archived message matching a filter: (requeued, dropped).';

-- Deletes archive rows archived longer ago than older_than, only those of a
-- queue, channel and outcome when given. Without a channel or outcome filter
-- it also drops spent batch idempotency keys that old (of that queue when
-- given). Returns the number of archive rows removed.
CREATE OR REPLACE FUNCTION lonnymq.archive_prune(older_than interval, queue text DEFAULT NULL,
                                                 channel text DEFAULT NULL, outcome text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_removed bigint;
    v_before timestamptz;
BEGIN
    PERFORM lonnymq._check_age(archive_prune.older_than, 'older_than');
    PERFORM lonnymq._check_archive_filter(archive_prune.queue, true, archive_prune.channel,
                                          archive_prune.outcome, NULL, NULL);
    -- Nothing was archived 6000 years ago, and now() minus a longer interval
    -- may not be a timestamp at all (the earliest is 4714 BC).
    IF archive_prune.older_than > '6000 years'::interval THEN
        RETURN 0;
    END IF;
    v_before := pg_catalog.now() - archive_prune.older_than;
    DELETE FROM lonnymq.message_archive a
    WHERE a.archived_at < v_before
      AND (archive_prune.queue IS NULL OR a.queue = archive_prune.queue)
      AND (archive_prune.channel IS NULL OR a.channel = archive_prune.channel)
      AND (archive_prune.outcome IS NULL OR a.outcome = archive_prune.outcome);
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    IF archive_prune.channel IS NULL AND archive_prune.outcome IS NULL THEN
        DELETE FROM lonnymq.batch b
        WHERE b.created_at < v_before
          AND (archive_prune.queue IS NULL
               OR b.queue_id = (SELECT q.id FROM lonnymq.queue q WHERE q.name = archive_prune.queue));
    END IF;
    RETURN v_removed;
END
$$;
COMMENT ON FUNCTION lonnymq.archive_prune(interval, text, text, text)
    IS 'Removes archive rows older than the interval, optionally of one queue, channel, outcome; returns the count.';
