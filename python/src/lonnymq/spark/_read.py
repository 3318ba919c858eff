"""Batch reads: ``spark.read.format("lonnymq").option("table", ...)``.

Reads the extension's stable inspection relations, never its tables:

- ``message``         -> ``lonnymq.messages``        (live messages)
- ``channel``         -> ``lonnymq.channel_stats``   (policy and counters per channel)
- ``message_archive`` -> ``lonnymq.message_archive`` (terminal messages)

The driver fixes the id bounds once (``min(id)``, ``max(id)``) and splits them into
``num_partitions`` ranges; each task reads its range in one REPEATABLE READ, READ ONLY
transaction with a server-side cursor. ``channel_stats`` has no id: its rows are split by a
hash of (queue, channel) instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import _bookkeeping
from ._options import Options

MESSAGE_SCHEMA = (
    "id bigint, queue string, channel string, content binary, state binary, "
    "num_attempts bigint, dequeue_at timestamp, locked_until timestamp, created_at timestamp, "
    "priority int, dedup_key string"
)
CHANNEL_SCHEMA = (
    "queue string, channel string, ready bigint, scheduled bigint, locked bigint, "
    "max_concurrency int, release_interval_ms bigint, max_size bigint, max_attempts int, "
    "retain_completed boolean, oldest_ready_ms bigint"
)
ARCHIVE_SCHEMA = (
    "id bigint, message_id bigint, queue string, channel string, content binary, "
    "state binary, num_attempts bigint, outcome string, error string, created_at timestamp, "
    "archived_at timestamp"
)

SCHEMAS = {"message": MESSAGE_SCHEMA, "channel": CHANNEL_SCHEMA, "message_archive": ARCHIVE_SCHEMA}
RELATIONS = {
    "message": "lonnymq.messages",
    "channel": "lonnymq.channel_stats",
    "message_archive": "lonnymq.message_archive",
}


def columns(table: str) -> list[str]:
    return [c.strip().split(" ")[0] for c in SCHEMAS[table].split(",")]


@dataclass(frozen=True)
class Range:
    """One read task: ids in [low, high], or hash bucket ``bucket`` of ``buckets``."""

    index: int
    low: int | None = None
    high: int | None = None
    bucket: int | None = None
    buckets: int | None = None


def plan(opts: Options) -> list[Range]:
    n = opts.num_partitions
    if opts.table == "channel":
        return [Range(i, bucket=i, buckets=n) for i in range(n)]
    relation = RELATIONS[opts.table]
    where, params = _queue_filter(opts)
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT pg_catalog.min(id), pg_catalog.max(id) FROM {relation} {where}", params
        ).fetchone()
    if row is None or row[0] is None:
        return [Range(0, low=1, high=0)]  # empty: one task that reads nothing
    low, high = int(row[0]), int(row[1])
    step = max(1, -(-(high - low + 1) // n))  # ceiling division
    ranges: list[Range] = []
    start = low
    while start <= high:
        ranges.append(Range(len(ranges), low=start, high=min(high, start + step - 1)))
        start += step
    return ranges


def _queue_filter(opts: Options) -> tuple[str, list[Any]]:
    if opts.queue:
        return "WHERE queue = %s", [opts.queue]
    return "WHERE true", []


def read(opts: Options, part: Range) -> Iterator[tuple[Any, ...]]:
    relation = RELATIONS[opts.table]
    where, params = _queue_filter(opts)
    if part.bucket is not None:
        where += (
            " AND pg_catalog.abs(pg_catalog.hashtext(coalesce(queue, '') || '/'"
            " || coalesce(channel, '')) %% %s) = %s"
        )
        params += [part.buckets, part.bucket]
        order = "queue, channel"
    else:
        where += " AND id BETWEEN %s AND %s"
        params += [part.low, part.high]
        order = "id"
    query = f"SELECT {', '.join(columns(opts.table))} FROM {relation} {where} ORDER BY {order}"
    with _bookkeeping.connect(opts.dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        with conn.cursor(name="lonnymq_spark_read") as cur:
            cur.itersize = 5000
            cur.execute(query, params)
            for row in cur:
                yield tuple(row)
