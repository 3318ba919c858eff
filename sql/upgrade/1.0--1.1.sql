-- lonnymq 1.0 -> 1.1 (ALTER EXTENSION lonnymq UPDATE TO '1.1').
-- Generated into lonnymq--1.0--1.1.sql by `make scripts`: this hand-written
-- part changes tables and drops what 1.1 no longer has; the function, view
-- and privilege files of sql/ follow it, replayed with CREATE OR REPLACE.
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.1'" to load this file. \quit

-- Dequeue is composed of set-based steps (50_dequeue.sql); the per-message
-- claim helper is gone.
DROP FUNCTION lonnymq._claim(bigint, bigint);

-- One word per concept: "channel-less" for messages without a channel (not
-- "nochannel" or "free": a free channel is one nobody holds), and _notify's
-- first argument is the LISTEN channel, not a queue channel.
ALTER TABLE lonnymq.queue RENAME COLUMN nochannel_turn_ms TO channelless_turn_ms;
ALTER TABLE lonnymq.queue RENAME COLUMN nochannel_turn_seq TO channelless_turn_seq;
ALTER INDEX lonnymq.message_free_idx RENAME TO message_channelless_idx;
DROP FUNCTION lonnymq._notify(text, text, text);

-- Channels are coordinated through their rows, which no outside role can
-- lock, instead of advisory locks any role can take (see _pin_channel).
DROP FUNCTION lonnymq._channel_of_settle(lonnymq.message);
DROP FUNCTION lonnymq._channel_share(integer, text, boolean);
DROP FUNCTION lonnymq._lock_class();
