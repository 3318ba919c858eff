"""The write path without Spark's scheduler: what retried and speculative task attempts, a
failing commit and a dead driver leave behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from conftest import BOOK, count_live

from lonnymq.spark import _bookkeeping, _write
from lonnymq.spark._convert import STRING, ColumnMapping
from lonnymq.spark._options import Options

MAPPING = ColumnMapping("channel", "content", STRING, None, None)


def _batches(n: int, gate: threading.Event | None = None) -> Iterator[Any]:
    for start in range(0, n, 100):
        if gate is not None and start == 200:
            gate.wait(10)  # hold the transaction open half way
        rows = range(start, min(n, start + 100))
        yield pa.record_batch(
            [pa.array([f"t{i % 3}" for i in rows]), pa.array([f"m{i}" for i in rows])],
            names=["channel", "content"],
        )


@pytest.fixture
def opts(dsn: str, queue_name: str) -> Options:
    _bookkeeping.install(dsn)
    return Options.parse({"dsn": dsn, "queue": queue_name, "chunk_rows": "150"})


@pytest.fixture
def as_task(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sets the (partition, attempt) the write path sees, per thread, as Spark's TaskContext
    would."""
    local = threading.local()
    monkeypatch.setattr(_write, "task", lambda: getattr(local, "task", (0, 0)))

    def set_task(partition: int, attempt: int) -> None:
        local.task = (partition, attempt)

    return set_task


def _stage(
    opts: Options, run: _write.Run, write_id: str, n: int, gate: threading.Event | None = None
) -> _write.PartitionResult:
    return _write.stage_partition(
        opts, run, write_id, _write.arrow_chunks(_batches(n, gate), MAPPING)
    )


def _staged(db: psycopg.Connection[Any], run: _write.Run) -> int:
    row = db.execute(f"SELECT count(*) FROM {BOOK}.{run.table}").fetchone()
    assert row is not None
    return int(row[0])


def _run_exists(db: psycopg.Connection[Any], run: _write.Run) -> bool:
    row = db.execute(
        f"SELECT to_regclass(%s) IS NOT NULL AND EXISTS (SELECT 1 FROM {BOOK}.write_run"
        " WHERE run_id = %s)",
        (f"{BOOK}.{run.table}", run.run_id),
    ).fetchone()
    return bool(row and row[0])


def test_staged_rows_are_no_messages_until_the_driver_publishes_them(
    opts: Options, queue_name: str, db: psycopg.Connection[Any], as_task: Any
) -> None:
    run = _write.open_run(opts, "batch")
    as_task(0, 0)
    first = _stage(opts, run, "auto:t1", 500)
    as_task(1, 0)
    second = _stage(opts, run, "auto:t1", 300)
    assert (first.rows, second.rows) == (500, 300)
    assert count_live(db, queue_name) == 0 and _staged(db, run) == 800

    done = _write.publish(opts, MAPPING, run, "auto:t1", [second, first])
    assert (done.already, done.partitions, done.rows, done.created) == (False, 2, 800, 800)
    assert count_live(db, queue_name) == 800
    # Publishing is idempotent: the same commit again (a driver that died after its commit
    # and runs it again) finds the write committed and publishes nothing.
    assert _write.publish(opts, MAPPING, run, "auto:t1", [first, second]).already
    assert count_live(db, queue_name) == 800
    # The commit forgot the attempts; the batch run's table goes whole with close_run.
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_attempt WHERE run_id = %s", (run.run_id,)
    ).fetchone() == (0,)
    _write.close_run(opts, run)
    assert not _run_exists(db, run)
    published = db.execute(
        f"SELECT partition_id, rows, created FROM {BOOK}.write_partition"
        " WHERE write_id = 'auto:t1' ORDER BY partition_id"
    ).fetchall()
    assert published == [(0, 500, 500), (1, 300, 300)]


def test_speculative_attempts_both_stage_and_exactly_the_handed_one_is_published(
    opts: Options, queue_name: str, db: psycopg.Connection[Any], as_task: Any
) -> None:
    run = _write.open_run(opts, "batch")
    gate = threading.Event()
    results: dict[int, _write.PartitionResult] = {}

    def attempt(n: int, g: threading.Event | None) -> None:
        as_task(0, n)
        results[n] = _stage(opts, run, "auto:t2", 400, g)

    slow = threading.Thread(target=attempt, args=(0, gate))
    slow.start()
    fast = threading.Thread(target=attempt, args=(1, None))
    fast.start()  # stages in full while the slow attempt's transaction is open
    fast.join(30)
    gate.set()
    slow.join(30)
    assert results[0].rows == results[1].rows == 400
    assert results[0].attempt_id != results[1].attempt_id
    assert _staged(db, run) == 800 and count_live(db, queue_name) == 0
    # Spark's commit coordinator lets one attempt commit: the driver gets its message only.
    done = _write.publish(opts, MAPPING, run, "auto:t2", [results[1]])
    assert done.created == 400 and count_live(db, queue_name) == 400
    assert db.execute(
        f"SELECT task_attempt FROM {BOOK}.write_partition WHERE write_id = 'auto:t2'"
    ).fetchall() == [(1,)]
    # Should Spark ever hand both, one copy of the partition is published, not two.
    run2 = _write.open_run(opts, "batch")
    as_task(0, 0)
    a = _stage(opts, run2, "auto:t2b", 100)
    as_task(0, 1)
    b = _stage(opts, run2, "auto:t2b", 100)
    assert _write.publish(opts, MAPPING, run2, "auto:t2b", [b, a]).created == 100
    assert count_live(db, queue_name) == 500


def test_failure_half_way_stages_nothing(
    opts: Options, queue_name: str, db: psycopg.Connection[Any], as_task: Any
) -> None:
    run = _write.open_run(opts, "batch")

    def failing() -> Iterator[Any]:
        yield from _batches(300)
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        _write.stage_partition(opts, run, "auto:t3", _write.arrow_chunks(failing(), MAPPING))
    assert _staged(db, run) == 0
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_attempt WHERE write_id = 'auto:t3'"
    ).fetchone() == (0,)
    # The retry stages the partition in full, and the commit publishes it.
    as_task(0, 1)
    retry = _stage(opts, run, "auto:t3", 300)
    assert _write.publish(opts, MAPPING, run, "auto:t3", [retry]).created == 300
    assert count_live(db, queue_name) == 300


def test_a_commit_that_fails_half_way_publishes_nothing(
    opts: Options, queue_name: str, db: psycopg.Connection[Any], as_task: Any
) -> None:
    run = _write.open_run(opts, "batch")
    results = []
    for p in range(3):
        as_task(p, 0)
        results.append(_stage(opts, run, "auto:t5", 200))
    # The last attempt's rows vanish (as an UNLOGGED table's do in a server crash): the
    # commit has created the first two partitions' messages when it finds out.
    db.execute(
        f"DELETE FROM {BOOK}.{run.table} WHERE attempt = %s AND ord >= 100",
        (results[2].attempt_id,),
    )
    with pytest.raises(_write.StagingLost, match="partition 2 staged 200 rows but 100"):
        _write.publish(opts, MAPPING, run, "auto:t5", results)
    assert count_live(db, queue_name) == 0
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_job WHERE write_id = 'auto:t5'"
    ).fetchone() == (0,)
    assert _staged(db, run) == 500  # the commit changed nothing: Spark aborts, abort drops
    _write.close_run(opts, run)
    assert not _run_exists(db, run)


def test_rerun_after_a_dead_driver_publishes_once_and_removes_the_dead_run(
    opts: Options, queue_name: str, db: psycopg.Connection[Any], as_task: Any
) -> None:
    dead = _write.open_run(opts, "batch")
    for p in range(2):
        as_task(p, 0)
        _stage(opts, dead, "key:nightly", 250)
    # The driver died before commit(): nothing published. The job runs again, same key.
    rerun = _write.open_run(opts, "batch")
    results = []
    for p in range(2):
        as_task(p, 0)
        results.append(_stage(opts, rerun, "key:nightly", 250))
    assert _write.publish(opts, MAPPING, rerun, "key:nightly", results).created == 500
    _write.close_run(opts, rerun)
    assert count_live(db, queue_name) == 500
    assert _staged(db, dead) == 0  # the dead run's attempts can never be published now
    # A third run of the key stages nothing at all.
    third = _write.open_run(opts, "batch")
    late = _stage(opts, third, "key:nightly", 250)
    assert late.skipped and late.attempt_id is None
    assert _write.publish(opts, MAPPING, third, "key:nightly", [late]).already
    assert count_live(db, queue_name) == 500
    # The dead run is dropped once idle for stage_retention_s.
    db.execute(
        f"UPDATE {BOOK}.write_run SET used_at = now() - interval '2 days' WHERE run_id = %s",
        (dead.run_id,),
    )
    with psycopg.connect(opts.dsn, autocommit=True) as conn:
        assert _write.drop_idle_runs(conn, opts.stage_retention_s) >= 1
    assert not _run_exists(db, dead) and _run_exists(db, third)
    _write.close_run(opts, third)


def test_bad_rows_fail_the_task_not_the_commit(opts: Options, db: psycopg.Connection[Any]) -> None:
    run = _write.open_run(opts, "batch")
    bad = pa.record_batch(
        [pa.array(["t", "x" * 257]), pa.array(["a", "b"])], names=["channel", "content"]
    )
    with pytest.raises(psycopg.errors.CheckViolation):
        _write.stage_partition(opts, run, "auto:t6", _write.arrow_chunks([bad], MAPPING))
    assert _staged(db, run) == 0
    _write.close_run(opts, run)


def test_options_are_checked() -> None:
    from lonnymq.spark import OptionError

    with pytest.raises(OptionError, match="dsn"):
        Options.parse({"queue": "q"})
    with pytest.raises(OptionError, match="table"):
        Options.parse({"dsn": "x", "table": "messages"})
    with pytest.raises(OptionError, match="max_messages_per_batch"):
        Options.parse({"dsn": "x", "max_messages_per_batch": "0"})
    o = Options.parse({"DSN": "x", "Queue": "q", "lock_ms": "3000"})
    assert (o.queue, o.heartbeat_ms, o.table) == ("q", 1000, "message")


def test_timestamp_ntz_is_taken_as_utc() -> None:
    import datetime as dt

    mapping = ColumnMapping(None, "content", STRING, "at", None)
    batch = pa.record_batch(
        [pa.array(["x"]), pa.array([dt.datetime(2030, 1, 2, 3, 4, 5)], pa.timestamp("us"))],
        names=["content", "at"],
    )
    (chunk,) = _write.arrow_chunks([batch], mapping)
    assert chunk[2] == [dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)]


def test_arrow_batches_larger_than_chunk_rows_are_split(
    opts: Options, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    rows = range(1000)
    batch = pa.record_batch(
        [pa.array([f"t{i % 3}" for i in rows]), pa.array([f"m{i}" for i in rows])],
        names=["channel", "content"],
    )
    run = _write.open_run(opts, "batch")
    result = _write.stage_partition(opts, run, "auto:t4", _write.arrow_chunks([batch], MAPPING))
    done = _write.publish(opts, MAPPING, run, "auto:t4", [result])
    _write.close_run(opts, run)
    assert (result.rows, done.created) == (1000, 1000)  # in chunks of at most 150
    order = db.execute(
        "SELECT array_agg(convert_from(content, 'UTF8') ORDER BY id) FROM lonnymq.messages"
        " WHERE queue = %s",
        (queue_name,),
    ).fetchone()
    assert order is not None and order[0] == [f"m{i}" for i in rows]  # input order kept


def test_stream_offsets_of_two_streams_are_refused(opts: Options) -> None:
    from lonnymq.spark._stream import StreamCore

    core = StreamCore(opts)
    try:
        with pytest.raises(RuntimeError, match=r"needs PySpark >= 4\.2"):
            core.partitions({"stream": "a", "batch": 3}, {"stream": "b", "batch": 1})
        assert core.initial_offset() == {"batch": 0}
        # Nothing queued: the start comes back as it was, so Spark sees no new data.
        assert core.latest_offset({"stream": "b", "batch": 1}, None) == {"stream": "b", "batch": 1}
    finally:
        core.stop()


def test_speculative_attempts_through_the_data_source_writer(
    dsn: str, queue_name: str, db: psycopg.Connection[Any], as_task: Any
) -> None:
    """The same race through the real writer class, pickled as Spark ships it to tasks."""
    import pickle

    from pyspark.sql.types import StringType, StructField, StructType

    from lonnymq.spark.datasource import LonnymqDataSource

    schema = StructType(
        [StructField("channel", StringType()), StructField("content", StringType())]
    )
    driver = LonnymqDataSource({"dsn": dsn, "queue": queue_name}).writer(schema, False)
    gate = threading.Event()
    results: dict[tuple[int, int], Any] = {}

    def attempt(partition: int, n: int, rows: int, g: threading.Event | None) -> None:
        as_task(partition, n)
        task_writer = pickle.loads(pickle.dumps(driver))
        results[(partition, n)] = task_writer.write(_batches(rows, g))

    threads = [
        threading.Thread(target=attempt, args=(0, 0, 400, gate)),  # slow
        threading.Thread(target=attempt, args=(0, 1, 400, None)),  # its speculative copy
        threading.Thread(target=attempt, args=(1, 0, 200, None)),
    ]
    threads[0].start()  # holds its staging transaction open half way
    for t in threads[1:]:
        t.start()
        t.join(30)
    gate.set()
    threads[0].join(30)
    assert results[(0, 0)].rows == results[(0, 1)].rows == 400
    assert count_live(db, queue_name) == 0
    # The speculative copy won the commit coordinator: the driver commits with its message.
    driver.commit([results[(0, 1)], results[(1, 0)]])
    assert count_live(db, queue_name) == 600
    assert db.execute(
        f"SELECT partition_id, task_attempt, rows FROM {BOOK}.write_partition"
        " WHERE queue = %s ORDER BY partition_id",
        (queue_name,),
    ).fetchall() == [(0, 1, 400), (1, 0, 200)]
    # The loser's staged copy is gone with the run.
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_run WHERE queue = %s", (queue_name,)
    ).fetchone() == (0,)
    assert db.execute(
        f"SELECT count(*) FROM {BOOK}.write_attempt WHERE queue = %s", (queue_name,)
    ).fetchone() == (0,)
