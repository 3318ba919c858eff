-- ===========================================================================
-- lonnymq 1.8 -> 1.9: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.9 changes functions only and adds two:
-- message_complete_batch and message_create_batch check valid arguments with
-- one expression, and _is_batch_array (new) is the rule for an array
-- argument's shape; message_create compares its dequeue time with
-- _max_dequeue_ms (new) instead of calling a validator. Nothing is dropped
-- or changed in place here; the replayed definitions follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.9'" to load this file. \quit
