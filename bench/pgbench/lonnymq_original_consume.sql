-- original LonnyMQ consumer: message_dequeue with a 30000 ms lock (one commit),
-- message_complete (another commit).
SELECT coalesce(max((metadata->>'id')::bigint), 0) AS id,
       coalesce(max((metadata->>'num_attempts')::bigint), 0) AS na
FROM lonny_up.message_dequeue(30000)
\gset
\if :id > 0
SELECT lonny_up.message_complete(:id, :na);
\endif
