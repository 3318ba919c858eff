"""``lonnymq enqueue QUEUE --file data.jsonl``: bulk-create messages in batches.

Each line is a JSON value. An object with a ``content`` key is a message description
(``content``, and optionally ``channel``, ``dedup_key``, ``dequeue_at`` as ISO 8601);
any other value is the content itself. String content is stored as UTF-8 text, anything
else as compact JSON (as ``Queue.create`` does).

The input is streamed (a pipe or ``-`` works: it is read once). Every batch commits on
its own with an idempotency key derived from its line range and the text of its lines, so
a run that stopped part way (a bad line, a lost connection) can simply be run again with
the same input and ``--batch-size``: the batches it committed answer ``duplicate_batch``
and are not created twice. ``--key-prefix`` names a run, to enqueue the same lines again
on purpose. On failure the command says exactly which lines were committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import psycopg

from .._content import encode
from ..queue import Queue
from .progress import Progress


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "enqueue", help="bulk-create messages from a JSON-lines file"
    )
    parser.add_argument("queue")
    parser.add_argument("--file", required=True, help="JSON lines; '-' for standard input")
    parser.add_argument("--channel", help="channel for lines that do not name one")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument(
        "--key-prefix",
        default="enqueue",
        help="prefix of the per-batch idempotency keys: a re-run with the same prefix, input "
        "and batch size creates only the batches not committed yet (default: enqueue)",
    )
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


class BadLine(Exception):
    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"line {number}: {reason}")
        self.number = number


@dataclass
class Batch:
    first_line: int
    last_line: int
    items: list[Item]
    text: list[str]

    def idempotency_key(self, prefix: str, channel: str | None) -> str:
        """The same lines at the same place (with the same default channel) give the same key."""
        digest = hashlib.sha256(json.dumps([channel, self.text]).encode("utf-8")).hexdigest()
        return f"{prefix}:{self.first_line}-{self.last_line}:{digest}"


def batches(lines: IO[str], size: int, channel: str | None) -> Iterator[Batch]:
    batch = Batch(0, 0, [], [])
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = parse_line(line, channel)
        except (ValueError, TypeError) as exc:
            raise BadLine(number, str(exc)) from exc
        if not batch.items:
            batch.first_line = number
        batch.items.append(item)
        batch.text.append(line.rstrip("\n"))
        batch.last_line = number
        if len(batch.items) >= size:
            yield batch
            batch = Batch(0, 0, [], [])
    if batch.items:
        yield batch


def count_lines(path: str) -> int | None:
    """Lines of a regular file, for the progress bar; None for anything that can be read only
    once (standard input, a pipe, a process substitution)."""
    if path == "-" or not stat.S_ISREG(os.stat(path).st_mode):
        return None
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def committed(last_line: int, statuses: Counter[str]) -> str:
    if not last_line:
        return "nothing was committed"
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    return f"lines 1-{last_line} are committed ({counts})"


def run(dsn: str, args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise SystemExit("lonnymq: --batch-size must be positive")
    if not args.key_prefix:
        raise SystemExit("lonnymq: --key-prefix must not be empty")
    progress = Progress(count_lines(args.file), f"enqueue {args.queue}")
    statuses: Counter[str] = Counter()
    last_committed = 0
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with source, Queue(dsn, args.queue, pool_size=1) as queue:
        try:
            for batch in batches(source, args.batch_size, args.channel):
                # One call per batch: each batch commits on its own, like a stream of
                # creates, under a key that makes its repetition create nothing.
                results = queue.create_batch(
                    [b[1] for b in batch.items],
                    channels=[b[0] for b in batch.items],
                    dequeue_ats=[b[2] for b in batch.items],
                    dedup_keys=[b[3] for b in batch.items],
                    idempotency_key=batch.idempotency_key(args.key_prefix, args.channel),
                )
                statuses.update(r.status for r in results)
                last_committed = batch.last_line
                progress.advance(len(batch.items))
        except BadLine as exc:
            progress.finish()
            print(
                f"lonnymq: {exc}\nlonnymq: {committed(last_committed, statuses)}; "
                f"nothing from line {last_committed + 1} on. Fix the line and run the same "
                "command again: committed batches are recognised and not created twice.",
                file=sys.stderr,
            )
            return 1
        except psycopg.Error:
            progress.finish()
            print(
                f"lonnymq: {committed(last_committed, statuses)}; run the same command again "
                "to create the rest (committed batches are not created twice).",
                file=sys.stderr,
            )
            raise
    progress.finish()
    print(", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "nothing to enqueue")
    return 0
