"""``lonnymq enqueue QUEUE --file data.jsonl``: bulk-create messages in batches.

Each line is a JSON value. An object with a ``content`` key is a message description
(``content``, and optionally ``channel``, ``dedup_key``, ``dequeue_at`` as ISO 8601);
any other value is the content itself. String content is stored as UTF-8 text, anything
else as compact JSON (as ``Queue.create`` does).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

import psycopg

from .. import _sql
from .._content import encode
from .progress import Progress


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "enqueue", help="bulk-create messages from a JSON-lines file"
    )
    parser.add_argument("queue")
    parser.add_argument("--file", required=True, help="JSON lines; '-' for standard input")
    parser.add_argument("--channel", help="channel for lines that do not name one")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.set_defaults(run=run)


Item = tuple[str | None, bytes, datetime | None, str | None]


def content_bytes(value: Any) -> bytes:
    """Strings as UTF-8 text; objects and arrays as compact JSON, like ``Queue.create``."""
    if isinstance(value, str | dict | list):
        return encode(value)
    return json.dumps(value).encode("utf-8")  # numbers, booleans, null


def parse_line(line: str, default_channel: str | None) -> Item:
    value = json.loads(line)
    if isinstance(value, dict) and "content" in value:
        at = value.get("dequeue_at")
        return (
            value.get("channel", default_channel),
            content_bytes(value["content"]),
            None if at is None else datetime.fromisoformat(at),
            value.get("dedup_key"),
        )
    return default_channel, content_bytes(value), None, None


def batches(lines: IO[str], size: int, channel: str | None) -> Iterator[list[Item]]:
    batch: list[Item] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            batch.append(parse_line(line, channel))
        except (ValueError, TypeError) as exc:
            raise SystemExit(f"lonnymq: line {number}: {exc}") from exc
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def run(dsn: str, args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise SystemExit("lonnymq: --batch-size must be positive")
    progress = Progress(count_lines(args.file), f"enqueue {args.queue}")
    statuses: Counter[str] = Counter()
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with source, psycopg.connect(dsn, autocommit=True) as conn:
        for batch in batches(source, args.batch_size, args.channel):
            # One statement per batch: each batch commits on its own, like a stream of creates.
            rows = conn.execute(
                _sql.MESSAGE_CREATE_BATCH,
                (
                    args.queue,
                    [b[0] for b in batch],
                    [b[1] for b in batch],
                    [b[2] for b in batch],
                    [b[3] for b in batch],
                    None,
                ),
            ).fetchall()
            statuses.update(r[0] for r in rows)
            progress.advance(len(batch))
    progress.finish()
    print(", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "nothing to enqueue")
    return 0
