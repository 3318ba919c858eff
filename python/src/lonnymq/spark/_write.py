"""Bulk enqueue: ``df.write.format("lonnymq")`` and ``df.writeStream.format("lonnymq")``.

Nothing a task writes becomes a message unless Spark commits that task's attempt as part of
a committed job. Every write has an id (``key:<idempotency_key>``, ``auto:<uuid>`` for a
write without a key, or ``stream:<query id>:<batch id>`` for a micro-batch of the sink), and
every job that writes has a *run*: an UNLOGGED staging table ``stage_<run>`` in the role's
bookkeeping schema (``_bookkeeping``) that the driver creates when Spark plans the job (a
sink query: when it starts).

1. A task attempt *stages* its partition, in ONE transaction: it registers itself in
   ``write_attempt`` (run, write id, partition, attempt) and COPYs its rows into the run's
   table under its ``attempt_id``. It reports the attempt id and its row count in its commit
   message. A task that dies half way rolls back: nothing staged. A task whose input ends
   early because something upstream failed stages a partial partition, but Spark fails that
   task and never hands its commit message to the driver.
2. The driver's ``commit()`` *publishes*, in ONE transaction: it claims the write's row in
   ``write_job`` (a committed write has one: a re-run or replay publishes nothing), creates
   the staged rows of exactly the attempts Spark handed it, in partition order, with
   ``lonnymq.message_create_batch`` in chunks of ``chunk_rows`` (so channel bookkeeping,
   ``max_size``, dedup keys and NOTIFY hold as for any producer), checks that every attempt
   published the rows it reported, records them in ``write_partition`` and forgets every
   staged attempt of the write, in any run. A driver dying inside rolls it all back.
3. ``abort()`` drops what the run staged; a run nobody committed or aborted (its driver
   died) is dropped by a later job once idle for ``stage_retention_s``, or at once when a
   re-run of the same write commits.

Why staging tables and not prepared transactions: a prepared transaction needs
``max_prepared_transactions`` (0 by default, and rarely granted on managed servers), keeps
the channel locks of ``message_create_batch`` held until Spark's job commit, and committing
several of them is not atomic. Staging costs one extra server-side pass over the rows;
``bench/spark`` measures it.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from . import _bookkeeping
from ._convert import ColumnMapping, arrow_contents, content_encoder
from ._options import Options

try:
    from pyspark.sql.datasource import WriterCommitMessage
except ImportError:  # pragma: no cover - only the Spark classes need the real base
    WriterCommitMessage = object  # type: ignore[assignment, misc, unused-ignore]

log = logging.getLogger("lonnymq.spark")

# Markers of writes without an idempotency key and of streaming micro-batches only guard
# against task retries and replays, which happen within minutes: keep them a week.
AUTO_RETENTION = "7 days"

# The staging table of a run. The checks repeat message_create_batch's element checks, so a
# bad row fails its task (which Spark reports, or retries) rather than the job's commit.
_STAGE_DDL = """
CREATE UNLOGGED TABLE {table} (
    attempt bigint NOT NULL,
    ord integer NOT NULL,
    channel text CHECK (pg_catalog.length(channel) BETWEEN 1 AND 256),
    content bytea NOT NULL,
    dequeue_at timestamptz
        CHECK (pg_catalog.isfinite(dequeue_at) AND dequeue_at < '100000-01-01 00:00:00+00'),
    dedup_key text CHECK (pg_catalog.length(dedup_key) BETWEEN 1 AND 512),
    PRIMARY KEY (attempt, ord)
)
"""

# One chunk of one staged attempt, created in input order.
_PUBLISH_CHUNK = """
SELECT r.status, pg_catalog.count(*)
FROM (SELECT pg_catalog.array_agg(s.channel ORDER BY s.ord) AS channels,
             pg_catalog.array_agg(s.content ORDER BY s.ord) AS contents,
             pg_catalog.array_agg(s.dequeue_at ORDER BY s.ord) AS dequeue_ats,
             pg_catalog.array_agg(s.dedup_key ORDER BY s.ord) AS dedup_keys
      FROM {table} s
      WHERE s.attempt = %(attempt)s AND s.ord >= %(low)s AND s.ord < %(high)s) a,
     LATERAL lonnymq.message_create_batch(
         %(queue)s,
         CASE WHEN %(channel)s THEN a.channels END,
         coalesce(a.contents, '{{}}'),
         CASE WHEN %(dequeue_at)s THEN a.dequeue_ats END,
         CASE WHEN %(dedup_key)s THEN a.dedup_keys END) r
GROUP BY r.status
"""


class StagingLost(RuntimeError):
    """The staged rows of an attempt Spark committed are gone: the job must not commit."""


@dataclass(frozen=True)
class Run:
    """A job's staging: its id and table. Pickled into every task with the writer."""

    run_id: str
    kind: str = "batch"  # or "stream": one run per start of a sink query

    @property
    def table(self) -> str:
        return f"stage_{self.run_id}"


@dataclass
class PartitionResult(WriterCommitMessage):  # type: ignore[misc, valid-type, unused-ignore]
    """What one task attempt reports to the driver (pickled: a WriterCommitMessage)."""

    write_id: str
    partition_id: int
    task_attempt: int = 0
    run_id: str | None = None  # the run whose table holds its rows
    attempt_id: int | None = None  # its rows in the run's table; None: nothing staged
    rows: int = 0
    skipped: bool = False  # the whole write had committed before


@dataclass
class Published:
    """What a driver's commit did."""

    write_id: str
    already: bool = False  # the write had committed before: nothing published
    partitions: int = 0
    rows: int = 0
    created: int = 0
    deduplicated: int = 0
    dropped: int = 0

    def summary(self) -> str:
        if self.already:
            return f"lonnymq write {self.write_id}: already committed, nothing published"
        return (
            f"lonnymq write {self.write_id}: {self.partitions} partitions, {self.rows} rows, "
            f"{self.created} created, {self.deduplicated} deduplicated, {self.dropped} dropped"
        )


# A chunk: parallel lists of channel, content, dequeue_at and dedup key values.
Chunk = tuple[list[Any], list[Any], list[Any], list[Any]]


def arrow_chunks(batches: Iterable[Any], mapping: ColumnMapping) -> Iterator[Chunk]:
    """Columns of each Arrow RecordBatch, converted in bulk."""
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        none: list[Any] = [None] * n

        def column(name: str | None, b: Any = batch, empty: list[Any] = none) -> list[Any]:
            return empty if name is None else list(b.column(name).to_pylist())

        contents = arrow_contents(batch.column(mapping.content), mapping.content_kind)
        yield (
            column(mapping.channel),
            contents,
            _aware(column(mapping.dequeue_at)),
            column(mapping.dedup_key),
        )


def _aware(values: list[Any]) -> list[Any]:
    """TimestampNTZ columns arrive as naive datetimes: they are taken as UTC."""
    return [
        v.replace(tzinfo=datetime.UTC) if v is not None and v.tzinfo is None else v for v in values
    ]


def row_chunks(rows: Iterable[Any], mapping: ColumnMapping, size: int = 10_000) -> Iterator[Chunk]:
    """The same from Spark Rows (the writer API of PySpark versions without Arrow writers)."""
    encode = content_encoder(mapping.content_kind)
    chunk: Chunk = ([], [], [], [])
    for row in rows:
        chunk[0].append(None if mapping.channel is None else row[mapping.channel])
        chunk[1].append(encode(row[mapping.content]))
        chunk[2].extend(_aware([None if mapping.dequeue_at is None else row[mapping.dequeue_at]]))
        chunk[3].append(None if mapping.dedup_key is None else row[mapping.dedup_key])
        if len(chunk[1]) >= size:
            yield chunk
            chunk = ([], [], [], [])
    if chunk[1]:
        yield chunk


def task() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # called outside Spark (unit use): one partition, first attempt
        return 0, 0
    return ctx.partitionId(), ctx.attemptNumber()


def _committed(conn: psycopg.Connection[Any], queue: str, write_id: str) -> bool:
    b = _bookkeeping.schema(conn)
    return (
        conn.execute(
            f"SELECT 1 FROM {b}.write_job WHERE queue = %s AND write_id = %s",
            (queue, write_id),
        ).fetchone()
        is not None
    )


# --- driver: runs ----------------------------------------------------------------------------


def open_run(opts: Options, kind: str) -> Run:
    """Driver side, when Spark plans a job: installs the bookkeeping, drops abandoned runs,
    and creates a batch run's staging table. A sink's table is created by its first task:
    Spark may build a query's stream writer more than once, and only one is used."""
    run = Run(uuid.uuid4().hex, kind)
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        _bookkeeping.ensure_installed(conn)
        drop_idle_runs(conn, opts.stage_retention_s)
        if kind == "batch":
            _create_run(conn, run, opts.require_queue())
    return run


def _create_run(conn: psycopg.Connection[Any], run: Run, queue: str) -> None:
    b = _bookkeeping.schema(conn)
    with conn.transaction():
        # Concurrent first tasks of a sink run: one creates, the others find it.
        conn.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s))", (run.run_id,)
        )
        conn.execute(
            sql.SQL(_STAGE_DDL.replace("TABLE", "TABLE IF NOT EXISTS", 1)).format(
                table=sql.Identifier(b, run.table)
            )
        )
        # No other role may stage rows the commit would publish.
        _bookkeeping.make_private(conn, b, run.table)
        conn.execute(
            f"INSERT INTO {b}.write_run (run_id, queue, kind) VALUES (%s, %s, %s)"
            " ON CONFLICT (run_id) DO UPDATE SET used_at = pg_catalog.now()",
            (run.run_id, queue, run.kind),
        )


def drop_idle_runs(conn: psycopg.Connection[Any], retention_s: int) -> int:
    """Drops the runs nobody used for ``retention_s``: their driver died before commit() or
    abort(). A run is used when it is created, when a task stages into it and when a sink
    batch commits. Returns how many runs it dropped."""
    b = _bookkeeping.schema(conn)
    idle = conn.execute(
        f"SELECT r.run_id FROM {b}.write_run r"
        " WHERE r.used_at < pg_catalog.now() - pg_catalog.make_interval(secs => %s)"
        f" AND NOT EXISTS (SELECT 1 FROM {b}.write_attempt a WHERE a.run_id = r.run_id"
        "   AND a.staged_at >= pg_catalog.now() - pg_catalog.make_interval(secs => %s))",
        (retention_s, retention_s),
    ).fetchall()
    dropped = 0
    for (run_id,) in idle:
        if drop_run(conn, Run(run_id)):
            dropped += 1
    return dropped


def drop_run(conn: psycopg.Connection[Any], run: Run) -> bool:
    """Drops a run's table and bookkeeping. A straggling task still writing into the table
    (a speculative attempt Spark did not stop yet) holds a lock on it: then the run is left
    for a later clean-up rather than waited for. Needs an autocommit connection."""
    b = _bookkeeping.schema(conn)
    try:
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '2s'")
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(b, run.table)))
            conn.execute(f"DELETE FROM {b}.write_attempt WHERE run_id = %s", (run.run_id,))
            conn.execute(f"DELETE FROM {b}.write_run WHERE run_id = %s", (run.run_id,))
    except psycopg.errors.LockNotAvailable:
        log.warning("lonnymq: staging run %s is in use: left for a later clean-up", run.run_id)
        return False
    return True


def close_run(opts: Options, run: Run) -> None:
    """Driver side, after a batch job's commit or abort: its staged rows are no longer needed."""
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        drop_run(conn, run)


# --- tasks: staging --------------------------------------------------------------------------


def stage_partition(
    opts: Options, run: Run, write_id: str, chunks: Iterator[Chunk]
) -> PartitionResult:
    """Stages the rows of one task attempt (see the module docstring). Never a message yet."""
    partition_id, attempt = task()
    result = PartitionResult(write_id, partition_id, attempt, run.run_id)
    first = next(chunks, None)
    if first is None:
        return result  # an empty partition never touches the database
    queue = opts.require_queue()
    rows = itertools.chain([first], chunks)
    with _bookkeeping.connect(opts.dsn) as conn:
        try:
            _stage(conn, run, queue, result, rows)
        except psycopg.errors.UndefinedTable:
            # The run was dropped under us: by a re-run of this write that committed first
            # (then there is nothing left to do), or by the clean-up of idle runs.
            conn.rollback()
            committed = _committed(conn, queue, write_id)
            conn.rollback()
            if committed:
                result.skipped = True
                return result
            if run.kind != "stream" or result.rows:
                raise StagingLost(
                    f"lonnymq write {write_id}: staging table of run {run.run_id} is gone "
                    "(the job was aborted, or idle for longer than stage_retention_s)"
                ) from None
            # The first task of a sink run, or a sink idle for longer than
            # stage_retention_s: the run's table is (re)created.
            _create_run(conn, run, queue)
            _stage(conn, run, queue, result, rows)
    return result


def _stage(
    conn: psycopg.Connection[Any],
    run: Run,
    queue: str,
    result: PartitionResult,
    rows: Iterator[Chunk],
) -> None:
    b = _bookkeeping.schema(conn)
    with conn.transaction():
        if _committed(conn, queue, result.write_id):
            result.skipped = True
            return
        attempt_id = _register(
            conn, run, queue, result.write_id, result.partition_id, result.task_attempt
        )
        with conn.cursor().copy(
            sql.SQL(
                "COPY {} (attempt, ord, channel, content, dequeue_at, dedup_key)"
                " FROM STDIN (FORMAT BINARY)"
            ).format(sql.Identifier(b, run.table))
        ) as copy:
            copy.set_types(["bigint", "integer", "text", "bytea", "timestamptz", "text"])
            for channels, contents, ats, keys in rows:
                base = result.rows
                for i in range(len(contents)):
                    copy.write_row(
                        (attempt_id, base + i, channels[i], contents[i], ats[i], keys[i])
                    )
                result.rows += len(contents)
        conn.execute(
            f"UPDATE {b}.write_attempt SET rows = %s, staged_at = pg_catalog.now()"
            " WHERE attempt_id = %s",
            (result.rows, attempt_id),
        )
    result.attempt_id = attempt_id


def _register(
    conn: psycopg.Connection[Any],
    run: Run,
    queue: str,
    write_id: str,
    partition_id: int,
    attempt: int,
) -> int:
    row = conn.execute(
        f"INSERT INTO {_bookkeeping.schema(conn)}.write_attempt"
        " (run_id, queue, write_id, partition_id, task_attempt)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING attempt_id",
        (run.run_id, queue, write_id, partition_id, attempt),
    ).fetchone()
    assert row is not None
    return int(row[0])


# --- driver: publishing ----------------------------------------------------------------------


def chosen_attempts(write_id: str, messages: Iterable[Any]) -> list[PartitionResult]:
    """The attempts to publish, one per partition, in partition order. Spark hands one commit
    message per partition; should it ever hand two (both attempts of a speculative pair
    succeeded), each is a complete copy of the partition, so exactly one is published."""
    chosen: dict[int, PartitionResult] = {}
    for m in messages:
        if not isinstance(m, PartitionResult):
            continue  # a task that failed before returning reports None
        if m.write_id != write_id:
            raise RuntimeError(f"lonnymq: commit message of write {m.write_id}, not {write_id}")
        if m.partition_id in chosen:
            log.warning(
                "lonnymq write %s: two commit messages for partition %s: publishing one",
                write_id,
                m.partition_id,
            )
            continue
        chosen[m.partition_id] = m
    return [chosen[p] for p in sorted(chosen)]


def publish(
    opts: Options, mapping: ColumnMapping, run: Run, write_id: str, messages: Iterable[Any]
) -> Published:
    """Driver side, Spark's job (or batch) commit: see the module docstring, step 2."""
    queue = opts.require_queue()
    attempts = chosen_attempts(write_id, messages)
    done = Published(write_id, partitions=len(attempts))
    flags = {
        "queue": queue,
        "channel": mapping.channel is not None,
        "dequeue_at": mapping.dequeue_at is not None,
        "dedup_key": mapping.dedup_key is not None,
    }
    with _bookkeeping.connect(opts.dsn) as conn, conn.transaction():
        b = _bookkeeping.schema(conn)
        # The write's row first: a concurrent commit of the same write waits here for ours.
        claimed = conn.execute(
            f"INSERT INTO {b}.write_job"
            " (queue, write_id, partitions, created, deduplicated, dropped)"
            " VALUES (%s, %s, %s, 0, 0, 0) ON CONFLICT (queue, write_id) DO NOTHING RETURNING 1",
            (queue, write_id, len(attempts)),
        ).fetchone()
        if claimed is None:
            done.already = True
        else:
            for a in attempts:
                if a.attempt_id is not None and a.run_id is not None:
                    _publish_attempt(conn, Run(a.run_id), write_id, a, flags, opts.chunk_rows, done)
            conn.execute(
                f"UPDATE {b}.write_job SET created = %s, deduplicated = %s, dropped = %s"
                " WHERE queue = %s AND write_id = %s",
                (done.created, done.deduplicated, done.dropped, queue, write_id),
            )
        _forget_attempts(conn, run, queue, write_id)
        conn.execute(
            f"UPDATE {b}.write_run SET used_at = pg_catalog.now() WHERE run_id = ANY(%s)",
            (sorted({run.run_id} | {a.run_id for a in attempts if a.run_id}),),
        )
        _prune_markers(conn)
    return done


def _publish_attempt(
    conn: psycopg.Connection[Any],
    run: Run,
    write_id: str,
    a: PartitionResult,
    flags: dict[str, Any],
    chunk_rows: int,
    done: Published,
) -> None:
    b = _bookkeeping.schema(conn)
    row = conn.execute(
        f"SELECT rows FROM {b}.write_attempt"
        " WHERE attempt_id = %s AND run_id = %s AND write_id = %s AND partition_id = %s",
        (a.attempt_id, run.run_id, write_id, a.partition_id),
    ).fetchone()
    if row is None or int(row[0]) != a.rows:
        raise StagingLost(
            f"lonnymq write {write_id}: the staging of partition {a.partition_id} (attempt "
            f"{a.task_attempt}) is gone: aborted, or dropped as idle; run the write again"
        )
    query = sql.SQL(_PUBLISH_CHUNK).format(table=sql.Identifier(b, run.table))
    counts = {"created": 0, "deduplicated": 0, "dropped": 0}
    for low in range(0, a.rows, chunk_rows):
        for status, n in conn.execute(
            query, {**flags, "attempt": a.attempt_id, "low": low, "high": low + chunk_rows}
        ).fetchall():
            if status not in counts:
                raise RuntimeError(f"message_create_batch answered {status!r}")
            counts[status] += n
    # An UNLOGGED table is emptied by a server crash: never publish part of an attempt.
    if sum(counts.values()) != a.rows:
        raise StagingLost(
            f"lonnymq write {write_id}: partition {a.partition_id} staged {a.rows} rows but "
            f"{sum(counts.values())} are left (server crash?): run the write again"
        )
    conn.execute(
        f"INSERT INTO {b}.write_partition (queue, write_id, partition_id, task_attempt,"
        " rows, created, deduplicated, dropped) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            flags["queue"],
            write_id,
            a.partition_id,
            a.task_attempt,
            a.rows,
            counts["created"],
            counts["deduplicated"],
            counts["dropped"],
        ),
    )
    done.rows += a.rows
    done.created += counts["created"]
    done.deduplicated += counts["deduplicated"]
    done.dropped += counts["dropped"]


def _forget_attempts(conn: psycopg.Connection[Any], run: Run, queue: str, write_id: str) -> None:
    """Deletes every staged attempt of a committed write, in this run and in runs of earlier
    failed or killed drivers of the same write; their rows can never be published now. (A
    batch run's own table is dropped whole right after.)"""
    b = _bookkeeping.schema(conn)
    gone = conn.execute(
        f"DELETE FROM {b}.write_attempt WHERE queue = %s AND write_id = %s"
        " RETURNING run_id, attempt_id",
        (queue, write_id),
    ).fetchall()
    by_run: dict[str, list[int]] = {}
    for run_id, attempt_id in gone:
        by_run.setdefault(run_id, []).append(int(attempt_id))
    for run_id, ids in by_run.items():
        if run_id == run.run_id and run.kind == "batch":
            continue
        table = Run(run_id).table
        exists = conn.execute("SELECT pg_catalog.to_regclass(%s)", (f"{b}.{table}",)).fetchone()
        if exists is None or exists[0] is None:
            continue
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE attempt = ANY(%s)").format(sql.Identifier(b, table)),
            (ids,),
        )


def _prune_markers(conn: psycopg.Connection[Any]) -> None:
    b = _bookkeeping.schema(conn)
    for table in ("write_partition", "write_job"):
        conn.execute(
            f"DELETE FROM {b}.{table} WHERE committed_at < pg_catalog.now()"
            f" - interval '{AUTO_RETENTION}' AND (write_id LIKE 'auto:%%'"
            " OR write_id LIKE 'stream:%%')"
        )


def discard(opts: Options, messages: Iterable[Any]) -> None:
    """Driver side, a sink batch's abort: drops what its attempts staged."""
    by_run: dict[str, list[int]] = {}
    for m in messages:
        if isinstance(m, PartitionResult) and m.attempt_id and m.run_id:
            by_run.setdefault(m.run_id, []).append(m.attempt_id)
    if not by_run:
        return
    with _bookkeeping.connect(opts.dsn) as conn, conn.transaction():
        b = _bookkeeping.schema(conn)
        for run_id, ids in by_run.items():
            conn.execute(f"DELETE FROM {b}.write_attempt WHERE attempt_id = ANY(%s)", (ids,))
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE attempt = ANY(%s)").format(
                    sql.Identifier(b, Run(run_id).table)
                ),
                (ids,),
            )


def write_id_for(idempotency_key: str | None) -> str:
    return f"key:{idempotency_key}" if idempotency_key else f"auto:{uuid.uuid4()}"


def job_committed(opts: Options, write_id: str) -> bool:
    """Driver side, before any task: installs the bookkeeping and checks for a replay."""
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        _bookkeeping.ensure_installed(conn)
        return _committed(conn, opts.require_queue(), write_id)


def stream_write_id() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
    if not query or batch is None:
        raise RuntimeError("lonnymq sink: no streaming query id / batch id in the task context")
    return f"stream:{query}:{batch}"
