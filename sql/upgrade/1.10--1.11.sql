-- ===========================================================================
-- lonnymq 1.10 -> 1.11: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.11 changes functions only: a batch dequeue that holds
-- fewer channels than it wants serves them by quotas, several messages of a
-- channel in one claim, where single dequeues in a row would serve them
-- round after round (_round_quotas and _serve_quotas, new). Nothing is
-- dropped or changed in place here; the replayed definitions follow.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.11'" to load this file. \quit
