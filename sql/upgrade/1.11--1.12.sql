-- ===========================================================================
-- lonnymq 1.11 -> 1.12: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.12 changes functions only and adds one: the read of a
-- channel's head under its head lock, written once (_channel_head_ms).
-- Nothing is dropped or changed in place here; the replayed definitions follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.12'" to load this file. \quit
