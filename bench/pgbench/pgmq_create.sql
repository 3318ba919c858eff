-- PGMQ producer: one pgmq.send per commit. PGMQ has no channels (one queue: :nchannels unused).
SELECT pgmq.send('bench', :json_payload::jsonb);
