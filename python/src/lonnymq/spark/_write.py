"""Bulk enqueue: ``df.write.format("lonnymq")`` and ``df.writeStream.format("lonnymq")``.

Exactly once per write, under task retries and speculative attempts. Every write has an id
(``key:<idempotency_key>``, ``auto:<uuid>`` for a write without a key, or
``stream:<query id>:<batch id>`` for a micro-batch of the sink). A task writes its whole
partition in ONE transaction:

1. claim the marker row (queue, write id, partition) in ``lonnymq_spark.write_partition``;
   a concurrent speculative attempt waits on the row and then finds it taken;
2. COPY the rows of each Arrow batch into a temporary staging table;
3. create them with ``lonnymq.message_create_batch`` in chunks of ``chunk_rows``, so channel
   bookkeeping, ``max_size`` and dedup keys hold exactly as for any other producer;
4. commit: the messages and the marker become visible together.

A task that dies half way rolls back everything; a retried task whose partition committed
finds the marker and creates nothing; a write (or micro-batch) whose job row exists in
``write_job`` creates nothing at all, however Spark partitions the replay.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

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

_STAGE = "pg_temp.lonnymq_spark_stage"

_CREATE_CHUNK = f"""
SELECT r.status, pg_catalog.count(*)
FROM lonnymq.message_create_batch(
    %(queue)s,
    CASE WHEN %(channel)s THEN
        (SELECT pg_catalog.array_agg(s.channel ORDER BY s.ord) FROM {_STAGE} s) END,
    (SELECT pg_catalog.array_agg(s.content ORDER BY s.ord) FROM {_STAGE} s),
    CASE WHEN %(dequeue_at)s THEN
        (SELECT pg_catalog.array_agg(s.dequeue_at ORDER BY s.ord) FROM {_STAGE} s) END,
    CASE WHEN %(dedup_key)s THEN
        (SELECT pg_catalog.array_agg(s.dedup_key ORDER BY s.ord) FROM {_STAGE} s) END
) r
GROUP BY r.status
"""


# The partition marker. A concurrent attempt holding it makes this wait for its outcome.
_CLAIM = """
INSERT INTO lonnymq_spark.write_partition (queue, write_id, partition_id, task_attempt)
VALUES (%s, %s, %s, %s)
ON CONFLICT DO NOTHING
RETURNING 1
"""


@dataclass
class PartitionResult(WriterCommitMessage):  # type: ignore[misc, valid-type, unused-ignore]
    """What one task reports to the driver (pickled: a WriterCommitMessage)."""

    write_id: str
    partition_id: int
    rows: int = 0
    created: int = 0
    deduplicated: int = 0
    dropped: int = 0
    skipped: bool = False  # the partition (or the whole write) had committed before


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


def write_partition(
    opts: Options, mapping: ColumnMapping, write_id: str, chunks: Iterator[Chunk]
) -> PartitionResult:
    """Creates the messages of one partition exactly once (see the module docstring)."""
    partition_id, attempt = task()
    result = PartitionResult(write_id, partition_id)
    first = next(chunks, None)
    if first is None:
        return result  # an empty partition never touches the database
    queue = opts.require_queue()
    with _bookkeeping.connect(opts.dsn) as conn, conn.transaction():
        done = conn.execute(
            "SELECT 1 FROM lonnymq_spark.write_job WHERE queue = %s AND write_id = %s",
            (queue, write_id),
        ).fetchone()
        claimed = (
            None
            if done
            else conn.execute(_CLAIM, (queue, write_id, partition_id, attempt)).fetchone()
        )
        if claimed is None:
            log.info(
                "write %s partition %s already committed: creating nothing", write_id, partition_id
            )
            result.skipped = True
            return result
        conn.execute(
            f"CREATE TEMP TABLE {_STAGE.split('.')[1]} (ord bigint, channel text, content bytea,"
            " dequeue_at timestamptz, dedup_key text) ON COMMIT DROP"
        )
        flags = {
            "queue": queue,
            "channel": mapping.channel is not None,
            "dequeue_at": mapping.dequeue_at is not None,
            "dedup_key": mapping.dedup_key is not None,
        }
        staged = 0

        def flush() -> None:
            nonlocal staged
            for status, count in conn.execute(_CREATE_CHUNK, flags).fetchall():
                if status == "created":
                    result.created += count
                elif status == "deduplicated":
                    result.deduplicated += count
                elif status == "dropped":
                    result.dropped += count
                else:
                    raise RuntimeError(f"message_create_batch answered {status!r}")
            conn.execute(f"TRUNCATE {_STAGE}")
            staged = 0

        def stage(
            channels: list[Any], contents: list[Any], ats: list[Any], keys: list[Any]
        ) -> None:
            nonlocal staged
            with conn.cursor().copy(
                f"COPY {_STAGE} (ord, channel, content, dequeue_at, dedup_key)"
                " FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["bigint", "text", "bytea", "timestamptz", "text"])
                for i in range(len(contents)):
                    copy.write_row((result.rows + i, channels[i], contents[i], ats[i], keys[i]))
            result.rows += len(contents)
            staged += len(contents)

        # Never more than chunk_rows per message_create_batch call, whatever the Arrow
        # batch size: the function takes at most 100000 elements.
        size = opts.chunk_rows
        for chunk in itertools.chain([first], chunks):
            for low in range(0, len(chunk[1]), size):
                piece = [column[low : low + size] for column in chunk]
                if staged and staged + len(piece[1]) > size:
                    flush()
                stage(*piece)
                if staged >= size:
                    flush()
        if staged:
            flush()
        conn.execute(
            "UPDATE lonnymq_spark.write_partition SET rows = %s, created = %s, deduplicated = %s,"
            " dropped = %s WHERE queue = %s AND write_id = %s AND partition_id = %s",
            (
                result.rows,
                result.created,
                result.deduplicated,
                result.dropped,
                queue,
                write_id,
                partition_id,
            ),
        )
    return result


def write_id_for(idempotency_key: str | None) -> str:
    return f"key:{idempotency_key}" if idempotency_key else f"auto:{uuid.uuid4()}"


def job_committed(opts: Options, write_id: str) -> bool:
    """Driver side, before any task: installs the bookkeeping and checks for a replay."""
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        _bookkeeping.ensure_installed(conn)
        return (
            conn.execute(
                "SELECT 1 FROM lonnymq_spark.write_job WHERE queue = %s AND write_id = %s",
                (opts.require_queue(), write_id),
            ).fetchone()
            is not None
        )


def commit_job(opts: Options, write_id: str, partitions: int) -> None:
    """Records a finished write, so that a replay of it creates nothing."""
    queue = opts.require_queue()
    with _bookkeeping.connect(opts.dsn) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO lonnymq_spark.write_job"
            " (queue, write_id, partitions, created, deduplicated, dropped)"
            " SELECT %s, %s, %s, coalesce(sum(p.created), 0), coalesce(sum(p.deduplicated), 0),"
            "        coalesce(sum(p.dropped), 0)"
            " FROM lonnymq_spark.write_partition p WHERE p.queue = %s AND p.write_id = %s"
            " ON CONFLICT (queue, write_id) DO NOTHING",
            (queue, write_id, partitions, queue, write_id),
        )
        for table in ("write_partition", "write_job"):
            conn.execute(
                f"DELETE FROM lonnymq_spark.{table} WHERE committed_at < pg_catalog.now()"
                f" - interval '{AUTO_RETENTION}' AND (write_id LIKE 'auto:%%'"
                " OR write_id LIKE 'stream:%%')"
            )


def summarize(write_id: str, messages: Iterable[Any]) -> str:
    results = [m for m in messages if isinstance(m, PartitionResult)]
    total = {
        k: sum(getattr(r, k) for r in results)
        for k in ("rows", "created", "deduplicated", "dropped")
    }
    skipped = sum(r.skipped for r in results)
    return (
        f"lonnymq write {write_id}: {total['rows']} rows, {total['created']} created, "
        f"{total['deduplicated']} deduplicated, {total['dropped']} dropped, "
        f"{skipped} partitions already committed"
    )


def stream_write_id() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
    if not query or batch is None:
        raise RuntimeError("lonnymq sink: no streaming query id / batch id in the task context")
    return f"stream:{query}:{batch}"
