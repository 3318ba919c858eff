"""A worker process for the SIGTERM tests: prints ``start ID`` / ``done ID`` per message.

Usage: python -m tests.worker_process DSN QUEUE HANDLER_MS GRACE_MS [async]
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from lonnymq import AsyncMessage, AsyncQueue, AsyncWorker, Message, Queue, Worker

_output = threading.Lock()


def say(line: str) -> None:
    # One write per line under a lock: print() from two handler threads can interleave.
    with _output:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def run_sync(dsn: str, name: str, handler_ms: int, grace_ms: int) -> None:
    def handler(message: Message) -> None:
        say(f"start {message.id}")
        time.sleep(handler_ms / 1000)
        say(f"done {message.id}")

    with Queue(dsn, name) as queue:
        Worker(queue, handler, concurrency=2, shutdown_grace_ms=grace_ms).run()


async def run_async(dsn: str, name: str, handler_ms: int, grace_ms: int) -> None:
    async def handler(message: AsyncMessage) -> None:
        say(f"start {message.id}")
        await asyncio.sleep(handler_ms / 1000)
        say(f"done {message.id}")

    async with AsyncQueue(dsn, name) as queue:
        await AsyncWorker(queue, handler, concurrency=2, shutdown_grace_ms=grace_ms).run()


def main() -> None:
    dsn, name, handler_ms, grace_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if sys.argv[5:] == ["async"]:
        asyncio.run(run_async(dsn, name, handler_ms, grace_ms))
    else:
        run_sync(dsn, name, handler_ms, grace_ms)
    say("exit")


if __name__ == "__main__":
    main()
