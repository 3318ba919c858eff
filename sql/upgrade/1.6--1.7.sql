-- ===========================================================================
-- lonnymq 1.6 -> 1.7: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.7 changes functions only: message_dequeue warms the
-- session's heap once (_heap_warmed, _warm_heap, both new), and the held step
-- claims a held channel's messages in one statement (_serve_held no longer
-- tries the channel as a round first, so it and _dequeue_held lose their
-- head-lock arguments and _serve_held returns the ids alone). Their 1.6
-- signatures are dropped here; the replayed CREATE OR REPLACE definitions
-- follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.7'" to load this file. \quit

DROP FUNCTION lonnymq._serve_held(lonnymq.queue, lonnymq.channel, bigint, bigint, integer, bigint, integer);
DROP FUNCTION lonnymq._dequeue_held(lonnymq.queue, bigint, bigint, integer, bigint, bigint[], bigint[], integer);
