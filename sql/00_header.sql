-- lonnymq: a multi-tenant message queue inside PostgreSQL.
-- Built from sql/*.sql by `make scripts`; edit those files, not the generated script.
\echo Use "CREATE EXTENSION lonnymq" to load this file. \quit
