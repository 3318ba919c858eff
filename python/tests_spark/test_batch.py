"""Batch write and read: round trips, column mapping, exactly-once under task retries."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import psycopg
import pytest
from conftest import BOOK, count_live

UTC = dt.UTC


def _write(df: Any, dsn: str, queue: str, **options: Any) -> None:
    w = df.write.format("lonnymq").option("dsn", dsn).option("queue", queue).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def _read(spark: Any, dsn: str, **options: Any) -> Any:
    r = spark.read.format("lonnymq").option("dsn", dsn)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_round_trip_with_column_mapping(spark: Any, dsn: str, queue_name: str) -> None:
    later = dt.datetime(2099, 1, 1, tzinfo=UTC)
    rows = [
        (
            f"tenant_{i % 3}",
            f"job {i}",
            later if i % 10 == 0 else None,
            f"d{i % 30}" if i < 40 else None,  # rows i and i + 30: same key, same tenant
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(rows, "tenant string, body string, not_before timestamp, key string")
    _write(
        df.repartition(3),
        dsn,
        queue_name,
        channel_column="tenant",
        content_column="body",
        dequeue_at_column="not_before",
        dedup_key_column="key",
    )

    out = _read(spark, dsn, queue=queue_name, num_partitions=3).collect()
    # 40 rows share 30 dedup keys, pairwise in one tenant's channel (keys are scoped to
    # the channel): 10 are deduplicated against a live message.
    assert len(out) == 290
    by_content = {bytes(r.content).decode(): r for r in out}
    assert {r.channel for r in out} == {"tenant_0", "tenant_1", "tenant_2"}
    assert by_content["job 150"].channel == "tenant_0"
    # Timestamps come back as timestamps, in the session time zone (UTC here).
    assert by_content["job 150"].dequeue_at == later.replace(tzinfo=None)
    assert by_content["job 151"].dequeue_at < dt.datetime(2099, 1, 1)
    assert all(r.queue == queue_name and r.num_attempts == 0 for r in out)


def test_content_kinds(spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]) -> None:
    df = spark.createDataFrame(
        [(1, {"a": 1}), (2, {"b": 2})], "n int, attrs map<string,int>"
    ).selectExpr("named_struct('n', n, 'attrs', attrs, 'tags', array('x', 'y')) AS content")
    _write(df, dsn, queue_name)
    contents = sorted(
        (
            json.loads(bytes(r[0]))
            for r in db.execute(
                "SELECT content FROM lonnymq.messages WHERE queue = %s", (queue_name,)
            ).fetchall()
        ),
        key=lambda c: c["n"],
    )
    assert contents == [
        {"attrs": {"a": 1}, "n": 1, "tags": ["x", "y"]},
        {"attrs": {"b": 2}, "n": 2, "tags": ["x", "y"]},
    ]

    binary = spark.createDataFrame([(bytearray(b"\x00\xff"),)], "content binary")
    _write(binary, dsn, queue_name + "_bin")
    row = db.execute(
        "SELECT content, channel FROM lonnymq.messages WHERE queue = %s", (queue_name + "_bin",)
    ).fetchone()
    assert row == (b"\x00\xff", None)  # no channel column: a channel-less message


def test_missing_column_fails_before_any_task(spark: Any, dsn: str, queue_name: str) -> None:
    df = spark.createDataFrame([("x",)], "content string")
    with pytest.raises(Exception, match="channel column 'tenant' not found"):
        _write(df, dsn, queue_name, channel_column="tenant")


def test_task_failing_half_way_is_retried_exactly_once(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    @F.udf("string")
    def body(i: int) -> str | None:
        ctx = TaskContext.get()
        assert ctx is not None  # always set inside a task
        # On its first attempt, partition 1 has a NULL content at its 701st row: the
        # staging table refuses it (NOT NULL, as message_create_batch would), the writer's
        # transaction rolls back and the task fails half way, inside the writer.
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and i == 1700:
            return None
        return f"job {i}"

    df = spark.range(0, 3000, numPartitions=3).select(
        F.concat(F.lit("tenant_"), (F.col("id") % 4).cast("string")).alias("channel"),
        body("id").alias("content"),
    )
    before = _last_message_id(db)
    _write(df, dsn, queue_name, chunk_rows=200)

    assert count_live(db, queue_name) == 3000
    distinct = db.execute(
        "SELECT count(DISTINCT content) FROM lonnymq.messages WHERE queue = %s", (queue_name,)
    ).fetchone()
    assert distinct == (3000,)
    attempts = db.execute(
        f"SELECT partition_id, task_attempt, rows, created FROM {BOOK}.write_partition"
        " WHERE queue = %s ORDER BY partition_id",
        (queue_name,),
    ).fetchall()
    assert attempts == [(0, 0, 1000, 1000), (1, 1, 1000, 1000), (2, 0, 1000, 1000)]
    # Tasks only stage: the failed attempt never created a message, so the id sequence
    # moved by exactly the 3000 messages the commit created.
    assert _last_message_id(db) - before - 1 == 3000


def _last_message_id(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT nextval('lonnymq.message_id_seq')").fetchone()
    assert row is not None
    return int(row[0])


def test_rerun_with_same_idempotency_key_creates_nothing(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    df = spark.range(0, 500, numPartitions=2).selectExpr("CAST(id AS string) AS content")
    _write(df, dsn, queue_name, idempotency_key="nightly-2026-11-21")
    assert count_live(db, queue_name) == 500
    # The same key again, even partitioned differently: nothing new.
    _write(df.repartition(5), dsn, queue_name, idempotency_key="nightly-2026-11-21")
    assert count_live(db, queue_name) == 500
    # Another key is another write.
    _write(df, dsn, queue_name, idempotency_key="nightly-2026-11-22")
    assert count_live(db, queue_name) == 1000
    job = db.execute(
        f"SELECT partitions, created FROM {BOOK}.write_job"
        " WHERE queue = %s AND write_id = 'key:nightly-2026-11-21'",
        (queue_name,),
    ).fetchone()
    assert job == (2, 500)


def test_failed_job_resumed_with_its_idempotency_key(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    from pyspark.sql import functions as F

    healed = str(tmp_path / "healed")

    @F.udf("string")
    def body(i: int) -> str:
        import os

        if i == 250 and not os.path.exists(healed):
            raise RuntimeError("partition 2 keeps failing")
        return f"job {i}"

    df = spark.range(0, 300, numPartitions=3).select(body("id").alias("content"))
    with pytest.raises(Exception, match="keeps failing"):
        _write(df, dsn, queue_name, idempotency_key="k1")
    # Partition 2 failed every attempt: the job aborted and published nothing, although
    # partitions 0 and 1 had staged theirs; abort dropped the staging.
    assert count_live(db, queue_name) == 0
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_run WHERE queue = %s", (queue_name,)
    ).fetchone() == (0,)
    open(healed, "w").close()
    _write(df, dsn, queue_name, idempotency_key="k1")
    assert count_live(db, queue_name) == 300
    _write(df, dsn, queue_name, idempotency_key="k1")
    assert count_live(db, queue_name) == 300


def test_read_channel_and_archive_tables(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "SELECT lonnymq.channel_set(%s, 'acme', max_concurrency => 2, retain_completed => true)",
        (queue_name,),
    )
    df = spark.createDataFrame(
        [("acme", f"m{i}") for i in range(20)], "channel string, content string"
    )
    _write(df, dsn, queue_name)
    for d in db.execute(
        "SELECT id, num_attempts FROM lonnymq.message_dequeue(%s, 60000, 2)", (queue_name,)
    ).fetchall():
        db.execute("SELECT lonnymq.message_complete(%s, %s)", d)

    channels = _read(spark, dsn, table="channel", queue=queue_name).collect()
    assert [(c.channel, c.ready, c.max_concurrency, c.retain_completed) for c in channels] == [
        ("acme", 18, 2, True)
    ]

    archive = _read(spark, dsn, table="message_archive", queue=queue_name, num_partitions=2)
    assert dict(archive.dtypes)["archived_at"] == "timestamp"
    rows = archive.collect()
    assert [(r.channel, r.outcome, r.num_attempts) for r in rows] == [("acme", "completed", 1)] * 2
    assert all(r.archived_at >= r.created_at for r in rows)


def test_read_of_an_empty_queue(spark: Any, dsn: str, queue_name: str) -> None:
    assert _read(spark, dsn, queue=queue_name).count() == 0
