-- The Spark bookkeeping schema as lonnymq 1.12 created it (unversioned, shared by every
-- role): test_spark_bookkeeping.py upgrades a database holding it.
CREATE SCHEMA IF NOT EXISTS lonnymq_spark;
COMMENT ON SCHEMA lonnymq_spark IS 'Bookkeeping of the lonnymq Spark data source (lonnymq.spark).';

CREATE TABLE IF NOT EXISTS lonnymq_spark.write_job (
    queue text NOT NULL,
    write_id text NOT NULL,
    partitions integer NOT NULL,
    created bigint NOT NULL,
    deduplicated bigint NOT NULL,
    dropped bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, write_id)
);
COMMENT ON TABLE lonnymq_spark.write_job IS
    'Committed Spark writes: a replay of one creates nothing.';

CREATE TABLE IF NOT EXISTS lonnymq_spark.write_partition (
    queue text NOT NULL,
    write_id text NOT NULL,
    partition_id integer NOT NULL,
    task_attempt integer NOT NULL,
    rows bigint NOT NULL DEFAULT 0,
    created bigint NOT NULL DEFAULT 0,
    deduplicated bigint NOT NULL DEFAULT 0,
    dropped bigint NOT NULL DEFAULT 0,
    committed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, write_id, partition_id)
);
CREATE INDEX IF NOT EXISTS write_partition_committed_idx
    ON lonnymq_spark.write_partition (committed_at);
COMMENT ON TABLE lonnymq_spark.write_partition IS
    'Task attempts whose staged rows a committed Spark write published (one per partition).';

CREATE TABLE IF NOT EXISTS lonnymq_spark.write_run (
    run_id text PRIMARY KEY,
    queue text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('batch', 'stream')),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    used_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE lonnymq_spark.write_run IS
    'Spark jobs staging rows, each in its UNLOGGED table lonnymq_spark.stage_<run_id>.';

CREATE TABLE IF NOT EXISTS lonnymq_spark.write_attempt (
    attempt_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text NOT NULL,
    queue text NOT NULL,
    write_id text NOT NULL,
    partition_id integer NOT NULL,
    task_attempt integer NOT NULL,
    rows bigint NOT NULL DEFAULT 0,
    staged_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX IF NOT EXISTS write_attempt_write_idx
    ON lonnymq_spark.write_attempt (queue, write_id);
CREATE INDEX IF NOT EXISTS write_attempt_run_idx ON lonnymq_spark.write_attempt (run_id);
COMMENT ON TABLE lonnymq_spark.write_attempt IS
    'Task attempts that staged a partition, not yet published or discarded.';

CREATE TABLE IF NOT EXISTS lonnymq_spark.stream_batch (
    stream_id text NOT NULL,
    batch bigint NOT NULL,
    queue text NOT NULL,
    messages integer NOT NULL,
    planned_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (stream_id, batch)
);
COMMENT ON TABLE lonnymq_spark.stream_batch IS
    'Micro-batches a streaming query dequeued and has not committed yet.';

CREATE TABLE IF NOT EXISTS lonnymq_spark.stream_delivery (
    stream_id text NOT NULL,
    batch bigint NOT NULL,
    ord integer NOT NULL,
    id bigint NOT NULL,
    channel text,
    content bytea NOT NULL,
    state bytea,
    num_attempts bigint NOT NULL,
    dequeue_at timestamptz,
    recovered boolean NOT NULL,
    locked_until timestamptz,
    created_at timestamptz,
    priority integer,
    dedup_key text,
    PRIMARY KEY (stream_id, batch, ord)
);
COMMENT ON TABLE lonnymq_spark.stream_delivery IS
    'Deliveries of uncommitted micro-batches: replayed batches read them, commit completes them.';

CREATE TABLE IF NOT EXISTS lonnymq_spark.read_snapshot (
    read_id text PRIMARY KEY,
    relation text NOT NULL,
    source text NOT NULL,
    queue text,
    rows bigint NOT NULL,
    partitions integer NOT NULL,
    retention_s integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_read_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE lonnymq_spark.read_snapshot IS
    'Snapshots of Spark batch reads (table relation here), dropped once unread for retention_s.';
