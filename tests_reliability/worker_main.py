"""A worker process for the reliability tests: the real ``lonnymq.Worker`` over one queue.

Usage: python -m tests_reliability.worker_main DSN QUEUE CONCURRENCY LOCK_MS

Message content is JSON that tells the handler what to do, so a test decides each message's
fate when it creates it: ``{"sleep_ms": 5}`` sleeps, ``{"crash": true}`` kills the whole
process (``os._exit``) mid-handler, ``{"raise": true}`` raises after sleeping. Anything else
completes at once. Runs until SIGTERM (graceful) or SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from lonnymq import Message, Queue, Worker


def handler(message: Message) -> None:
    try:
        job = json.loads(message.content)
    except ValueError:
        return
    if not isinstance(job, dict):
        return
    if job.get("crash"):
        os._exit(3)  # a poison message: the process dies with the message in hand
    if job.get("sleep_ms"):
        time.sleep(job["sleep_ms"] / 1000)
    if job.get("raise"):
        raise RuntimeError("asked to fail")


def main() -> None:
    dsn, queue_name, concurrency, lock_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s worker {os.getpid()} %(levelname)s %(message)s"
    )
    with Queue(dsn, queue_name, pool_size=concurrency + 3) as queue:
        worker = Worker(queue, handler, concurrency=concurrency, lock_ms=lock_ms, max_sleep_ms=500)
        worker.run()
        print(json.dumps(worker.counts), flush=True)


if __name__ == "__main__":
    main()
