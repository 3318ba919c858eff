-- Security (README, "Privileges"): every function pins search_path to
-- pg_catalog, pg_temp;
-- the API runs as its owner (SECURITY DEFINER) so roles need only EXECUTE,
-- except the pg_cron calls, which run as the caller on purpose (a cron job
-- must never get more rights than whoever scheduled it); nothing in the
-- schema is open to PUBLIC except the five argument validators.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(14);

-- search_path: pinned, exactly these two schemas, pg_temp last (unquoted:
-- 'pg_catalog, pg_temp' quoted would be a single schema name).
-- Every function another role can reach (the API, the validators granted to
-- PUBLIC) and the generated column's key function pin it. Internal helpers do
-- not (see sql/20_internal.sql: a SET clause costs a GUC save and restore per
-- call and stops inlining): they run only inside those, under their pinned
-- path, so no role but the owner may execute them. The only other settings
-- allowed change no result: plan_cache_mode = force_generic_plan (one plan
-- for statements over arrays, see message_complete_batch) and
-- enable_seqscan = off (plans by key whatever the tables' size when planned,
-- see design.md).
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace
       AND (p.proname NOT LIKE '\_%' OR has_function_privilege('public', p.oid, 'EXECUTE')
            OR p.proname = '_channel_lock_key')
       AND (p.proconfig[1] IS DISTINCT FROM 'search_path=pg_catalog, pg_temp'
            OR NOT p.proconfig[2:] <@ ARRAY['plan_cache_mode=force_generic_plan', 'enable_seqscan=off'])),
    NULL, 'every function others can call sets search_path = pg_catalog, pg_temp and nothing else '
          '(but how it plans)');
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace
       AND p.proconfig IS NULL
       AND (p.prosecdef OR has_function_privilege('public', p.oid, 'EXECUTE') OR p.proname NOT LIKE '\_%')),
    NULL, 'functions without a pinned search_path are internal: invoker''s rights, closed to PUBLIC');
SELECT cmp_ok((SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'lonnymq'::regnamespace),
              '>=', 40::bigint, 'and there are functions to check');

-- SECURITY DEFINER on the API, INVOKER on the pg_cron calls.
SELECT is(
    (SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND p.proname NOT LIKE '\_%'
       AND p.proname NOT IN ('schedule_set', 'schedule_delete', 'maintenance_schedule', 'maintenance_unschedule')
       AND NOT p.prosecdef),
    NULL, 'every API function except the pg_cron ones is SECURITY DEFINER');
SELECT is(
    (SELECT array_agg(p.proname::text ORDER BY p.proname) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND p.prosecdef
       AND (p.proname LIKE '\_%'
            OR p.proname IN ('schedule_set', 'schedule_delete', 'maintenance_schedule', 'maintenance_unschedule'))),
    NULL, 'internal helpers and pg_cron calls are SECURITY INVOKER');
-- Internal helpers are only reachable through the API (no EXECUTE for
-- anyone but the owner), apart from the validators below.
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text)
     FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND a.grantee <> p.proowner),
    ARRAY['lonnymq._check_age(interval,text)', 'lonnymq._check_create(bytea,bigint,integer,text)',
          'lonnymq._check_name(text,text,boolean)', 'lonnymq._invalid(text)', 'lonnymq._require_pg_cron()'],
    'only the five validators are executable by anyone but the owner');
SELECT is(
    (SELECT array_agg(DISTINCT a.grantee::regrole::text) FROM pg_proc p,
            aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND a.grantee <> p.proowner),
    ARRAY['-'], 'and those are granted to PUBLIC (grantee 0) only');
-- The validators cannot be used to do anything: they only raise or return.
SELECT is((SELECT array_agg(p.provolatile::text ORDER BY p.proname) FROM pg_proc p
           WHERE p.pronamespace = 'lonnymq'::regnamespace
             AND p.proname IN ('_invalid', '_check_name', '_check_create')),
          ARRAY['i', 'i', 'i'], 'the PUBLIC validators are immutable');

-- Tables, views and sequences: no PUBLIC privilege at all, nor any grant to
-- anyone but the owner on a fresh install.
SELECT is(
    (SELECT array_agg(c.relname::text || ':' || a.privilege_type ORDER BY c.relname, a.privilege_type)
     FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char",
                                                                c.relowner))) a
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'm', 'p')
       AND a.grantee <> c.relowner),
    NULL, 'no privilege on any table, view or sequence for anyone but the owner');
SELECT is(
    (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'v', 'S') AND a.grantee = 0),
    NULL, 'nothing in the schema is granted to PUBLIC');
-- Column privileges too.
SELECT is(
    (SELECT count(*) FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND t.attacl IS NOT NULL),
    0::bigint, 'no column-level grants');

-- The schema: USAGE only for the owner.
SELECT is(
    (SELECT array_agg(a.grantee::regrole::text || ':' || a.privilege_type)
     FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
     WHERE n.nspname = 'lonnymq' AND a.grantee <> n.nspowner),
    NULL, 'schema lonnymq grants nothing to PUBLIC');
-- Every function says what it is for (COMMENT ON FUNCTION).
SELECT is(
    (SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
     WHERE p.pronamespace = 'lonnymq'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL),
    NULL, 'every function has a comment');

-- The control file: not superuser-only, not trusted.
SELECT is((SELECT array_agg(DISTINCT e.extowner::regrole::text) FROM pg_extension e WHERE e.extname = 'lonnymq'),
          ARRAY[current_user::text], 'the extension belongs to its installer');

SELECT * FROM finish();
ROLLBACK;
