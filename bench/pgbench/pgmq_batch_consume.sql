-- PGMQ consumer, batches: pgmq.read of up to :batch, visibility timeout 30 s (one commit),
-- pgmq.delete of their ids (another commit).
SELECT coalesce(array_agg(msg_id), '{}') AS ids, count(*) AS n
FROM pgmq.read('bench', 30, :batch)
\gset
\if :n > 0
SELECT count(*) FROM pgmq.delete('bench', :ids::bigint[]);
\endif
