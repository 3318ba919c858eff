-- lonnymq consumer, batches: message_dequeue(max_messages => :batch) (one commit),
-- message_complete_batch (another commit).
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(num_attempts), '{}') AS nas, count(*) AS n
FROM lonnymq.message_dequeue('bench', 30000, :batch)
\gset
\if :n > 0
SELECT count(*) FROM lonnymq.message_complete_batch(:ids::bigint[], :nas::bigint[]);
\endif
