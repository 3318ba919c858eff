-- ===========================================================================
-- lonnymq 1.8 -> 1.9: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.9 changes functions only and adds one:
-- message_complete_batch and message_create_batch check valid arguments with
-- one expression, and _is_batch_array (new) is the rule for an array
-- argument's shape. Nothing is dropped or changed in place here; the
-- replayed definitions follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.9'" to load this file. \quit
