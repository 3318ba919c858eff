"""A worker process for the system tests: the real ``lonnymq.Worker`` over one queue.

Usage: PYTHONPATH=test python -m system.worker_main DSN QUEUE CONCURRENCY LOCK_MS [sync|async]

(``async`` runs the same handler under ``AsyncWorker`` and ``AsyncQueue``.)

Message content is JSON that tells the handler what to do, so a test decides each message's
fate when it creates it: ``{"sleep_ms": 5}`` sleeps, ``{"crash": true}`` kills the whole
process (``os._exit``) mid-handler, ``{"raise": true}`` raises after sleeping. Anything else
completes at once. Runs until SIGTERM (graceful) or SIGKILL.
"""

from __future__ import annotations

import signal
import threading

# A SIGTERM that lands while this process is still starting (before the worker installs
# its own handlers) must still mean "stop gracefully", not death by the default action.
_stop_requested = threading.Event()
signal.signal(signal.SIGTERM, lambda signum, frame: _stop_requested.set())

import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from lonnymq import AsyncMessage, AsyncQueue, AsyncWorker, Message, Queue, Worker  # noqa: E402


def job_of(content: bytes) -> dict[str, Any]:
    try:
        job = json.loads(content)
    except ValueError:
        return {}
    if not isinstance(job, dict):
        return {}
    if job.get("crash"):
        os._exit(3)  # a poison message: the process dies with the message in hand
    return job


def handler(message: Message) -> None:
    job = job_of(message.content)
    if job.get("sleep_ms"):
        time.sleep(job["sleep_ms"] / 1000)
    if job.get("raise"):
        raise RuntimeError("asked to fail")


async def async_handler(message: AsyncMessage) -> None:
    job = job_of(message.content)
    if job.get("sleep_ms"):
        await asyncio.sleep(job["sleep_ms"] / 1000)
    if job.get("raise"):
        raise RuntimeError("asked to fail")


async def run_async(dsn: str, queue_name: str, concurrency: int, lock_ms: int) -> None:
    async with AsyncQueue(dsn, queue_name, pool_size=concurrency + 3) as queue:
        worker = AsyncWorker(
            queue, async_handler, concurrency=concurrency, lock_ms=lock_ms, max_sleep_ms=500
        )
        signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop())
        if _stop_requested.is_set():
            worker.stop()  # a stop() before run() is kept
        await worker.run()
        print(json.dumps(worker.counts), flush=True)


def main() -> None:
    dsn, queue_name, concurrency, lock_ms = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    mode = sys.argv[5] if len(sys.argv) > 5 else "sync"
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s {mode} worker {os.getpid()} %(levelname)s %(message)s",
    )
    if mode == "async":
        asyncio.run(run_async(dsn, queue_name, concurrency, lock_ms))
        return
    with Queue(dsn, queue_name, pool_size=concurrency + 3) as queue:
        worker = Worker(queue, handler, concurrency=concurrency, lock_ms=lock_ms, max_sleep_ms=500)
        signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop())
        if _stop_requested.is_set():
            worker.stop()  # a stop() before run() is kept
        worker.run()
        print(json.dumps(worker.counts), flush=True)


if __name__ == "__main__":
    main()
