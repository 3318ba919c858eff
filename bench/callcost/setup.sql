-- Objects for callcost.py: lonnymq 1.12, a family of trivial functions
-- declared like lonnymq's API, and (when loaded) the peers' queues.
CREATE EXTENSION IF NOT EXISTS lonnymq;
CREATE SCHEMA cc;
CREATE TYPE cc.row7 AS (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
                        dequeue_at timestamptz, recovered boolean);
CREATE TABLE cc.t (id bigint PRIMARY KEY, v int);
INSERT INTO cc.t VALUES (1, 1);
-- Scalar, constant, the arguments of message_dequeue.
CREATE FUNCTION cc.sql_c(q text, l bigint, n integer) RETURNS integer LANGUAGE sql VOLATILE AS 'SELECT 1';
CREATE FUNCTION cc.sql_c_sd(q text, l bigint, n integer) RETURNS integer LANGUAGE sql VOLATILE SECURITY DEFINER AS 'SELECT 1';
CREATE FUNCTION cc.sql_c_sd_sp(q text, l bigint, n integer) RETURNS integer LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS 'SELECT 1';
CREATE FUNCTION cc.pl_c(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_strict(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE STRICT AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_stable(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql STABLE AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_sd(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_sp(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_sd_sp(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_sd_ss(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET enable_seqscan = off AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_sd_pc(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET plan_cache_mode = force_generic_plan AS 'BEGIN RETURN 1; END';
CREATE FUNCTION cc.pl_c_sd_all(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
    AS 'BEGIN RETURN 1; END';
-- Row-returning shapes, one row of message_dequeue's columns.
CREATE FUNCTION cc.pl_tab(q text, l bigint, n integer)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    id := 1; channel := 'c'; content := '\x00'; state := NULL; num_attempts := 1;
    dequeue_at := '2026-01-01'; recovered := false;
    RETURN NEXT;
END
$$;
CREATE FUNCTION cc.pl_tab_sd_all(q text, l bigint, n integer)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    id := 1; channel := 'c'; content := '\x00'; state := NULL; num_attempts := 1;
    dequeue_at := '2026-01-01'; recovered := false;
    RETURN NEXT;
END
$$;
CREATE FUNCTION cc.pl_tab_empty(q text, l bigint, n integer)
RETURNS TABLE (id bigint, channel text, content bytea, state bytea, num_attempts bigint,
               dequeue_at timestamptz, recovered boolean)
LANGUAGE plpgsql VOLATILE AS 'BEGIN RETURN; END';
CREATE FUNCTION cc.pl_row(q text, l bigint, n integer) RETURNS cc.row7
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN ROW(1, 'c', '\x00'::bytea, NULL, 1, '2026-01-01'::timestamptz, false)::cc.row7;
END
$$;
CREATE FUNCTION cc.pl_setof(q text, l bigint, n integer) RETURNS SETOF cc.row7
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN NEXT ROW(1, 'c', '\x00'::bytea, NULL, 1, '2026-01-01'::timestamptz, false)::cc.row7;
END
$$;
CREATE FUNCTION cc.pl_out(q text, l bigint, n integer, OUT status text, OUT id bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    status := 'created'; id := 1;
END
$$;
CREATE FUNCTION cc.sql_setof(q text, l bigint, n integer) RETURNS SETOF cc.row7
LANGUAGE sql VOLATILE AS $$
    SELECT 1::bigint, 'c'::text, '\x00'::bytea, NULL::bytea, 1::bigint, '2026-01-01'::timestamptz, false
$$;
CREATE FUNCTION cc.sql_setof_sd_sp(q text, l bigint, n integer) RETURNS SETOF cc.row7
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT 1::bigint, 'c'::text, '\x00'::bytea, NULL::bytea, 1::bigint, '2026-01-01'::timestamptz, false
$$;
-- One primary-key read in the body: what a SET search_path does to the
-- cached plan of a statement.
CREATE FUNCTION cc.pl_q(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE
    AS 'BEGIN RETURN (SELECT t.v FROM cc.t t WHERE t.id = 1); END';
CREATE FUNCTION cc.pl_q_sd(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS 'BEGIN RETURN (SELECT t.v FROM cc.t t WHERE t.id = 1); END';
CREATE FUNCTION cc.pl_q_sd_sp(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS 'BEGIN RETURN (SELECT t.v FROM cc.t t WHERE t.id = 1); END';
CREATE FUNCTION cc.pl_q_sd_all(q text, l bigint, n integer) RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
    AS 'BEGIN RETURN (SELECT t.v FROM cc.t t WHERE t.id = 1); END';
CREATE FUNCTION cc.sql_q_sd_sp(q text, l bigint, n integer) RETURNS integer LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS 'SELECT t.v FROM cc.t t WHERE t.id = 1';

-- lonnymq data: queue q with channel c1; queue qe, empty.
SELECT lonnymq.message_create('q', 'c1', '\x00');
SELECT lonnymq.message_create('qe', 'c1', '\x00');
SELECT * FROM lonnymq.message_dequeue('qe', 3600000);
SELECT * FROM lonnymq.message_dequeue('q', 3600000);
SELECT lonnymq.message_complete(m.id, m.num_attempts) FROM lonnymq.message m;
