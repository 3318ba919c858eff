-- floor consumer, batches: claim up to :batch (one commit), delete them (another commit).
WITH claimed AS (
    UPDATE floor.message m
    SET locked_until = now() + interval '30 seconds', num_attempts = m.num_attempts + 1
    WHERE m.id IN (SELECT f.id FROM floor.message f
                   WHERE f.locked_until IS NULL AND f.dequeue_at <= now()
                   ORDER BY f.dequeue_at, f.id
                   LIMIT :batch
                   FOR UPDATE SKIP LOCKED)
    RETURNING m.id)
SELECT coalesce(array_agg(id), '{}') AS ids, count(*) AS n FROM claimed
\gset
\if :n > 0
DELETE FROM floor.message WHERE id = ANY (:ids::bigint[]);
\endif
