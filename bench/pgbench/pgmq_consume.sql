-- PGMQ consumer: pgmq.read of one message, visibility timeout 30 s (one commit),
-- pgmq.delete (another commit).
SELECT coalesce(max(msg_id), 0) AS id
FROM pgmq.read('bench', 30, 1)
\gset
\if :id > 0
SELECT pgmq.delete('bench', :id::bigint);
\endif
