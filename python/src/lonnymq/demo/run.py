"""Runs the demo: sets up the channels, starts a producer, workers and a database sampler,
redraws the view until every job is settled, then prints the checked summary."""

from __future__ import annotations

import threading
import time
from typing import Any

from .._backoff import Backoff
from ..message import Message
from ..queue import Queue
from ..worker import Worker
from .checks import Check, run_checks
from .recorder import Recorder
from .sampler import Sampler
from .scenario import TENANTS, configure, produce, total_jobs
from .view import Screen

LOCK_MS = 30_000
MAX_ATTEMPTS = 3
# Short backoff so retries show up within the demo's minute.
BACKOFF = Backoff(base_ms=200, factor=2.0, max_ms=2000, jitter=0.5)
REFRESH_S = 0.25

DELIVERED_AT = """
SELECT floor(extract(epoch FROM locked_until) * 1000)::bigint - %s
  FROM lonnymq.messages WHERE id = %s
"""


class TransientError(Exception):
    """Stands for a timeout talking to some upstream service: retrying helps."""


def make_handler(queue: Queue, recorder: Recorder) -> Any:
    def handle(message: Message) -> None:
        job = message.json()
        tenant = job["tenant"]
        if any(t.name == tenant and t.release_interval_ms for t in TENANTS):
            # locked_until - lock_ms is the delivery time on the database clock; read before
            # the first heartbeat moves it (heartbeats come after lock_ms / 3).
            with queue.pool.connection() as conn:
                row = conn.execute(DELIVERED_AT, (LOCK_MS, message.id)).fetchone()
            if row is not None:
                recorder.delivered(tenant, int(row[0]))
        recorder.start(tenant, job["created"], message.num_attempts == 1)
        ok = False
        try:
            time.sleep(job["ms"] / 1000)
            if job["poison"]:
                raise ValueError("poison pill: this job can never succeed")
            if job["transient"] and message.num_attempts == 1:
                raise TransientError("upstream timed out")
            ok = True
        finally:
            recorder.finish(tenant, ok)

    return handle


def run_demo(dsn: str, *, workers: int = 3, concurrency: int = 4, timeout_s: float = 90.0) -> int:
    screen = Screen()
    name = f"demo-{int(time.time())}"
    title = f"lonnymq demo — queue {name} — {workers} workers x {concurrency} slots"
    with Queue(dsn, name, pool_size=workers * (concurrency + 2) + 4) as queue:
        configure(queue)
        recorder = Recorder([t.name for t in TENANTS])
        handler = make_handler(queue, recorder)
        pool = [
            Worker(
                queue,
                handler,
                concurrency=concurrency,
                lock_ms=LOCK_MS,
                max_attempts=MAX_ATTEMPTS,
                backoff=BACKOFF,
                handle_signals=False,
            )
            for _ in range(workers)
        ]
        threads = [
            threading.Thread(target=w.run, name=f"demo-worker-{i}", daemon=True)
            for i, w in enumerate(pool)
        ]
        stop_producing = threading.Event()
        producer = threading.Thread(target=produce, args=(queue, stop_producing), daemon=True)
        sampler = Sampler(queue)
        sampler.start()
        producer.start()
        for thread in threads:
            thread.start()
        if not screen.tty:
            screen.write(title)
        finished = False
        try:
            finished = wait_until_settled(queue, recorder, sampler, screen, title, timeout_s)
        except KeyboardInterrupt:
            screen.write("interrupted")
        finally:
            stop_producing.set()
            for worker in pool:
                worker.stop()
            for thread in threads:
                thread.join()
            sampler.stop()
        sampler.sample()
        stats = queue.queue_stats()
        checks = run_checks(
            recorder,
            sampler.samples,
            queue.message_archive(outcome="failed"),
            stats.ready + stats.scheduled + stats.locked,
            queue.verify(),
        )
    if not finished:
        checks.insert(0, Check(False, f"the demo did not finish within {timeout_s:.0f}s"))
    screen.write(f"\nSummary after {recorder.elapsed():.1f}s:")
    for check in checks:
        screen.write(check.line())
    return 0 if all(c.ok for c in checks) else 1


def wait_until_settled(
    queue: Queue, recorder: Recorder, sampler: Sampler, screen: Screen, title: str, timeout_s: float
) -> bool:
    """Redraw until all jobs but the poison one completed and the poison one is archived."""
    deadline = time.monotonic() + timeout_s
    expected = total_jobs() - 1
    while time.monotonic() < deadline:
        screen.show(title, recorder, sampler.samples, recorder.take_recent())
        done = sum(r.done for r in recorder.tenants.values())
        if done >= expected and queue.message_archive(outcome="failed", limit=1):
            screen.show(title, recorder, sampler.samples, recorder.take_recent(), final=True)
            return True
        time.sleep(REFRESH_S)
    return False
