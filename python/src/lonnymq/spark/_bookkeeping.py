"""The Spark integration's own tables, in schema ``lonnymq_spark``.

The extension knows nothing about Spark; what Spark needs on top of it lives here:

- ``write_run``: one row per job that stages rows (a batch write, or a run of a streaming
  sink query), with its UNLOGGED staging table ``lonnymq_spark.stage_<run id>``.
- ``write_attempt``: one row per task attempt that staged its partition into a run's table
  (rows staged under its ``attempt_id``). Nothing staged is a message yet.
- ``write_job``: one row per committed write (batch job, or streaming micro-batch), inserted
  by the driver's commit in the *same transaction* as the messages it publishes: a replayed
  job or batch whose row exists publishes nothing, however Spark partitions it.
- ``write_partition``: the attempts a committed write published, one per partition, with
  their counts (same transaction).
- ``stream_batch`` / ``stream_delivery``: the messages a streaming query dequeued into each
  micro-batch (a copy, so a replayed batch reads exactly the same rows), deleted when the
  batch commits and the messages are completed.
- ``read_snapshot``: the snapshots of batch reads with ``num_partitions > 1``: one UNLOGGED
  table ``lonnymq_spark.read_<id>`` each, a copy of the rows the read returns, which every
  task reads its range of; dropped once unread for the read's ``snapshot_retention_s``.

Created on first use under a transaction-level advisory lock (concurrent first users would
otherwise race on the catalog); an administrator may run ``install(dsn)`` beforehand so that
Spark's role needs no CREATE privilege.
"""

from __future__ import annotations

from typing import Any

import psycopg

SCHEMA = "lonnymq_spark"

# Arbitrary advisory-lock key: serializes the CREATE ... IF NOT EXISTS below.
_INSTALL_LOCK = 0x6C6D7173  # 'lmqs'

_DDL = """
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
"""


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection named for pg_stat_activity, so operators can tell Spark's sessions apart."""
    return psycopg.connect(dsn, application_name="lonnymq-spark", **kwargs)


def ensure_installed(conn: psycopg.Connection[Any]) -> None:
    """Creates the bookkeeping schema unless it already exists (no privilege needed then)."""
    # The newest table: an older install lacks it, and the DDL below only adds what is missing.
    row = conn.execute("SELECT pg_catalog.to_regclass('lonnymq_spark.write_attempt')").fetchone()
    if row is not None and row[0] is not None:
        return
    with conn.transaction():
        conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (_INSTALL_LOCK,))
        conn.execute(_DDL)


def install(dsn: str) -> None:
    """Creates schema ``lonnymq_spark`` (for administrators who pre-create it)."""
    with connect(dsn, autocommit=True) as conn:
        ensure_installed(conn)
