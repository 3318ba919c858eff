-- ALTER EXTENSION lonnymq UPDATE with live traffic, from every released
-- version (test/upgrade_route.psql, once per version): CREATE EXTENSION
-- lonnymq VERSION 'X' from X's frozen install script. Each route:
-- messages pending, scheduled, locked, expired, deferred, archived,
-- deduplicated, hints not yet folded in and a limited channel in flight; then
-- the update, and every message is still served exactly once under the same
-- rules. Last, the updated schema must equal a fresh install of the new
-- version, object by object. (scripts/test-upgrade also runs the whole SQL
-- suite on an install that CREATE EXTENSION reached through the upgrade
-- scripts.)
\set VERBOSITY terse

-- Every object of the extension, described so that two installs compare equal
-- exactly when they would behave the same: functions with their full
-- definitions and privileges, tables with their columns in order, indexes,
-- constraints, views, sequences, comments, dump registrations, membership.
SET check_function_bodies = off;  -- (no lonnymq schema yet)
CREATE FUNCTION pg_temp.schema_objects() RETURNS TABLE (kind text, name text, definition text)
LANGUAGE sql AS $$
    SELECT 'function', p.oid::regprocedure::text,
           concat_ws(' | ', pg_get_functiondef(p.oid), p.proacl::text, obj_description(p.oid, 'pg_proc'))
    FROM pg_proc p WHERE p.pronamespace = 'lonnymq'::regnamespace
    UNION ALL
    SELECT 'relation', c.relname,
           concat_ws(' | ', c.relkind::text, c.relacl::text, c.reloptions::text,
                     obj_description(c.oid, 'pg_class'),
                     CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END,
                     CASE WHEN c.relkind = 'i' THEN pg_get_indexdef(c.oid) END,
                     (SELECT string_agg(concat_ws(' ', a.attname, format_type(a.atttypid, a.atttypmod),
                                                  CASE WHEN a.attnotnull THEN 'not null' END,
                                                  pg_get_expr(d.adbin, d.adrelid), a.attgenerated::text,
                                                  a.attacl::text),
                                        ', ' ORDER BY a.attnum)
                      FROM pg_attribute a
                      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
    FROM pg_class c WHERE c.relnamespace = 'lonnymq'::regnamespace
    UNION ALL
    SELECT 'sequence', s.seqrelid::regclass::text,
           concat_ws(' ', s.seqtypid::regtype::text, s.seqstart, s.seqincrement, s.seqmax, s.seqmin, s.seqcycle)
    FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
    WHERE c.relnamespace = 'lonnymq'::regnamespace
    UNION ALL
    SELECT 'constraint', r.conrelid::regclass::text || '.' || r.conname, pg_get_constraintdef(r.oid)
    FROM pg_constraint r WHERE r.connamespace = 'lonnymq'::regnamespace
    UNION ALL
    SELECT 'trigger', t.tgrelid::regclass::text || '.' || t.tgname, pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'lonnymq'::regnamespace AND NOT t.tgisinternal
    UNION ALL
    SELECT 'dumped', cfg.relid::regclass::text, coalesce(cfg.condition, '')
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS cfg(relid, condition)
    WHERE e.extname = 'lonnymq'
    UNION ALL
    SELECT 'member', pg_describe_object(d.classid, d.objid, d.objsubid), ''
    FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
    WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'lonnymq'
$$;
RESET check_function_bodies;
-- The routes taken; the last query names any release without one.
CREATE TEMP TABLE routes (version text);


-- From 1.0: lonnymq--1.0--1.1.sql, then each later upgrade script.
\set from '1.0'
\i test/upgrade_route.psql
-- From 1.1.
\set from '1.1'
\i test/upgrade_route.psql
-- From 1.2.
\set from '1.2'
\i test/upgrade_route.psql
-- From 1.3.
\set from '1.3'
\i test/upgrade_route.psql
-- From 1.4.
\set from '1.4'
\i test/upgrade_route.psql
-- From 1.5.
\set from '1.5'
\i test/upgrade_route.psql
-- From 1.6.
\set from '1.6'
\i test/upgrade_route.psql
-- From 1.7.
\set from '1.7'
\i test/upgrade_route.psql
-- From 1.8.
\set from '1.8'
\i test/upgrade_route.psql
-- From 1.9.
\set from '1.9'
\i test/upgrade_route.psql
-- From 1.10.
\set from '1.10'
\i test/upgrade_route.psql
-- From 1.11.
\set from '1.11'
\i test/upgrade_route.psql
-- From 1.12.
\set from '1.12'
\i test/upgrade_route.psql

-- Every version CREATE EXTENSION can install, but the newest, has a route above.
SELECT v.version AS release_without_route
FROM pg_available_extension_versions v
WHERE v.name = 'lonnymq'
  AND v.version <> (SELECT default_version FROM pg_available_extensions WHERE name = 'lonnymq')
  AND v.version NOT IN (SELECT version FROM routes);
