-- lonnymq consumer: message_dequeue (one commit), message_complete (another commit).
SELECT coalesce(max(id), 0) AS id, coalesce(max(num_attempts), 0) AS na
FROM lonnymq.message_dequeue('bench', 30000)
\gset
\if :id > 0
SELECT lonnymq.message_complete(:id, :na);
\endif
