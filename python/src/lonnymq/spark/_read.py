"""Batch reads: ``spark.read.format("lonnymq").option("table", ...)``.

Reads the extension's stable inspection relations, never its tables:

- ``message``         -> ``lonnymq.messages``        (live messages)
- ``channel``         -> ``lonnymq.channel_stats``   (policy and counters per channel)
- ``message_archive`` -> ``lonnymq.message_archive`` (terminal messages)

``num_partitions = 1``: the one task reads the relation in one REPEATABLE READ, READ ONLY
transaction, which is a consistent snapshot by itself.

``num_partitions > 1``: tasks cannot share one PostgreSQL snapshot (an exported snapshot
lives only as long as the transaction that exported it, and nothing on the driver side
lives as long as the job). So planning copies the selected rows, in one statement, into an
UNLOGGED table ``read_<id>`` of the role's bookkeeping schema, numbered 1..n in id order,
and each task reads its range of row numbers from it. Every task, retried or speculative
attempt, and every later action on the same DataFrame (Spark plans a ``load()`` once and
reuses that plan) reads the same rows. A snapshot is dropped when a later read is planned
after it went unread for its ``snapshot_retention_s``; reading it after that fails with
``SnapshotError``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors, sql

from . import _bookkeeping
from ._options import OptionError, Options

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
# A total order of each relation: row numbers, and the order rows come out of a task.
ORDER = {"message": ("id",), "channel": ("queue", "channel"), "message_archive": ("id",)}


class SnapshotError(RuntimeError):
    """The snapshot of a batch read is gone or damaged: ``load()`` the DataFrame again."""


def columns(table: str) -> list[str]:
    return [c.strip().split(" ")[0] for c in SCHEMAS[table].split(",")]


@dataclass(frozen=True)
class Snapshot:
    """The copy a multi-partition read was planned on; pickled into every task."""

    read_id: str
    table: str  # in the role's bookkeeping schema
    planned_at: str
    retention_s: int


@dataclass(frozen=True)
class Part:
    """One read task: rows ``low..high`` of ``snapshot``; without a snapshot, the whole
    live relation (``num_partitions = 1``), or nothing (``empty``: the snapshot had no rows).
    """

    index: int
    snapshot: Snapshot | None = None
    low: int = 1
    high: int = 0
    empty: bool = False


def plan(opts: Options) -> list[Part]:
    """Runs once per ``load()``, when Spark first plans the read (in a planner worker)."""
    if opts.num_partitions == 1:
        return [Part(0)]
    try:
        with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
            _bookkeeping.ensure_installed(conn)
            drop_expired_snapshots(conn)
            return _take_snapshot(conn, opts)
    except errors.ReadOnlySqlTransaction as e:
        raise OptionError(
            "num_partitions > 1 copies a snapshot on the server, which a read-only server"
            " (a hot standby) cannot do: read with num_partitions=1 there"
        ) from e


def _take_snapshot(conn: psycopg.Connection[Any], opts: Options) -> list[Part]:
    read_id = uuid.uuid4().hex
    table = f"read_{read_id}"
    b = _bookkeeping.schema(conn)
    target = sql.Identifier(b, table)
    order = sql.SQL(", ").join(sql.Identifier(c) for c in ORDER[opts.table])
    snapshot: Snapshot | None = None
    with conn.transaction():
        # One statement, so one snapshot of the source. The outer ORDER BY stores the rows in
        # row-number order: a task's range is then a run of adjacent pages.
        rows = conn.execute(
            sql.SQL(
                "CREATE UNLOGGED TABLE {target} AS SELECT pg_catalog.row_number() OVER"
                " (ORDER BY {order}) AS _row, {columns} FROM {source} {where} ORDER BY {order}"
            ).format(
                target=target,
                order=order,
                columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns(opts.table)),
                source=sql.Identifier(*RELATIONS[opts.table].split(".")),
                # A literal, not a parameter: utility statements (CREATE TABLE AS) take none.
                where=_queue_filter(opts),
            )
        ).rowcount
        if rows <= 0:
            # Nothing to read, nothing to keep: one task that returns no row.
            raise psycopg.Rollback()
        # No other role may change the rows every task reads its range of.
        _bookkeeping.make_private(conn, b, table)
        conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (_row)").format(target))
        # Statistics (a sample, cheap): tasks then walk the index in order instead of
        # sorting their range, which could spill to disk for large contents.
        conn.execute(sql.SQL("ANALYZE {}").format(target))
        # In the same transaction as the table: no snapshot without its bookkeeping row.
        row = conn.execute(
            f"INSERT INTO {b}.read_snapshot"
            " (read_id, relation, source, queue, rows, partitions, retention_s)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING created_at::text",
            (
                read_id,
                table,
                RELATIONS[opts.table],
                opts.queue,
                rows,
                opts.num_partitions,
                opts.snapshot_retention_s,
            ),
        ).fetchone()
        assert row is not None
        snapshot = Snapshot(read_id, table, row[0], opts.snapshot_retention_s)
    if snapshot is None:
        return [Part(0, empty=True)]
    step = -(-rows // opts.num_partitions)  # ceiling division: at most num_partitions ranges
    return [
        Part(i, snapshot, low=low, high=min(rows, low + step - 1))
        for i, low in enumerate(range(1, rows + 1, step))
    ]


def _queue_filter(opts: Options) -> sql.Composable:
    if opts.queue:
        return sql.SQL("WHERE queue = {}").format(sql.Literal(opts.queue))
    return sql.SQL("")


def drop_expired_snapshots(conn: psycopg.Connection[Any]) -> int:
    """Drops the snapshots unread for longer than their retention; returns how many.

    Race-free against tasks: a task first moves ``last_read_at`` (so a snapshot in use does
    not expire), then reads under an ACCESS SHARE lock, which the NOWAIT below respects.
    SKIP LOCKED leaves a snapshot another planner is dropping, or a task is touching, alone.
    """
    b = _bookkeeping.schema(conn)
    dropped = 0
    with conn.transaction():
        expired = conn.execute(
            f"SELECT read_id, relation FROM {b}.read_snapshot"
            " WHERE last_read_at + retention_s * interval '1 second' <= pg_catalog.now()"
            " ORDER BY last_read_at FOR UPDATE SKIP LOCKED"
        ).fetchall()
        for read_id, relation in expired:
            target = sql.Identifier(b, relation)
            try:
                # A savepoint each: one snapshot that cannot go now does not keep the others.
                with conn.transaction():
                    exists = conn.execute(
                        "SELECT pg_catalog.to_regclass(%s) IS NOT NULL",
                        (f"{b}.{relation}",),
                    ).fetchone()
                    if exists is not None and exists[0]:
                        conn.execute(
                            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE NOWAIT").format(target)
                        )
                        conn.execute(sql.SQL("DROP TABLE {}").format(target))
                    conn.execute(f"DELETE FROM {b}.read_snapshot WHERE read_id = %s", (read_id,))
                    dropped += 1
            except errors.LockNotAvailable:
                # Still being read (a read longer than the retention): left to a later planning.
                continue
    return dropped


def read(opts: Options, part: Part) -> Iterator[tuple[Any, ...]]:
    if part.empty:
        return
    if part.snapshot is None:
        yield from _read_live(opts)
    else:
        yield from _read_snapshot(opts, part, part.snapshot)


def _read_live(opts: Options) -> Iterator[tuple[Any, ...]]:
    query = sql.SQL("SELECT {columns} FROM {source} {where} ORDER BY {order}").format(
        columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns(opts.table)),
        source=sql.Identifier(*RELATIONS[opts.table].split(".")),
        where=_queue_filter(opts),
        order=sql.SQL(", ").join(sql.Identifier(c) for c in ORDER[opts.table]),
    )
    with _bookkeeping.connect(opts.dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        with conn.cursor(name="lonnymq_spark_read") as cur:
            cur.itersize = 5000
            cur.execute(query)
            for row in cur:
                yield tuple(row)


def _read_snapshot(opts: Options, part: Part, snap: Snapshot) -> Iterator[tuple[Any, ...]]:
    gone = SnapshotError(
        f"the snapshot of this lonnymq read (read_id {snap.read_id}, planned at"
        f" {snap.planned_at}) was dropped: snapshots unread for snapshot_retention_s"
        f" ({snap.retention_s} s) are dropped when a later read is planned. load() the"
        " DataFrame again to read the current state"
    )
    with _bookkeeping.connect(opts.dsn, autocommit=True) as conn:
        b = _bookkeeping.schema(conn)
        query = sql.SQL(
            "SELECT {columns} FROM {target} WHERE _row BETWEEN %s AND %s ORDER BY _row"
        ).format(
            columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns(opts.table)),
            target=sql.Identifier(b, snap.table),
        )
        # Its own short transaction: tasks touching the row together do not queue behind
        # each other's reads. A snapshot in use thus never expires.
        touched = conn.execute(
            f"UPDATE {b}.read_snapshot SET last_read_at = pg_catalog.now()"
            " WHERE read_id = %s RETURNING true",
            (snap.read_id,),
        ).fetchone()
        if touched is None:
            raise gone
        returned = 0
        with conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            with conn.cursor(name="lonnymq_spark_read") as cur:
                cur.itersize = 5000
                try:
                    # Takes the ACCESS SHARE lock that keeps a planner from dropping the
                    # table under the cursor; it may have been dropped just before.
                    cur.execute(query, (part.low, part.high))
                except errors.UndefinedTable:
                    raise gone from None
                for row in cur:
                    returned += 1
                    yield tuple(row)
        expected = part.high - part.low + 1
        if returned != expected:
            # The table is UNLOGGED: a server crash empties it, and it would read as empty.
            # Emptied means no row at all, so this fails before any row went to Spark.
            raise SnapshotError(
                f"the snapshot of this lonnymq read (read_id {snap.read_id}) returned {returned}"
                f" rows for rows {part.low}..{part.high}, expected {expected}: it lost its"
                " rows (an unlogged table is emptied by a server crash). load() the"
                " DataFrame again"
            )
