"""The write path without Spark: what a retried or speculative task attempt meets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from conftest import count_live

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


def test_retry_of_a_committed_partition_creates_nothing(
    opts: Options, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    first = _write.write_partition(
        opts, MAPPING, "auto:t1", _write.arrow_chunks(_batches(500), MAPPING)
    )
    assert (first.rows, first.created, first.skipped) == (500, 500, False)
    again = _write.write_partition(
        opts, MAPPING, "auto:t1", _write.arrow_chunks(_batches(500), MAPPING)
    )
    assert again.skipped and again.created == 0
    assert count_live(db, queue_name) == 500


def test_speculative_attempts_race_and_exactly_one_wins(
    opts: Options, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    gate = threading.Event()
    results: list[_write.PartitionResult] = []

    def attempt(g: threading.Event | None) -> None:
        results.append(
            _write.write_partition(
                opts, MAPPING, "auto:t2", _write.arrow_chunks(_batches(400, g), MAPPING)
            )
        )

    slow = threading.Thread(target=attempt, args=(gate,))
    slow.start()
    fast = threading.Thread(target=attempt, args=(None,))
    fast.start()  # waits on the marker row the slow attempt holds
    gate.set()
    slow.join(30)
    fast.join(30)
    assert sorted((r.created, r.skipped) for r in results) == [(0, True), (400, False)]
    assert count_live(db, queue_name) == 400


def test_failure_half_way_leaves_nothing(
    opts: Options, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    def failing() -> Iterator[Any]:
        yield from _batches(300)
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        _write.write_partition(opts, MAPPING, "auto:t3", _write.arrow_chunks(failing(), MAPPING))
    assert count_live(db, queue_name) == 0
    marker = db.execute(
        "SELECT count(*) FROM lonnymq_spark.write_partition WHERE write_id = 'auto:t3'"
    ).fetchone()
    assert marker == (0,)
    # The retry then writes the partition in full.
    retry = _write.write_partition(
        opts, MAPPING, "auto:t3", _write.arrow_chunks(_batches(300), MAPPING)
    )
    assert retry.created == 300 and count_live(db, queue_name) == 300


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
    result = _write.write_partition(opts, MAPPING, "auto:t4", _write.arrow_chunks([batch], MAPPING))
    assert (result.rows, result.created) == (1000, 1000)  # in chunks of at most 150
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
