-- lonnymq: a multi-tenant message queue inside PostgreSQL.
-- Built from sql/*.sql by `make`; edit those files, not the built script.
\echo Use "CREATE EXTENSION lonnymq" to load this file. \quit

-- The schema must be the installer's own and empty. CREATE EXTENSION installs
-- into an existing lonnymq schema as it finds it: one that another role owns
-- (or could write to) would let that role rename it, or plant look-alike
-- objects that the SECURITY DEFINER functions then run with the owner's
-- rights. (pg_restore creates the schema before the extension: restored with
-- --role set to its owner, the extension keeps that owner; a superuser
-- restoring without it would silently become the owner of every SECURITY
-- DEFINER function, and is stopped here.) Written with pg_catalog operators
-- only: nothing else is trusted yet.
DO $guard$
DECLARE
    v_owner oid;
    v_installer oid;
BEGIN
    SELECT n.nspowner INTO v_owner FROM pg_catalog.pg_namespace n
    WHERE n.nspname OPERATOR(pg_catalog.=) 'lonnymq';
    -- The extension's owner (CREATE EXTENSION has recorded it already), or
    -- the role running the script (lonnymq install --sql-only).
    v_installer := coalesce(
        (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'lonnymq'),
        (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER));
    IF v_owner OPERATOR(pg_catalog.<>) v_installer THEN
        RAISE EXCEPTION 'lonnymq: schema lonnymq is owned by role %, not by %, who installs lonnymq',
            pg_catalog.pg_get_userbyid(v_owner), pg_catalog.pg_get_userbyid(v_installer)
            USING ERRCODE = '42501',
                  HINT = 'Drop or rename that schema (its owner may have planted objects in it), then install again. '
                         'Restoring a dump: run pg_restore with --role set to the schema''s owner, who then owns '
                         'the SECURITY DEFINER functions as before.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
               WHERE c.relnamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                  WHERE p.pronamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_type t
                  WHERE t.typnamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_operator o
                  WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'lonnymq'::pg_catalog.regnamespace) THEN
        RAISE EXCEPTION 'lonnymq: schema lonnymq is not empty'
            USING ERRCODE = '55000',
                  HINT = 'lonnymq installs only into a new or empty schema of its own.';
    END IF;
END
$guard$;
