"""``lonnymq status``: one table per queue — ready, scheduled, locked, limits, oldest age."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from psycopg.rows import class_row
from psycopg_pool import ConnectionPool

from .. import _sql
from ..models import ChannelStats, QueueStats
from ..queue import Queue
from ._text import printable

HEADERS = (
    "channel",
    "ready",
    "scheduled",
    "locked",
    "concurrency",
    "interval",
    "max size",
    "attempts",
    "oldest",
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("status", help="show queues and channels")
    parser.add_argument("--queue", help="only this queue")
    parser.set_defaults(run=run)


def run(dsn: str, args: argparse.Namespace) -> int:
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
        if args.queue is not None:
            queue = Queue(pool, args.queue)
            stats = [queue.queue_stats()]
            channels = queue.channel_stats()
            stats = [
                s for s in stats if s.channels or s.ready or s.scheduled or s.locked or s.archived
            ]
        else:
            # Every queue in one read of each view (each read counts the whole message table).
            with pool.connection() as conn:
                stats = (
                    conn.cursor(row_factory=class_row(QueueStats))
                    .execute(_sql.ALL_QUEUE_STATS)
                    .fetchall()
                )
                channels = (
                    conn.cursor(row_factory=class_row(ChannelStats))
                    .execute(_sql.ALL_CHANNEL_STATS)
                    .fetchall()
                )
        shown = [render_queue(s, [c for c in channels if c.queue == s.queue]) for s in stats]
    if not shown:
        print("no queues" if args.queue is None else f"queue {printable(args.queue)} is empty")
        return 0
    print("\n\n".join(shown))
    return 0


def render_queue(queue: QueueStats, channels: Sequence[ChannelStats]) -> str:
    title = (
        f"queue {printable(queue.queue)}: {queue.channels} channels, {queue.ready} ready, "
        f"{queue.scheduled} scheduled, {queue.locked} locked, {queue.archived} archived"
    )
    rows = [
        [
            "(no channel)" if c.channel is None else printable(c.channel),
            str(c.ready),
            str(c.scheduled),
            str(c.locked),
            limit(c.max_concurrency),
            f"{c.release_interval_ms or 0} ms" if c.release_interval_ms else "-",
            limit(c.max_size),
            limit(c.max_attempts),
            age(c.oldest_ready_ms),
        ]
        for c in channels
    ]
    return title + "\n" + table(HEADERS, rows)


def limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def age(ms: int | None) -> str:
    """A compact human age: 850ms, 12.3s, 4m05s, 2h10m."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned first column, right-aligned numbers, two spaces between columns."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])
