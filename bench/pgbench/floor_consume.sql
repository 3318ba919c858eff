-- floor consumer: claim one message (one commit), delete it (another commit).
WITH claimed AS (
    UPDATE floor.message m
    SET locked_until = now() + interval '30 seconds', num_attempts = m.num_attempts + 1
    WHERE m.id = (SELECT f.id FROM floor.message f
                  WHERE f.locked_until IS NULL AND f.dequeue_at <= now()
                  ORDER BY f.dequeue_at, f.id
                  LIMIT 1
                  FOR UPDATE SKIP LOCKED)
    RETURNING m.id, m.num_attempts)
SELECT coalesce(max(id), 0) AS id, coalesce(max(num_attempts), 0) AS na FROM claimed
\gset
\if :id > 0
DELETE FROM floor.message WHERE id = :id AND num_attempts = :na;
\endif
