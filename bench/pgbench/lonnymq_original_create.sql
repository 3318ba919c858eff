-- original LonnyMQ producer: one message_create per commit on a declared channel c1..c:nchannels
-- (it has no channel-less messages, so workload 3 skips it).
\set ch random(1, greatest(:nchannels, 1))
SELECT result_code FROM lonny_up.message_create('c' || :ch, :payload::bytea, NULL);
