-- ALTER EXTENSION lonnymq UPDATE with live traffic: 1.0 installed, messages
-- pending, scheduled, locked, expired, deferred, archived, deduplicated, hints
-- not yet folded in and a limited channel in flight; then the update, and
-- every message is still served exactly once under the same rules. Last, the
-- updated schema must equal a fresh install of the new version, object by
-- object. (scripts/test-upgrade also runs the whole SQL suite on an install
-- that CREATE EXTENSION reached through the upgrade scripts.)
\set VERBOSITY terse
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS lonnymq CASCADE;
CREATE EXTENSION lonnymq VERSION '1.0';
RESET client_min_messages;

-- Every object of the extension, described so that two installs compare equal
-- exactly when they would behave the same: functions with their full
-- definitions and privileges, tables with their columns in order, indexes,
-- constraints, views, sequences, comments, dump registrations, membership.
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

-- Traffic on 1.0.
SELECT max_concurrency FROM lonnymq.channel_set('up', 'limited', max_concurrency => 1, max_size => 5);
SELECT retain_completed FROM lonnymq.channel_set('up', 'kept', retain_completed => true);
SELECT status, count(*) FROM lonnymq.message_create_batch('up',
    ARRAY['a', 'a', 'b', 'limited', 'limited', NULL, 'kept', 'kept', 'dying'],
    ARRAY['a1', 'a2', 'b1', 'l1', 'l2', 'free1', 'k1', 'k2', 'd1']::bytea[])
GROUP BY status;
SELECT status FROM lonnymq.message_create('up', 'b', 'scheduled', dequeue_at => now() + interval '1 hour');
SELECT status FROM lonnymq.message_create('up', 'a', 'deduped', dedup_key => 'once');
SELECT status FROM lonnymq.message_create('up', 'b', 'deduped again', dedup_key => 'once');
CREATE TEMP TABLE taken AS SELECT * FROM lonnymq.message_dequeue('up', 3600000, 9);
SELECT convert_from(content, 'UTF8') AS taken FROM taken ORDER BY 1;
-- In flight across the update: l1 holds the limited channel's only slot.
SELECT lonnymq.message_complete(id, num_attempts) AS k1 FROM taken WHERE content = 'k1';
SELECT lonnymq.message_fail(id, num_attempts, 'boom') AS d1 FROM taken WHERE content = 'd1';
SELECT lonnymq.message_defer(id, num_attempts, state => 'saved') AS a1 FROM taken WHERE content = 'a1';
-- b1's lock expires: the next dequeue recovers it.
UPDATE lonnymq.message SET locked_until_ms = locked_until_ms - 7200000 WHERE content = 'b1';
-- Created after the last dequeue: only their hints know of them.
SELECT status FROM lonnymq.message_create('up', 'fresh', 'h1');
SELECT status FROM lonnymq.message_create('up', 'fresh', 'h2', priority => 1);
SELECT count(*) AS hints FROM lonnymq.channel_hint WHERE channel_id = (SELECT id FROM lonnymq.channel WHERE name = 'fresh');

ALTER EXTENSION lonnymq UPDATE;
SELECT extversion = (SELECT default_version FROM pg_available_extensions WHERE name = 'lonnymq') AS updated
FROM pg_extension WHERE extname = 'lonnymq';
SELECT * FROM lonnymq.verify();

-- Served on the new version: the expired lock first, then fairly, one
-- delivery per message; l2 waits for l1's slot, 'scheduled' for its time.
CREATE TEMP TABLE served (round int, content text, recovered boolean, attempts bigint, state text);
INSERT INTO served SELECT 1, convert_from(content, 'UTF8'), recovered, num_attempts, convert_from(state, 'UTF8')
FROM lonnymq.message_dequeue('up', 60000, 20);
SELECT content, recovered, attempts, state FROM served ORDER BY content;
-- Deliveries taken on 1.0 settle on the new version with their fencing token.
SELECT lonnymq.message_complete(id, num_attempts) AS l1 FROM taken WHERE content = 'l1';
SELECT lonnymq.message_complete(id, num_attempts) AS stale_token FROM taken WHERE content = 'b1';
INSERT INTO served SELECT 2, convert_from(content, 'UTF8'), recovered, num_attempts, NULL
FROM lonnymq.message_dequeue('up', 60000, 20);
SELECT content FROM served WHERE round = 2 ORDER BY content;
SELECT status FROM (
    SELECT lonnymq.message_complete(m.id, m.num_attempts) AS status
    FROM lonnymq.messages m WHERE m.locked_until IS NOT NULL) s
GROUP BY 1;
SELECT lonnymq.message_cancel(id) AS scheduled FROM lonnymq.messages WHERE content = 'scheduled';
SELECT count(*) AS left_over FROM lonnymq.messages;
SELECT convert_from(content, 'UTF8') AS archived, outcome, error FROM lonnymq.message_archive ORDER BY 1;
SELECT * FROM lonnymq.verify();

-- The updated install is the new version, object for object.
CREATE TEMP TABLE updated AS SELECT * FROM pg_temp.schema_objects();
SET client_min_messages = warning;
DROP EXTENSION lonnymq CASCADE;
CREATE EXTENSION lonnymq;
RESET client_min_messages;
SELECT 'after update only' AS side, kind, name FROM (
    SELECT * FROM updated EXCEPT SELECT * FROM pg_temp.schema_objects()) x
UNION ALL
SELECT 'fresh install only', kind, name FROM (
    SELECT * FROM pg_temp.schema_objects() EXCEPT SELECT * FROM updated) y
ORDER BY 1, 2, 3;
SELECT count(*) > 100 AS compared_objects FROM updated;
