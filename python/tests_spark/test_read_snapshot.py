"""Batch reads with num_partitions > 1 read one snapshot, whenever and however often tasks run.

Spark plans a read (``partitions()``) once per ``load()``, at the first action, and reuses
that plan for every later action on the DataFrame. The tests place a change of the queue
between planning and the reads: through Spark (between two actions, or inside a failing first
attempt of a task) and without it, calling the data source's reader the way Spark's planner
and tasks do, one task after another as on a busy cluster. With one snapshot per task, as
before, every one of them would return rows of the changed queue.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import psycopg
import pytest
from conftest import BOOK, enqueue
from psycopg import conninfo

from lonnymq.spark import _bookkeeping, _read
from lonnymq.spark._options import OptionError, Options


def _load(spark: Any, dsn: str, **options: Any) -> Any:
    r = spark.read.format("lonnymq").option("dsn", dsn)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _plan(dsn: str, **options: Any) -> tuple[Any, list[Any]]:
    """The reader and its partitions, pickled and unpickled as Spark ships them to tasks."""
    from pyspark.sql.types import StructType

    from lonnymq.spark.datasource import LonnymqDataSource

    source = LonnymqDataSource({"dsn": dsn, **{k: str(v) for k, v in options.items()}})
    reader = source.reader(StructType())
    return reader, [pickle.loads(pickle.dumps(p)) for p in reader.partitions()]


def _ids(reader: Any, partition: Any) -> list[int]:
    return [row[0] for row in reader.read(partition)]


def _change_queue(db: psycopg.Connection[Any], queue: str) -> None:
    """Completes every live message of ``queue`` and creates 50 new ones."""
    delivered = db.execute(
        "SELECT array_agg(id), array_agg(num_attempts)"
        " FROM lonnymq.message_dequeue(%s, 60000, 10000)",
        (queue,),
    ).fetchone()
    assert delivered is not None
    db.execute("SELECT count(*) FROM lonnymq.message_complete_batch(%s, %s)", delivered)
    enqueue(db, queue, 50)


def _snapshot_tables(db: psycopg.Connection[Any]) -> set[str]:
    rows = db.execute(
        "SELECT tablename FROM pg_catalog.pg_tables"
        " WHERE schemaname = %s AND tablename LIKE 'read\\_%%'",
        (BOOK,),
    ).fetchall()
    return {r[0] for r in rows}


def _live_ids(db: psycopg.Connection[Any], queue: str) -> list[int]:
    rows = db.execute(
        "SELECT id FROM lonnymq.messages WHERE queue = %s ORDER BY id", (queue,)
    ).fetchall()
    return [r[0] for r in rows]


# --- without Spark: the reader as Spark's planner and tasks call it --------------------------


def test_tasks_one_after_another_read_the_planned_moment(
    dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    planned = sorted(enqueue(db, queue_name, 30))
    reader, parts = _plan(dsn, queue=queue_name, num_partitions=3)
    assert [(p.part.low, p.part.high) for p in parts] == [(1, 10), (11, 20), (21, 30)]
    first = _ids(reader, parts[0])
    _change_queue(db, queue_name)  # between the first task and the others
    rest = _ids(reader, parts[1]) + _ids(reader, parts[2])
    assert first + rest == planned
    # Read again (a retry, or a second action): still the planned moment.
    assert [i for p in parts for i in _ids(reader, p)] == planned
    assert _live_ids(db, queue_name) != planned

    channels, parts = _plan(dsn, table="channel", queue=queue_name, num_partitions=2)
    enqueue(db, queue_name, 9)
    ready = {row[1]: row[2] for p in parts for row in channels.read(p)}
    assert ready == {"tenant_0": 16, "tenant_1": 17, "tenant_2": 17}


def test_snapshot_in_use_is_not_dropped_and_truncation_is_detected(
    dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    enqueue(db, queue_name, 20)
    reader, parts = _plan(dsn, queue=queue_name, num_partitions=2, snapshot_retention_s=0)
    table = parts[0].part.snapshot.table
    rows = reader.read(parts[0])
    next(rows)  # the task's cursor is open: it holds its lock on the snapshot
    assert table in _snapshot_tables(db)
    _read.drop_expired_snapshots(db)  # expired (retention 0), but being read: kept
    assert table in _snapshot_tables(db)
    assert len(list(rows)) == 9

    # An UNLOGGED table is emptied by a crash: a task must not take that for "no rows".
    db.execute(f"TRUNCATE {BOOK}.{table}")
    with pytest.raises(
        _read.SnapshotError, match=r"returned 0 rows for rows 11\.\.20, expected 10"
    ):
        list(reader.read(parts[1]))

    _read.drop_expired_snapshots(db)
    assert table not in _snapshot_tables(db)
    with pytest.raises(_read.SnapshotError, match="was dropped: snapshots unread"):
        list(reader.read(parts[1]))


def test_read_only_server_and_option_errors(dsn: str) -> None:
    _bookkeeping.install(dsn)
    standby = conninfo.make_conninfo(dsn, options="-c default_transaction_read_only=on")
    with pytest.raises(OptionError, match="read with num_partitions=1 there"):
        _plan(standby, num_partitions=2)
    with pytest.raises(OptionError, match="snapshot_retention_s must be between 0 and"):
        Options.parse({"dsn": dsn, "snapshot_retention_s": "-1"})


# --- through Spark -------------------------------------------------------------------------


def test_every_action_reads_the_snapshot_of_the_first(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    planned = sorted(enqueue(db, queue_name, 300))
    df = _load(spark, dsn, queue=queue_name, num_partitions=3)
    assert df.count() == 300  # the first action plans the read: the snapshot is taken now
    assert df.rdd.getNumPartitions() == 3
    _change_queue(db, queue_name)
    assert sorted(r.id for r in df.collect()) == planned
    assert df.filter("channel = 'tenant_0'").count() == 100
    snapshot = db.execute(
        f"SELECT source, rows, partitions, retention_s FROM {BOOK}.read_snapshot WHERE queue = %s",
        (queue_name,),
    ).fetchall()
    assert snapshot == [("lonnymq.messages", 300, 3, 3600)]
    # A new load() is a new snapshot: the current state.
    assert _load(spark, dsn, queue=queue_name, num_partitions=3).count() == 50


def test_retried_task_reads_the_same_rows(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    planned = sorted(enqueue(db, queue_name, 300))
    failed = str(tmp_path / "failed")

    @F.udf("long")
    def check(i: int) -> int:
        ctx = TaskContext.get()
        assert ctx is not None
        # The first attempt of partition 1 changes the queue, then fails: the retry runs
        # after the change, as do partitions 0 and 2 if they had not run yet.
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
            with psycopg.connect(dsn, autocommit=True) as conn:
                delivered = conn.execute(
                    "SELECT array_agg(id), array_agg(num_attempts)"
                    " FROM lonnymq.message_dequeue(%s, 60000, 10000)",
                    (queue_name,),
                ).fetchone()
                conn.execute(
                    "SELECT count(*) FROM lonnymq.message_complete_batch(%s, %s)", delivered
                )
            open(failed, "w").close()
            raise RuntimeError("first attempt of partition 1 fails after the queue changed")
        return i

    df = _load(spark, dsn, queue=queue_name, num_partitions=3)
    ids = sorted(r.id for r in df.select(check("id").alias("id")).collect())
    assert os.path.exists(failed)
    assert _live_ids(db, queue_name) == []
    assert ids == planned


def test_single_partition_copies_nothing(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    _bookkeeping.install(dsn)
    enqueue(db, queue_name, 10)
    before = _snapshot_tables(db)
    assert _load(spark, dsn, queue=queue_name, num_partitions=1).count() == 10
    assert _snapshot_tables(db) == before
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.read_snapshot WHERE queue = %s", (queue_name,)
    ).fetchone() == (0,)


def test_expired_snapshot_is_dropped_and_its_dataframe_says_so(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    enqueue(db, queue_name, 40)
    df = _load(spark, dsn, queue=queue_name, num_partitions=2, snapshot_retention_s=0)
    assert df.count() == 40
    row = db.execute(
        f"SELECT relation FROM {BOOK}.read_snapshot WHERE queue = %s", (queue_name,)
    ).fetchone()
    assert row is not None and row[0] in _snapshot_tables(db)
    # Planning any later multi-partition read drops what has expired (here: at once).
    assert _load(spark, dsn, queue=queue_name + "_none", num_partitions=2).count() == 0
    assert row[0] not in _snapshot_tables(db)
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.read_snapshot WHERE queue = %s", (queue_name,)
    ).fetchone() == (0,)
    with pytest.raises(Exception, match="was dropped: snapshots unread for snapshot_retention_s"):
        df.collect()
