-- ===========================================================================
-- lonnymq 1.11 -> 1.12: the hand-written part of the update (what replaying
-- sql/ cannot do). 1.12 changes functions and adds one: the read of a
-- channel's head under its head lock, written once (_channel_head_ms).
-- _round_quotas learns how many head locks the call has left (p_raises), so
-- 1.11's two-argument version goes: replaying sql/ would create the new one
-- beside it, not in its place.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.12'" to load this file. \quit

DROP FUNCTION lonnymq._round_quotas(lonnymq.channel[], integer);
