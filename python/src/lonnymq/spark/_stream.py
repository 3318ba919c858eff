"""Streaming source: ``spark.readStream.format("lonnymq").option("queue", ...)``.

At-least-once, and no message is completed before its micro-batch committed:

- offsets are ``{"stream": <id>, "batch": <n>}``: a counter of micro-batches per stream. The
  stream id is drawn when the first batch is planned and travels in every checkpointed
  offset, so a query restarted from its checkpoint finds its own bookkeeping again;
- ``latestOffset`` (driver) dequeues up to ``max_messages_per_batch`` messages and copies the
  deliveries into the role's ``stream_delivery`` in the same transaction: either both
  happen or neither (a driver dying there leaves no lock behind);
- ``read`` (executors) reads a batch's deliveries from that copy, so a replayed batch returns
  exactly the same rows;
- ``commit`` (driver, after Spark recorded the batch as done) completes the deliveries with
  their ``num_attempts`` fencing tokens and deletes the copy, in one transaction. Spark calls
  it only when it builds the *next* batch; since it asks ``latestOffset(start)`` only after
  the batch ending at ``start`` is in its commit log, that call completes them too, so an
  idle queue does not keep the last batch locked;
- ``trigger(availableNow=True)``: ``prepare_available_now`` (driver, when the query starts)
  records the newest message id and the database time; the query then plans micro-batches
  of at most the read limit, and never more than the number of messages that were ready
  then (id and dequeue time not later, unlocked) and still are, and stops when none is left
  (or a dequeue finds nothing). Messages created, scheduled or retried later wait for the
  next run (with several channels, fairness may serve a newer message of one channel
  before an older one of another: the count, not the set, is what is bounded);
- a heartbeat thread extends the locks of every uncommitted delivery every ``heartbeat_ms``
  (a third of ``lock_ms``), so a slow batch keeps its messages. After a crash the restarted
  query heartbeats them again at once; a message whose lock expired meanwhile is redelivered
  by a later dequeue (possibly into this stream again): at-least-once.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from . import _bookkeeping
from ._options import Options

log = logging.getLogger("lonnymq.spark")

# message_dequeue hands out at most this many per call.
_DEQUEUE_MAX = 10_000

# Deliveries of a stream nobody restarted: their locks expired long ago, the messages were
# redelivered; the copies are garbage after this long.
_ABANDONED = "7 days"

_PLAN = """
INSERT INTO {b}.stream_delivery
    (stream_id, batch, ord, id, channel, content, state, num_attempts, dequeue_at, recovered)
SELECT %(stream)s, %(batch)s, %(ord)s + (pg_catalog.row_number() OVER ())::integer - 1,
       d.id, d.channel, d.content, d.state, d.num_attempts, d.dequeue_at, d.recovered
FROM lonnymq.message_dequeue(%(queue)s, %(lock_ms)s, %(n)s) d
"""

_FILL = """
UPDATE {b}.stream_delivery d
SET locked_until = m.locked_until, created_at = m.created_at, priority = m.priority,
    dedup_key = m.dedup_key
FROM lonnymq.messages m
WHERE d.stream_id = %s AND d.batch = %s AND m.id = d.id
"""

_READ = """
SELECT d.id, %s::text, d.channel, d.content, d.state, d.num_attempts, d.dequeue_at,
       d.locked_until, d.created_at, d.priority, d.dedup_key
FROM {b}.stream_delivery d
WHERE d.stream_id = %s AND d.batch = %s AND d.ord BETWEEN %s AND %s
ORDER BY d.ord
"""

_COMPLETE = """
WITH d AS (
    DELETE FROM {b}.stream_delivery d
    WHERE d.stream_id = %(stream)s AND d.batch = %(batch)s
    RETURNING d.id, d.num_attempts
)
SELECT c.status, pg_catalog.count(*)
FROM lonnymq.message_complete_batch(
    coalesce((SELECT pg_catalog.array_agg(d.id ORDER BY d.id, d.num_attempts) FROM d), '{{}}'),
    coalesce((SELECT pg_catalog.array_agg(d.num_attempts ORDER BY d.id, d.num_attempts) FROM d),
             '{{}}')
) c
GROUP BY c.status
"""

_HEARTBEAT = """
SELECT h.status, pg_catalog.count(*)
FROM (SELECT lonnymq.message_heartbeat(d.id, d.num_attempts, %s) AS status
      FROM (SELECT DISTINCT d.id, d.num_attempts FROM {b}.stream_delivery d
            WHERE d.stream_id = %s ORDER BY d.id, d.num_attempts) d) h
GROUP BY h.status
"""


def _in(conn: psycopg.Connection[Any], template: str) -> str:
    """A statement above, on the tables of the connection's bookkeeping schema."""
    return template.format(b=_bookkeeping.schema(conn))


@dataclass(frozen=True)
class BatchSlice:
    """One read task of a micro-batch: deliveries ord_low..ord_high of one planned batch."""

    stream_id: str
    batch: int
    ord_low: int
    ord_high: int


def _offset(stream: str, batch: int) -> dict[str, Any]:
    return {"stream": stream, "batch": batch}


class StreamCore:
    """The driver-side state of one streaming query (one instance per query run)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.queue = opts.require_queue()
        self._conn: psycopg.Connection[Any] | None = None
        self._stream: str | None = None
        self._last: dict[str, Any] | None = None
        self._lock = threading.Lock()  # one statement at a time on the driver connection
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._idle_until = 0.0
        # availableNow: (newest id, database time) when the query started; None otherwise.
        self._target: tuple[int, Any] | None = None

    # -- driver connection and heartbeats ---------------------------------------------------

    def _db(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = _bookkeeping.connect(self.opts.dsn, autocommit=True)
            _bookkeeping.ensure_installed(self._conn)
        return self._conn

    def _attach(self, offset: dict[str, Any] | None) -> tuple[str, int]:
        """The stream of an offset. The initial offset has none yet: the first planned batch
        names it (so every run of a query that never planned a batch starts the same way)."""
        if offset is None:  # PySpark < 4.2 calls latestOffset() without a start
            offset = self._last or self.initial_offset()
        stream = offset.get("stream") or self._stream or uuid.uuid4().hex
        batch = int(offset.get("batch", 0))
        if self._stream is None:
            self._stream = stream
            self._heartbeat = threading.Thread(
                target=self._heartbeat_loop, name="lonnymq-spark-heartbeat", daemon=True
            )
            self._heartbeat.start()
        elif stream != self._stream:
            raise RuntimeError(
                f"lonnymq stream: offset of stream {stream}, expected {self._stream}"
            )
        return stream, batch

    def _heartbeat_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        interval = self.opts.heartbeat_ms / 1000
        # The first round runs at once: after a restart the previous run's locks are ticking.
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = _bookkeeping.connect(self.opts.dsn, autocommit=True)
                with self._lock:
                    rows = conn.execute(
                        _in(conn, _HEARTBEAT), (self.opts.lock_ms, self._stream)
                    ).fetchall()
                lost = sum(n for status, n in rows if status != "extended")
                if lost:
                    log.warning(
                        "lonnymq stream %s: %s deliveries no longer held (lock expired "
                        "and redelivered, or settled elsewhere)",
                        self._stream,
                        lost,
                    )
            except Exception:  # keep beating: a transient error must not stop the thread
                log.exception("lonnymq stream %s: heartbeat failed", self._stream)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(interval)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        """Stops heartbeats. Uncommitted deliveries stay locked until their locks expire."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        if self._conn is not None:
            self._conn.close()

    # -- offsets ------------------------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        return {"batch": 0}

    def prepare_available_now(self) -> None:
        """Records what is ready now: the query drains it, and only it (module docstring)."""
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT coalesce(pg_catalog.max(m.id), 0), pg_catalog.clock_timestamp()"
                    " FROM lonnymq.messages m WHERE m.queue = %s",
                    (self.queue,),
                )
                .fetchone()
            )
        assert row is not None
        self._target = (int(row[0]), row[1])

    def _target_left(self, conn: psycopg.Connection[Any], limit: int) -> int | None:
        """availableNow: how many messages that were ready when the query started are still
        ready, counted up to ``limit`` (None: no availableNow)."""
        if self._target is None:
            return None
        row = conn.execute(
            "SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq.messages m WHERE m.queue = %s"
            " AND m.id <= %s AND m.locked_until IS NULL AND m.dequeue_at <= %s LIMIT %s) x",
            (self.queue, *self._target, limit),
        ).fetchone()
        return int(row[0]) if row else 0

    def latest_offset(self, start: dict[str, Any] | None, max_rows: int | None) -> dict[str, Any]:
        stream, batch = self._attach(start)
        n = (
            self.opts.max_messages_per_batch
            if max_rows is None
            else max(1, min(max_rows, self.opts.max_messages_per_batch))
        )
        with self._lock:
            conn = self._db()
            # Spark plans one micro-batch at a time and asks for data after ``start`` only once
            # the batch ending at ``start`` is in its commit log; it calls commit() for it only
            # when it constructs the next batch, which may take long on an idle queue. Complete
            # those deliveries now rather than keep them locked until new work arrives.
            self._complete(conn, stream, batch)
            # A batch planned before but never recorded by Spark (the driver died between our
            # commit and Spark's offset log): hand out the very same deliveries again.
            row = conn.execute(
                f"SELECT pg_catalog.max(batch) FROM {_bookkeeping.schema(conn)}.stream_batch"
                " WHERE stream_id = %s AND batch > %s",
                (stream, batch),
            ).fetchone()
            if row is not None and row[0] is not None:
                self._last = _offset(stream, int(row[0]))
                return self._last
            if time.monotonic() < self._idle_until:
                return start or _offset(stream, batch)
            left = self._target_left(conn, n)
            if left is not None:
                # Never more than what is left of the start's ready messages: fairness
                # across channels may serve a newer message before an older one, but
                # the run as a whole takes no more than was ready when it started.
                if left == 0:
                    return start or _offset(stream, batch)
                n = min(n, left)
            planned = self._plan(conn, stream, batch + 1, n)
        if planned == 0:
            # Nothing new: answer the start itself, so Spark sees no new data.
            self._idle_until = time.monotonic() + self.opts.poll_ms / 1000
            return start or _offset(stream, batch)
        self._last = _offset(stream, batch + 1)
        return self._last

    def _plan(self, conn: psycopg.Connection[Any], stream: str, batch: int, n: int) -> int:
        total = 0
        with conn.transaction():
            while total < n:
                want = min(n - total, _DEQUEUE_MAX)
                cur = conn.execute(
                    _in(conn, _PLAN),
                    {
                        "stream": stream,
                        "batch": batch,
                        "ord": total,
                        "queue": self.queue,
                        "lock_ms": self.opts.lock_ms,
                        "n": want,
                    },
                )
                total += cur.rowcount
                if cur.rowcount < want:
                    break
            if total:
                conn.execute(_in(conn, _FILL), (stream, batch))
                conn.execute(
                    f"INSERT INTO {_bookkeeping.schema(conn)}.stream_batch"
                    " (stream_id, batch, queue, messages) VALUES (%s, %s, %s, %s)",
                    (stream, batch, self.queue, total),
                )
        return total

    # -- planning and reading -------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[BatchSlice]:
        stream, last = self._attach(end)
        if start.get("stream", stream) != stream:
            # Only when PySpark < 4.2 (latestOffset without a start) restarts a query: the
            # new batch belongs to another stream. Stop rather than complete unread messages.
            raise RuntimeError(
                f"lonnymq stream: batch spans streams {start.get('stream')} and {stream}; "
                "restarting a query from its checkpoint needs PySpark >= 4.2"
            )
        first = int(start.get("batch", 0))
        if last <= first:
            return []
        with self._lock:
            conn = self._db()
            rows = conn.execute(
                f"SELECT batch, messages FROM {_bookkeeping.schema(conn)}.stream_batch"
                " WHERE stream_id = %s AND batch > %s AND batch <= %s ORDER BY batch",
                (stream, first, last),
            ).fetchall()
        found = {int(b): int(m) for b, m in rows}
        missing = [b for b in range(first + 1, last + 1) if b not in found]
        if missing:
            raise RuntimeError(
                f"lonnymq stream {stream}: micro-batches {missing} are not in"
                f" {_bookkeeping.schema(conn)}.stream_batch (already committed, or the"
                " bookkeeping was removed)"
            )
        slices = []
        for b in range(first + 1, last + 1):
            count = found[b]
            step = max(1, -(-count // self.opts.num_partitions))
            for low in range(0, count, step):
                slices.append(BatchSlice(stream, b, low, min(count, low + step) - 1))
        return slices

    def commit(self, end: dict[str, Any]) -> None:
        stream, last = self._attach(end)
        with self._lock:
            self._complete(self._db(), stream, last)

    def _complete(self, conn: psycopg.Connection[Any], stream: str, last: int) -> None:
        """Completes the deliveries of every planned batch up to ``last`` and forgets them."""
        stale = 0
        b = _bookkeeping.schema(conn)
        with conn.transaction():
            batches = [
                int(r[0])
                for r in conn.execute(
                    f"SELECT batch FROM {b}.stream_batch"
                    " WHERE stream_id = %s AND batch <= %s ORDER BY batch FOR UPDATE",
                    (stream, last),
                ).fetchall()
            ]
            if not batches:
                return
            for batch in batches:
                for status, count in conn.execute(
                    _in(conn, _COMPLETE), {"stream": stream, "batch": batch}
                ).fetchall():
                    if status != "completed":
                        stale += count
                conn.execute(
                    f"DELETE FROM {b}.stream_batch WHERE stream_id = %s AND batch = %s",
                    (stream, batch),
                )
            conn.execute(
                f"DELETE FROM {b}.stream_delivery d USING {b}.stream_batch sb"
                " WHERE sb.stream_id = d.stream_id AND sb.batch = d.batch"
                f" AND sb.planned_at < pg_catalog.now() - interval '{_ABANDONED}'"
            )
            conn.execute(
                f"DELETE FROM {b}.stream_batch b"
                f" WHERE b.planned_at < pg_catalog.now() - interval '{_ABANDONED}'"
            )
        if stale:
            log.warning(
                "lonnymq stream %s: %s deliveries were no longer held at commit "
                "(redelivered after lock expiry): at-least-once",
                stream,
                stale,
            )


def read_slice(opts: Options, part: BatchSlice) -> Iterator[tuple[Any, ...]]:
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        for row in conn.execute(
            _in(conn, _READ),
            (opts.require_queue(), part.stream_id, part.batch, part.ord_low, part.ord_high),
        ):
            yield tuple(row)
