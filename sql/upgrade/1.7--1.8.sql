-- ===========================================================================
-- lonnymq 1.7 -> 1.8: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.8 changes functions only: message_complete deletes a
-- current delivery of an unaccounted channel in one statement,
-- message_complete_batch is four statements in the common case, and
-- _notify_waiters returns whether it notified (so message_create can call it
-- as an expression); a function's result type cannot be changed by CREATE OR
-- REPLACE, so its 1.7 definition is dropped here; the replayed definitions
-- follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.8'" to load this file. \quit

DROP FUNCTION lonnymq._notify_waiters(text, text);
