-- The schema of the SQL API (README, "A tour in SQL" and "Concepts"): the extension's objects exist, the
-- inspection views and the archive have the stable columns callers use.

BEGIN;
CREATE EXTENSION lonnymq;
SELECT plan(51);

-- The extension and its schema.
SELECT has_extension('lonnymq', 'lonnymq is installed');
SELECT has_schema('lonnymq');
SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'),
          (SELECT default_version FROM pg_available_extensions WHERE name = 'lonnymq'),
          'the default version of the control file is installed');
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'lonnymq'), false, 'not relocatable');
SELECT is((SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
           WHERE e.extname = 'lonnymq'), 'lonnymq', 'installed in schema lonnymq');

-- Tables (implementation detail, but their existence is what the functions rely on).
SELECT has_table('lonnymq', 'queue', 'table queue');
SELECT has_table('lonnymq', 'channel', 'table channel');
SELECT has_table('lonnymq', 'message', 'table message');
SELECT has_table('lonnymq', 'channel_hint', 'table channel_hint');
SELECT has_table('lonnymq', 'channel_admission', 'table channel_admission');
SELECT has_table('lonnymq', 'batch', 'table batch');
SELECT has_table('lonnymq', 'message_archive', 'table message_archive');

-- Every table and sequence is an extension member.
SELECT is(
    (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind IN ('r', 'S', 'v')
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                       AND d.objid = c.oid AND d.deptype = 'e')),
    NULL, 'every table, sequence and view belongs to the extension');

-- Queue state survives pg_dump: the tables are configuration tables.
SELECT is(
    (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
     WHERE c.relnamespace = 'lonnymq'::regnamespace AND c.relkind = 'r'
       AND c.oid <> ALL ((SELECT extconfig FROM pg_extension WHERE extname = 'lonnymq')::oid[])),
    NULL, 'every table is dumped (pg_extension_config_dump)');

-- The inspection views.
SELECT has_view('lonnymq', 'messages', 'view messages');
SELECT has_view('lonnymq', 'channel_stats', 'view channel_stats');
SELECT has_view('lonnymq', 'queue_stats', 'view queue_stats');

-- messages: one row per live message.
SELECT has_column('lonnymq', 'messages', c, 'messages.' || c)
FROM unnest(ARRAY['id', 'queue', 'channel', 'content', 'state', 'num_attempts',
                  'dequeue_at', 'locked_until', 'created_at']) c;
SELECT col_type_is('lonnymq', 'messages', 'id', 'bigint', 'messages.id is bigint');
SELECT col_type_is('lonnymq', 'messages', 'content', 'bytea', 'messages.content is bytea');
SELECT col_type_is('lonnymq', 'messages', 'num_attempts', 'bigint', 'messages.num_attempts is bigint');
SELECT col_type_is('lonnymq', 'messages', 'dequeue_at', 'timestamp with time zone', 'messages.dequeue_at is timestamptz');
SELECT col_type_is('lonnymq', 'messages', 'locked_until', 'timestamp with time zone', 'messages.locked_until is timestamptz');
SELECT col_type_is('lonnymq', 'messages', 'created_at', 'timestamp with time zone', 'messages.created_at is timestamptz');

-- channel_stats: one row per channel (channel NULL: channel-less messages).
SELECT is(
    (SELECT array_agg(c ORDER BY c) FROM unnest(ARRAY['queue', 'channel', 'ready', 'scheduled', 'locked',
        'max_concurrency', 'release_interval_ms', 'max_size', 'max_attempts', 'oldest_ready_ms']) c
     WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns i
                       WHERE i.table_schema = 'lonnymq' AND i.table_name = 'channel_stats'
                         AND i.column_name = c)),
    NULL, 'channel_stats has every documented column');

-- queue_stats: one row per queue.
SELECT is(
    (SELECT array_agg(c ORDER BY c) FROM unnest(ARRAY['queue', 'channels', 'ready', 'scheduled', 'locked',
        'archived']) c
     WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns i
                       WHERE i.table_schema = 'lonnymq' AND i.table_name = 'queue_stats'
                         AND i.column_name = c)),
    NULL, 'queue_stats has every documented column');

-- message_archive: terminal messages.
SELECT has_column('lonnymq', 'message_archive', c, 'message_archive.' || c)
FROM unnest(ARRAY['id', 'message_id', 'queue', 'channel', 'content', 'state', 'num_attempts',
                  'outcome', 'error', 'created_at', 'archived_at']) c;
SELECT col_type_is('lonnymq', 'message_archive', 'content', 'bytea', 'message_archive.content is bytea');
SELECT col_type_is('lonnymq', 'message_archive', 'outcome', 'text', 'message_archive.outcome is text');
SELECT col_type_is('lonnymq', 'message_archive', 'archived_at', 'timestamp with time zone',
                   'message_archive.archived_at is timestamptz');

-- The views answer (and are empty) on a fresh install.
SELECT is((SELECT count(*) FROM lonnymq.messages), 0::bigint, 'messages is empty');
SELECT is((SELECT count(*) FROM lonnymq.channel_stats), 0::bigint, 'channel_stats is empty');
SELECT is((SELECT count(*) FROM lonnymq.queue_stats), 0::bigint, 'queue_stats is empty');

SELECT * FROM finish();
ROLLBACK;
