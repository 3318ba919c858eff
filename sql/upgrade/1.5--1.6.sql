-- ===========================================================================
-- lonnymq 1.5 -> 1.6: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.6 changes functions only: a single dequeue runs its own
-- step (_dequeue_single, _serve_channel) and every other dequeue the steps
-- composed by _dequeue_many, all new; nothing of 1.5 is dropped, so this
-- part is empty. The replayed CREATE OR REPLACE definitions follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.6'" to load this file. \quit
