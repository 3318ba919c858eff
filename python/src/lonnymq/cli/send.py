"""``lonnymq send QUEUE CONTENT``: create one message and print its status and id."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..queue import Queue


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
    content = sys.stdin.buffer.read() if args.content == "-" else args.content
    with Queue(dsn, args.queue, pool_size=1) as queue:
        result = queue.create(
            content,
            channel=args.channel,
            delay_ms=args.delay_ms,
            priority=args.priority,
            dedup_key=args.dedup_key,
        )
    print(f"{result.status} {result.id if result.id is not None else '-'}")
    return 0 if result.status in ("created", "deduplicated") else 1
