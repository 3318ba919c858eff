"""Structured Streaming: the queue as a source (at-least-once, restart from checkpoint) and
the sink (a replayed micro-batch creates nothing)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from conftest import BOOK, count_live, enqueue


def _wait(condition: Any, timeout: float, what: str, query: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


def _source(spark: Any, dsn: str, queue: str, **options: Any) -> Any:
    r = spark.readStream.format("lonnymq").option("dsn", dsn).option("queue", queue)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _seen_table(db: psycopg.Connection[Any], queue: str) -> str:
    table = f"seen_{queue}"
    db.execute(
        f"CREATE TABLE {table} (batch_id bigint, id bigint, num_attempts bigint, content bytea)"
    )
    return table


def _record(dsn: str, table: str, df: Any, batch_id: int) -> None:
    rows = [
        (batch_id, r.id, r.num_attempts, bytes(r.content))
        for r in df.select("id", "num_attempts", "content").collect()
    ]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", rows)


@pytest.mark.timeout(300)
def test_source_killed_and_restarted_from_checkpoint_loses_nothing(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    ids = enqueue(db, queue_name, 300)
    seen = _seen_table(db, queue_name)
    checkpoint = str(tmp_path / "checkpoint")

    def crashing(df: Any, batch_id: int) -> None:
        if batch_id == 2:
            raise RuntimeError("simulated crash while processing micro-batch 2")
        _record(dsn, seen, df, batch_id)

    stream = _source(spark, dsn, queue_name, max_messages_per_batch=50)
    query = (
        stream.writeStream.foreachBatch(crashing).option("checkpointLocation", checkpoint).start()
    )
    with pytest.raises(Exception, match="simulated crash"):
        query.awaitTermination(120)

    # Batches 0 and 1 reached the sink; batch 2 was dequeued but never committed, so its
    # messages are still live and locked: nothing was completed before its batch committed.
    in_flight = {
        r[0]
        for r in db.execute(
            "SELECT id FROM lonnymq.messages WHERE queue = %s AND locked_until IS NOT NULL",
            (queue_name,),
        ).fetchall()
    }
    assert len(in_flight) == 50
    recorded = db.execute(f"SELECT count(*) FROM {seen}").fetchone()
    assert recorded == (100,)
    assert count_live(db, queue_name) == 200  # 100 completed

    # Restart from the same checkpoint: batch 2 is replayed with the same messages.
    query = (
        stream.writeStream.foreachBatch(lambda df, batch_id: _record(dsn, seen, df, batch_id))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait(lambda: count_live(db, queue_name) == 0, 100, "the queue to drain", query)
    finally:
        query.stop()

    replayed = {r[0] for r in db.execute(f"SELECT id FROM {seen} WHERE batch_id = 2").fetchall()}
    assert replayed == in_flight
    rows = db.execute(f"SELECT id, num_attempts FROM {seen}").fetchall()
    # Every message exactly once, first delivery (the restarted query heartbeat the locks of
    # the replayed batch before they expired), in batches of at most 50.
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert {r[1] for r in rows} == {1}
    sizes = db.execute(
        f"SELECT max(n) FROM (SELECT count(*) n FROM {seen} GROUP BY batch_id) s"
    ).fetchone()
    assert sizes == (50,)
    assert db.execute(f"SELECT count(*) FROM {BOOK}.stream_delivery").fetchone() == (0,)


@pytest.mark.timeout(300)
def test_driver_killed_with_sigkill_and_restarted_loses_nothing(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    ids = enqueue(db, queue_name, 200)
    seen = _seen_table(db, queue_name)
    checkpoint = str(tmp_path / "checkpoint")
    child = subprocess.Popen(
        [
            sys.executable,
            os.path.join(os.path.dirname(__file__), "stream_child.py"),
            dsn,
            queue_name,
            checkpoint,
            seen,
        ],
        start_new_session=True,  # its JVM and Python workers share its process group
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def progressed() -> bool:
            assert child.poll() is None, "the streaming child exited early"
            row = db.execute(f"SELECT count(*) FROM {seen}").fetchone()
            return row is not None and row[0] >= 40

        _wait(progressed, 150, "the child query to process 2 batches")
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # driver, JVM and workers at once: no cleanup
        child.wait(30)
    assert count_live(db, queue_name) > 0

    query = (
        _source(spark, dsn, queue_name, max_messages_per_batch=20)
        .writeStream.foreachBatch(lambda df, batch_id: _record(dsn, seen, df, batch_id))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait(lambda: count_live(db, queue_name) == 0, 100, "the queue to drain", query)
    finally:
        query.stop()
    # At-least-once: every message reached the sink (a batch cut by the kill may twice).
    assert {r[0] for r in db.execute(f"SELECT id FROM {seen}").fetchall()} == set(ids)
    assert db.execute(f"SELECT count(*) FROM {BOOK}.stream_delivery").fetchone() == (0,)


@pytest.mark.timeout(200)
def test_locks_outlive_a_slow_batch(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    enqueue(db, queue_name, 20)
    seen = _seen_table(db, queue_name)

    held: list[bool] = []

    def slow(df: Any, batch_id: int) -> None:
        ids = [r.id for r in df.select("id").collect()]
        time.sleep(3.5)  # lock_ms is 1 s: only heartbeats keep the messages ours
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT bool_and(locked_until > clock_timestamp()) FROM lonnymq.messages"
                " WHERE id = ANY(%s)",
                (ids,),
            ).fetchone()
            held.append(bool(row and row[0]))
            # A competing consumer finds nothing to take from under the slow batch.
            with conn.transaction(force_rollback=True):
                stolen = conn.execute(
                    "SELECT count(*) FROM lonnymq.message_dequeue(%s, 1000, 100)", (queue_name,)
                ).fetchone()
            held.append(stolen == (0,))
        _record(dsn, seen, df, batch_id)

    query = (
        _source(spark, dsn, queue_name, lock_ms=1000, heartbeat_ms=250)
        .writeStream.foreachBatch(slow)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        _wait(lambda: count_live(db, queue_name) == 0, 100, "the queue to drain", query)
    finally:
        query.stop()
    rows = db.execute(f"SELECT id, num_attempts FROM {seen}").fetchall()
    assert len(rows) == 20 and {r[1] for r in rows} == {1}  # never redelivered
    assert held and all(held)


@pytest.mark.timeout(300)
def test_sink_replayed_batch_creates_nothing(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    for f in range(2):
        with open(source_dir / f"part{f}.json", "w") as out:
            for i in range(100):
                out.write(json.dumps({"tenant": f"t{i % 4}", "job": {"n": f * 100 + i}}) + "\n")
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> Any:
        df = (
            spark.readStream.schema("tenant string, job struct<n: int>")
            .option("maxFilesPerTrigger", 1)
            .json(str(source_dir))
        )
        query = (
            df.writeStream.format("lonnymq")
            .option("dsn", dsn)
            .option("queue", queue_name)
            .option("channel_column", "tenant")
            .option("content_column", "job")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return query

    query = run()
    assert count_live(db, queue_name) == 200
    # Forget that micro-batch 1 committed: the restarted query runs it again.
    os.remove(os.path.join(checkpoint, "commits", "1"))
    shutil.rmtree(os.path.join(checkpoint, "commits", ".1.crc"), ignore_errors=True)
    if os.path.exists(os.path.join(checkpoint, "commits", ".1.crc")):
        os.remove(os.path.join(checkpoint, "commits", ".1.crc"))
    replay = run()
    assert replay.id == query.id
    assert [p["batchId"] for p in replay.recentProgress if p["numInputRows"]] == [1]
    assert count_live(db, queue_name) == 200
    contents = {
        json.loads(bytes(r[0]))["n"]
        for r in db.execute(
            "SELECT content FROM lonnymq.messages WHERE queue = %s", (queue_name,)
        ).fetchall()
    }
    assert contents == set(range(200))
    jobs = db.execute(
        f"SELECT write_id FROM {BOOK}.write_job WHERE queue = %s ORDER BY write_id",
        (queue_name,),
    ).fetchall()
    assert [j[0] for j in jobs] == [f"stream:{query.id}:0", f"stream:{query.id}:1"]


@pytest.mark.timeout(300)
def test_available_now_drains_what_was_ready_in_limited_batches_then_stops(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    ids = enqueue(db, queue_name, 230, channels=1)
    seen = _seen_table(db, queue_name)
    later: list[int] = []

    def record(df: Any, batch_id: int) -> None:
        _record(dsn, seen, df, batch_id)
        if batch_id == 0:  # created after the query started: left for its next run
            with psycopg.connect(dsn, autocommit=True) as conn:
                later.extend(enqueue(conn, queue_name, 40, channels=1))

    def run() -> Any:
        query = (
            _source(spark, dsn, queue_name, max_messages_per_batch=50)
            .writeStream.foreachBatch(record)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(200), "an availableNow query must stop by itself"
        assert query.exception() is None
        return query

    run()
    sizes = db.execute(
        f"SELECT count(*) FROM {seen} GROUP BY batch_id ORDER BY batch_id"
    ).fetchall()
    # The read limit (ReadMaxRows from max_messages_per_batch) cuts the 230 into 5 batches.
    assert [s[0] for s in sizes] == [50, 50, 50, 50, 30]
    assert sorted(r[0] for r in db.execute(f"SELECT id FROM {seen}").fetchall()) == sorted(ids)
    # Every batch was completed, the last one too (Spark asks once more before stopping);
    # the 40 created meanwhile wait, unlocked.
    live = db.execute(
        "SELECT id, locked_until FROM lonnymq.messages WHERE queue = %s", (queue_name,)
    ).fetchall()
    assert sorted(r[0] for r in live) == sorted(later) and {r[1] for r in live} == {None}
    assert db.execute(f"SELECT count(*) FROM {BOOK}.stream_delivery").fetchone() == (0,)

    # The next run, from the same checkpoint, drains them.
    run()
    assert count_live(db, queue_name) == 0
    rows = db.execute(f"SELECT id FROM {seen}").fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids + later)  # each once
