-- ===========================================================================
-- lonnymq 1.9 -> 1.10: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.10 changes functions only and adds one:
-- message_create compares its dequeue time with _max_dequeue_ms (new) and
-- calls the validator only to raise, and message_create_batch checks every
-- dequeue_ats element against it. Nothing is dropped or changed in place
-- here; the replayed definitions follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.10'" to load this file. \quit
