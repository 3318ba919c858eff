-- floor producer, batches: :batch messages per commit.
INSERT INTO floor.message (channel, content)
SELECT CASE WHEN :nchannels > 0 THEN 'c' || (1 + (random() * (greatest(:nchannels, 1) - 1))::int) END,
       :payload::bytea
FROM generate_series(1, :batch);
