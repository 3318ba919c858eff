-- ===========================================================================
-- Advisory lock keys of channels. Defined before the tables: the channel
-- table keeps its key in a generated column (see 10_tables.sql).
-- ===========================================================================

-- The advisory-lock key of a channel. Producers hold it shared until commit;
-- whoever deletes a channel or changes its capacity takes it exclusively, so
-- no uncommitted message can be stranded by either.
CREATE OR REPLACE FUNCTION lonnymq._channel_lock_key(p_queue_id integer, p_channel text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.hashtext(p_queue_id::text || '/' || p_channel);
END
$$;
COMMENT ON FUNCTION lonnymq._channel_lock_key(integer, text) IS 'Advisory lock key of a channel.';

-- The first advisory-lock key word: every lonnymq lock lives in this class.
CREATE OR REPLACE FUNCTION lonnymq._lock_class() RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 1819176557;  -- the bytes of 'lonm'
END
$$;
COMMENT ON FUNCTION lonnymq._lock_class() IS 'Advisory lock class of lonnymq.';

-- A second advisory lock class, keyed like the first: "the head of this
-- channel may rise". Everyone only ever tries it, so nobody waits on it.
-- Producers that skip a hint hold it shared until commit; a dequeuer that
-- raises a head holds it exclusively (see _channel_raise_head).
CREATE OR REPLACE FUNCTION lonnymq._head_lock_class() RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 1819176552;  -- the bytes of 'lonh'
END
$$;
COMMENT ON FUNCTION lonnymq._head_lock_class() IS 'Advisory lock class of channel head raises.';
