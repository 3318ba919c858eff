-- lonnymq 1.1 -> 1.2 (ALTER EXTENSION lonnymq UPDATE TO '1.2'; from 1.0,
-- PostgreSQL runs lonnymq--1.0--1.1.sql first).
-- Generated into lonnymq--1.1--1.2.sql by `make scripts`: this hand-written
-- part changes tables and drops what 1.2 no longer has; the function, view
-- and privilege files of sql/ follow it, replayed with CREATE OR REPLACE.
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.2'" to load this file. \quit

-- A schema that another role than the extension's owner owns lets that role
-- rename it and plant look-alikes that the SECURITY DEFINER functions call
-- (1.0 installed into such a schema, and a superuser's pg_restore without
-- --role leaves one): refuse to go on until it is the owner's again.
DO $guard$
DECLARE
    v_owner oid;
    v_extension_owner oid;
BEGIN
    SELECT n.nspowner INTO v_owner FROM pg_catalog.pg_namespace n
    WHERE n.nspname OPERATOR(pg_catalog.=) 'lonnymq';
    SELECT e.extowner INTO v_extension_owner FROM pg_catalog.pg_extension e
    WHERE e.extname OPERATOR(pg_catalog.=) 'lonnymq';
    IF v_owner OPERATOR(pg_catalog.<>) v_extension_owner THEN
        RAISE EXCEPTION 'lonnymq: schema lonnymq is owned by role %, not by %, who owns the extension',
            pg_catalog.pg_get_userbyid(v_owner), pg_catalog.pg_get_userbyid(v_extension_owner)
            USING ERRCODE = '42501',
                  HINT = 'Check the schema for objects you did not create, then make it the extension owner''s '
                         '(ALTER SCHEMA lonnymq OWNER TO ...) and update again.';
    END IF;
END
$guard$;

-- Dequeue is composed of set-based steps (50_dequeue.sql); the per-message
-- claim helper is gone.
DROP FUNCTION lonnymq._claim(bigint, bigint);

-- One word per concept: "channel-less" for messages without a channel (not
-- "nochannel" or "free": a free channel is one nobody holds), and _notify's
-- first argument is the LISTEN channel, not a queue channel.
ALTER TABLE lonnymq.queue RENAME COLUMN nochannel_turn_ms TO channelless_turn_ms;
ALTER TABLE lonnymq.queue RENAME COLUMN nochannel_turn_seq TO channelless_turn_seq;
-- PostgreSQL 18 catalogs NOT NULL as constraints named TABLE_COLUMN_not_null,
-- and a column rename keeps the old name: give them a fresh install's names
-- (before 18 there are no such constraints and this does nothing).
DO $$
DECLARE
    col text;
BEGIN
    FOREACH col IN ARRAY ARRAY['turn_ms', 'turn_seq'] LOOP
        IF EXISTS (SELECT FROM pg_catalog.pg_constraint
                   WHERE conrelid = 'lonnymq.queue'::regclass
                     AND conname = 'queue_nochannel_' || col || '_not_null') THEN
            EXECUTE format('ALTER TABLE lonnymq.queue RENAME CONSTRAINT %I TO %I',
                           'queue_nochannel_' || col || '_not_null',
                           'queue_channelless_' || col || '_not_null');
        END IF;
    END LOOP;
END
$$;
ALTER INDEX lonnymq.message_free_idx RENAME TO message_channelless_idx;
DROP FUNCTION lonnymq._notify(text, text, text);

-- Channels are coordinated through their rows, which no outside role can
-- lock, instead of advisory locks any role can take (see _pin_channel).
DROP FUNCTION lonnymq._channel_of_settle(lonnymq.message);
DROP FUNCTION lonnymq._channel_share(integer, text, boolean);
DROP FUNCTION lonnymq._lock_class();

-- Dedup keys are scoped to their channel (the queue's channel-less messages
-- share one scope): one tenant's key no longer answers another tenant's create.
DROP INDEX lonnymq.message_dedup_idx;
CREATE UNIQUE INDEX message_dedup_idx ON lonnymq.message (queue_id, (coalesce(channel_id, 0)), dedup_key)
    WHERE dedup_key IS NOT NULL;
DROP FUNCTION lonnymq._live_duplicate(integer, text);

-- Idempotency keys are scoped to the queue and the channels of the batch.
-- Keys recorded by 1.0 keep an empty digest, which message_create_batch
-- still treats as queue-wide, so a retry across the upgrade is not repeated.
ALTER TABLE lonnymq.batch ADD COLUMN channels_digest bytea NOT NULL DEFAULT '';
ALTER TABLE lonnymq.batch ALTER COLUMN channels_digest DROP DEFAULT;
ALTER TABLE lonnymq.batch DROP CONSTRAINT batch_pkey;
ALTER TABLE lonnymq.batch ADD PRIMARY KEY (queue_id, idempotency_key, channels_digest);

-- release_interval_ms is bounded (1000 years) so that no turn time plus it
-- can overflow; a larger one already set would fail every dequeue of its queue.
UPDATE lonnymq.channel SET release_interval_ms = 31557600000000 WHERE release_interval_ms > 31557600000000;

-- Channel rows spread thin (see 10_tables.sql); rows written from now on
-- follow it, existing pages fill up to it as their rows move.
ALTER TABLE lonnymq.channel SET (fillfactor = 20);

-- Operator controls (85_operate.sql): paused queues and channels. A paused
-- channel leaves the ready index and is never swept.
ALTER TABLE lonnymq.queue ADD COLUMN paused boolean NOT NULL DEFAULT false;
ALTER TABLE lonnymq.channel ADD COLUMN paused boolean NOT NULL DEFAULT false;
DROP INDEX lonnymq.channel_ready_idx;
CREATE INDEX channel_ready_idx ON lonnymq.channel (queue_id, ready_ms, turn_seq, id)
    WHERE ready_ms IS NOT NULL AND NOT paused;
DROP INDEX lonnymq.channel_idle_idx;
CREATE INDEX channel_idle_idx ON lonnymq.channel (last_turn_ms)
    WHERE NOT explicit AND head_ms IS NULL AND locked_count = 0 AND NOT paused;
-- archive_prune takes an optional queue, channel and outcome filter: a new
-- signature (an overload would make archive_prune('7 days') ambiguous).
-- Its GRANTs, if any were given, must be given again.
DROP FUNCTION lonnymq.archive_prune(interval);

-- Periodic messages are listed through an index of their channels only
-- (86_dashboard.sql, periodic_summary).
CREATE INDEX channel_periodic_idx ON lonnymq.channel (queue_id, name)
    WHERE pg_catalog.starts_with(name, 'lonnymq.every:');
