-- ===========================================================================
-- lonnymq 1.12 -> 2.0: the hand-written part of the update, for what
-- replaying sql/ cannot do (changed tables and indexes, dropped or renamed
-- functions). The Makefile appends every replayable sql/ file to it.
-- ===========================================================================
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '2.0'" to load this file. \quit
