-- ===========================================================================
-- Privileges. Nothing is granted to PUBLIC: the schema itself is private to
-- the extension owner. API functions are SECURITY DEFINER so that roles get
-- EXECUTE on the calls they need and never touch the tables; docs/grants.sql has
-- the producer, consumer and monitor GRANT recipes.
-- ===========================================================================

-- Functions are executable by PUBLIC by default; take that away from all of ours.
DO $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'lonnymq'::regnamespace
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_function);
    END LOOP;
END
$$;
REVOKE ALL ON ALL TABLES IN SCHEMA lonnymq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lonnymq FROM PUBLIC;

-- The validators that the SECURITY INVOKER pg_cron functions call. They only
-- inspect their arguments; reaching them still needs USAGE on the schema.
GRANT EXECUTE ON FUNCTION lonnymq._invalid(text), lonnymq._check_name(text, text, boolean),
    lonnymq._check_create(bytea, bigint, integer, text), lonnymq._check_age(interval, text),
    lonnymq._require_pg_cron() TO PUBLIC;
