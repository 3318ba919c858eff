-- PGMQ producer, batches: one pgmq.send_batch of :batch per commit.
SELECT count(*) FROM pgmq.send_batch('bench', array_fill(:json_payload::jsonb, ARRAY[:batch::int]));
