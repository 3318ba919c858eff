-- ===========================================================================
-- lonnymq 1.4 -> 1.5: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.5 changes functions only. The batch create reads its
-- channels once for the set (_create_set takes whether any is capped
-- instead of looking again), so _create_set's 1.4 signature goes; the
-- replayed CREATE OR REPLACE definitions that follow are the rest, with one
-- new step, _pin_named.
-- ===========================================================================
DROP FUNCTION lonnymq._create_set(integer, text[], bytea[], timestamptz[], text[], boolean, text[], bigint[], bigint);
