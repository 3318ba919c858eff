-- lonnymq producer, batches: one message_create_batch of :batch per commit.
SELECT count(*)
FROM lonnymq.message_create_batch(
    'bench',
    (SELECT array_agg(CASE WHEN :nchannels > 0 THEN 'c' || (1 + (random() * (greatest(:nchannels, 1) - 1))::int) END)
     FROM generate_series(1, :batch)),
    array_fill(:payload::bytea, ARRAY[:batch::int]));
