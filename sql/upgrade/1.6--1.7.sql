-- ===========================================================================
-- lonnymq 1.6 -> 1.7: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.7 changes functions only: message_dequeue warms the
-- session's heap once (_heap_warmed, _warm_heap, both new); nothing of 1.6 is
-- dropped, so this part is empty. The replayed CREATE OR REPLACE definitions
-- follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.7'" to load this file. \quit
