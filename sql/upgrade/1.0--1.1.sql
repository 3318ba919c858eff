-- lonnymq 1.0 -> 1.1 (ALTER EXTENSION lonnymq UPDATE TO '1.1').
-- Generated into lonnymq--1.0--1.1.sql by `make scripts`: this hand-written
-- part changes tables and drops what 1.1 no longer has; the function, view
-- and privilege files of sql/ follow it, replayed with CREATE OR REPLACE.
\echo Use "ALTER EXTENSION lonnymq UPDATE TO '1.1'" to load this file. \quit

-- Dequeue is composed of set-based steps (50_dequeue.sql); the per-message
-- claim helper is gone.
DROP FUNCTION lonnymq._claim(bigint, bigint);
