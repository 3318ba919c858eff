"""``lonnymq send QUEUE CONTENT``: create one message and print its status and id."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import psycopg

from .. import _sql
from .._content import encode


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("send", help="create one message")
    parser.add_argument("queue")
    parser.add_argument("content", help="message content; '-' reads it from standard input")
    parser.add_argument("--channel")
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--priority", type=int, default=0)
    parser.add_argument("--dedup-key")
    parser.set_defaults(run=run)


def run(dsn: str, args: argparse.Namespace) -> int:
    content = sys.stdin.buffer.read() if args.content == "-" else encode(args.content)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            _sql.MESSAGE_CREATE,
            (
                args.queue,
                args.channel,
                content,
                None,
                args.delay_ms,
                args.priority,
                args.dedup_key,
                None,
            ),
        ).fetchone()
    assert row is not None
    result = _sql.create_result(row)
    print(f"{result.status} {result.id if result.id is not None else '-'}")
    return 0 if result.status in ("created", "deduplicated") else 1
