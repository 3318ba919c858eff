-- lonnymq producer: one message_create per commit. :nchannels 0 means channel => NULL.
\set ch random(1, greatest(:nchannels, 1))
SELECT status FROM lonnymq.message_create('bench', CASE WHEN :nchannels > 0 THEN 'c' || :ch END,
                                          :payload::bytea);
