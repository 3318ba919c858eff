"""The faults that happen to real Spark writes, each against the real data source: every case
ends with exactly the DataFrame's rows in the queue, each once, and nothing left staged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import BOOK, count_live

from lonnymq.spark import _bookkeeping

CHILD = os.path.join(os.path.dirname(__file__), "write_child.py")


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def _save(df: Any, dsn: str, queue: str, **options: Any) -> None:
    w = df.write.format("lonnymq").option("dsn", dsn).option("queue", queue).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def _frame(spark: Any, rows: int, body: Any = None) -> Any:
    from pyspark.sql import functions as F

    content = F.col("id").cast("string") if body is None else body(F.col("id"))
    return spark.range(0, rows, numPartitions=4).select(
        F.concat(F.lit("t"), (F.col("id") % 20).cast("string")).alias("channel"),
        content.alias("content"),
    )


def _assert_exactly(db: psycopg.Connection[Any], queue: str, rows: int) -> None:
    """The queue holds the rows 0..rows-1, each once; nothing of the write is staged."""
    contents = db.execute(
        "SELECT convert_from(content, 'UTF8') FROM lonnymq.messages WHERE queue = %s", (queue,)
    ).fetchall()
    assert sorted(int(c[0]) for c in contents) == list(range(rows))
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_attempt WHERE queue = %s", (queue,)
    ).fetchone() == (0,)


def _published(db: psycopg.Connection[Any], queue: str) -> list[tuple[Any, ...]]:
    return db.execute(
        f"SELECT partition_id, task_attempt, rows FROM {BOOK}.write_partition"
        " WHERE queue = %s ORDER BY partition_id",
        (queue,),
    ).fetchall()


@pytest.fixture
def stage_log(dsn: str, db: psycopg.Connection[Any]) -> Iterator[str]:
    """Logs every attempt that finished staging (partition, attempt, rows): the attempts
    Spark did not commit are deleted by the job's commit, this keeps the evidence."""
    _bookkeeping.install(dsn)
    db.execute(
        "CREATE TABLE stage_log (queue text, partition_id int, task_attempt int, rows bigint);"
        "CREATE FUNCTION stage_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO stage_log VALUES (NEW.queue, NEW.partition_id, NEW.task_attempt, NEW.rows);"
        " RETURN NEW; END $$;"
        f"CREATE TRIGGER stage_log AFTER UPDATE OF rows ON {BOOK}.write_attempt"
        " FOR EACH ROW EXECUTE FUNCTION stage_log()"
    )
    yield "stage_log"
    db.execute(
        f"DROP TRIGGER stage_log ON {BOOK}.write_attempt;"
        "DROP FUNCTION stage_log(); DROP TABLE stage_log"
    )


@pytest.mark.timeout(300)
def test_failure_upstream_of_the_writer_in_the_first_attempt(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], stage_log: str
) -> None:
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    @F.udf("string")
    def body(i: int) -> str:
        ctx = TaskContext.get()
        assert ctx is not None  # always set inside a task
        # The last row of partition 1 fails in its first attempt, upstream of the writer.
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and i == 19_999:
            raise RuntimeError("upstream UDF failed at the end of partition 1")
        return str(i)

    # As in issue 12: 4 partitions of 10,000 rows, enough for the writer to see most of
    # partition 1 before the UDF fails.
    _save(_frame(spark, 40_000, body), dsn, queue_name, idempotency_key="upstream")

    _assert_exactly(db, queue_name, 40_000)
    assert _published(db, queue_name) == [
        (0, 0, 10_000),
        (1, 1, 10_000),
        (2, 0, 10_000),
        (3, 0, 10_000),
    ]
    # The first attempt of partition 1 saw its input end early and staged what it had seen;
    # Spark failed that task, so its rows were never published.
    partial = db.execute(
        "SELECT rows FROM stage_log WHERE queue = %s AND partition_id = 1 AND task_attempt = 0",
        (queue_name,),
    ).fetchall()
    assert partial and all(0 < r[0] < 10_000 for r in partial), partial
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_run WHERE queue = %s", (queue_name,)
    ).fetchone() == (0,)


def _pid_of_client_port(port: int) -> int:
    """The local process holding a TCP connection from ``port`` (the writer's Python worker)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in {f"socket:[{i}]" for i in inodes}:
                    return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process holds client port {port}")


@pytest.mark.timeout(300)
def test_writer_process_killed_mid_partition(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    # Partition 1's first attempt stops when it has COPYed all its rows, in its still open
    # transaction: a trigger makes it wait for an advisory lock this test holds.
    _bookkeeping.install(dsn)
    db.execute(
        "CREATE FUNCTION hold_attempt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.queue = TG_ARGV[0] AND NEW.partition_id = 1 AND NEW.task_attempt = 0 THEN"
        "  PERFORM pg_advisory_xact_lock(4242); END IF; RETURN NEW; END $$;"
        f"CREATE TRIGGER hold_attempt BEFORE UPDATE OF rows ON {BOOK}.write_attempt"
        f" FOR EACH ROW EXECUTE FUNCTION hold_attempt('{queue_name}')"
    )
    db.execute("SELECT pg_advisory_lock(4242)")
    failure: list[BaseException] = []

    def job() -> None:
        # A new Python thread is a new JVM thread without an active session, where Spark
        # looks up Python data sources.
        spark._jvm.org.apache.spark.sql.classic.SparkSession.setActiveSession(spark._jsparkSession)
        try:
            _save(_frame(spark, 4000), dsn, queue_name)
        except BaseException as e:
            failure.append(e)

    runner = threading.Thread(target=job)
    runner.start()
    try:

        def held() -> list[tuple[Any, ...]]:
            return db.execute(
                "SELECT client_port FROM pg_stat_activity WHERE application_name = 'lonnymq-spark'"
                " AND wait_event = 'advisory' AND datname = current_database()"
            ).fetchall()

        _wait(lambda: len(held()) == 1, 150, "partition 1's writer to hold its staged rows")
        os.kill(_pid_of_client_port(held()[0][0]), signal.SIGKILL)
    finally:
        db.execute("SELECT pg_advisory_unlock(4242)")
        runner.join(200)
        db.execute(
            f"DROP TRIGGER hold_attempt ON {BOOK}.write_attempt; DROP FUNCTION hold_attempt()"
        )
    assert not runner.is_alive() and not failure, failure
    _assert_exactly(db, queue_name, 4000)
    published = _published(db, queue_name)
    assert [p[0] for p in published] == [0, 1, 2, 3] and published[1][1] >= 1


def _child(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        start_new_session=True,  # its JVM and Python workers share its session
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kill_session(sid: int) -> None:
    """SIGKILLs every process of a session: the driver, its JVM and the Python workers
    (pyspark's daemon moves itself and its workers into a process group of their own)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                # Fields after the command name (which may hold spaces): state, ppid, pgrp, sid.
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _kill_in_commit(dsn: str, db: psycopg.Connection[Any], child: subprocess.Popen[bytes]) -> int:
    """Waits until the child's driver commit() blocks on the write_job lock the caller holds,
    then kills the child (driver, JVM and workers, no clean-up) and waits for its session to
    end. Its commit never ran: nothing may be published. Returns the commit's backend pid."""

    def blocked() -> list[tuple[Any, ...]]:
        assert child.poll() is None, "the child exited before its commit"
        return db.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'lonnymq-spark'"
            f" AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO {BOOK}.write_job%%'"
        ).fetchall()

    _wait(lambda: bool(blocked()), 200, "the child's commit to wait for the lock")
    (pid,) = blocked()[0]
    _kill_session(child.pid)
    child.wait(30)
    return int(pid)


def _wait_session_gone(db: psycopg.Connection[Any], pid: int) -> None:
    """The killed driver's session ends (rolling back) once the lock it waited for is free."""
    _wait(
        lambda: (
            db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            == (0,)
        ),
        60,
        "the killed driver's session to end",
    )


@pytest.mark.timeout(400)
def test_driver_killed_before_job_commit_then_rerun_with_the_same_key(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    _bookkeeping.install(dsn)
    with psycopg.connect(dsn) as locker:
        locker.execute(f"LOCK TABLE {BOOK}.write_job IN SHARE MODE")
        child = _child(dsn, queue_name, "batch", "driver-kill", "4000")
        try:
            pid = _kill_in_commit(dsn, db, child)
        finally:
            _kill_session(child.pid)
            locker.rollback()
    _wait_session_gone(db, pid)
    # Every task had staged; the driver died before the job commit: nothing is a message.
    assert count_live(db, queue_name) == 0
    staged = db.execute(
        f"SELECT count(*), sum(rows) FROM {BOOK}.write_attempt WHERE queue = %s",
        (queue_name,),
    ).fetchone()
    assert staged == (4, 4000)

    _save(_frame(spark, 4000), dsn, queue_name, idempotency_key="driver-kill")
    _assert_exactly(db, queue_name, 4000)  # the dead run's staged rows were forgotten too
    _save(_frame(spark, 4000), dsn, queue_name, idempotency_key="driver-kill")
    _assert_exactly(db, queue_name, 4000)


@pytest.mark.timeout(400)
def test_sink_batch_replayed_after_a_driver_killed_in_its_commit(
    spark: Any, dsn: str, queue_name: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    _bookkeeping.install(dsn)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        with open(source / f"part{f}.json", "w") as out:
            for i in range(100):
                out.write(json.dumps({"tenant": f"t{i % 4}", "n": f * 100 + i}) + "\n")
    checkpoint = str(tmp_path / "checkpoint")
    with psycopg.connect(dsn) as locker:
        locker.execute(f"LOCK TABLE {BOOK}.write_job IN SHARE MODE")
        child = _child(dsn, queue_name, "stream", str(source), checkpoint)
        try:
            pid = _kill_in_commit(dsn, db, child)
        finally:
            _kill_session(child.pid)
            locker.rollback()
    _wait_session_gone(db, pid)
    assert count_live(db, queue_name) == 0  # micro-batch 0 staged, never published

    # Restarted from its checkpoint, the query replays micro-batch 0, then runs batch 1.
    query = (
        spark.readStream.schema("tenant string, n int")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .selectExpr("tenant AS channel", "CAST(n AS string) AS content")
        .writeStream.format("lonnymq")
        .option("dsn", dsn)
        .option("queue", queue_name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(200)
    assert query.exception() is None
    _assert_exactly(db, queue_name, 200)
    jobs = db.execute(
        f"SELECT write_id FROM {BOOK}.write_job WHERE queue = %s ORDER BY write_id",
        (queue_name,),
    ).fetchall()
    assert [j[0] for j in jobs] == [f"stream:{query.id}:0", f"stream:{query.id}:1"]
