-- floor producer: one message per commit. :nchannels 0 means no channel.
\set ch random(1, greatest(:nchannels, 1))
INSERT INTO floor.message (channel, content)
VALUES (CASE WHEN :nchannels > 0 THEN 'c' || :ch END, :payload::bytea);
