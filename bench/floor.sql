-- The "floor": a bare durable SKIP LOCKED queue, the least a PostgreSQL queue
-- can do per message. No fairness, limits or fencing beyond the attempt count.
-- lonnymq is measured against it in the same run with the same driver.
DROP SCHEMA IF EXISTS floor CASCADE;
CREATE SCHEMA floor;
CREATE TABLE floor.message (
    id bigserial PRIMARY KEY,
    channel text,
    content bytea NOT NULL,
    dequeue_at timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz,
    num_attempts integer NOT NULL DEFAULT 0
);
CREATE INDEX message_ready_idx ON floor.message (dequeue_at, id) WHERE locked_until IS NULL;
