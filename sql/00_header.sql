-- lonnymq: a multi-tenant message queue inside PostgreSQL.
-- Built from sql/*.sql by `make scripts`; edit those files, not the generated script.
\echo Use "CREATE EXTENSION lonnymq" to load this file. \quit

-- The schema must be the installer's own and empty. CREATE EXTENSION installs
-- into an existing lonnymq schema as it finds it: one that another role owns
-- (or could write to) would let that role rename it, or plant look-alike
-- objects that the SECURITY DEFINER functions then run with the owner's
-- rights. Written with pg_catalog operators only: nothing else is trusted yet.
DO $guard$
DECLARE
    v_owner oid;
BEGIN
    SELECT n.nspowner INTO v_owner FROM pg_catalog.pg_namespace n
    WHERE n.nspname OPERATOR(pg_catalog.=) 'lonnymq';
    IF v_owner OPERATOR(pg_catalog.<>) (SELECT r.oid FROM pg_catalog.pg_roles r
                                        WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RAISE EXCEPTION 'lonnymq: schema lonnymq exists and is owned by role %, not by the installing role %',
            pg_catalog.pg_get_userbyid(v_owner), CURRENT_USER
            USING ERRCODE = '42501',
                  HINT = 'Drop or rename that schema (its owner may have planted objects in it), then install again.';
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
