"""Per-queue throughput for the overview: completions and failures per second over the
last minutes, from the workers' reports (``NOTIFY lonnymq_stats``, see ``lonnymq._report``).

Why reports: the database keeps no per-queue count of completions (one would cost every
settle a write), a completion without ``retain_completed`` leaves no row, and the table
statistics (the all-queues chart) are per table, not per queue. A worker knows what it
settled and sends its running totals every few seconds; here they become per-queue
increments in buckets of BUCKET_S. Only while the overview has been opened in the last
CHART_S does the app listen (one connection, no announcement, producers unaffected).

Reports cover work settled by lonnymq's Worker and AsyncWorker; a consumer of its own (SQL,
``Queue.dequeue`` by hand) shows in the all-queues chart only. Any role may NOTIFY: the
chart is for reading trends, not for accounting, and a forged report can cost little: its
numbers are clamped, reports on queues the overview does not list are ignored, and the
workers tracked per queue are capped (a flood of made-up workers on one queue leaves the
others alone).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import Any

import psycopg

from .db import Database

log = logging.getLogger("lonnymq.web")

BUCKET_S = 10.0
CHART_S = 600.0
RECONNECT_DELAY_S = 2.0
# How often the listening loop looks at whether the overview is still being opened.
CHECK_S = 1.0
KINDS = ("completed", "failed")
# A worker's totals are clamped here (a float holds them exactly; far beyond any real count).
MAX_TOTAL = 2**53
# At most this many workers of one queue are tracked: more are ignored until the old ones
# are forgotten (CHART_S after their last report).
MAX_WORKERS = 1_000
MAX_NAME_CHARS = 256


class Throughput:
    def __init__(self, db: Database | None) -> None:
        self._db = db if db is not None and db.conninfo is not None else None
        self._until = 0.0  # listen until then (monotonic)
        self._task: asyncio.Task[None] | None = None
        self._since = time.time()  # reports of workers started before are a baseline only
        # queue -> worker id -> (heard, totals)
        self._workers: dict[str, dict[str, tuple[float, dict[str, int]]]] = {}
        self._buckets: dict[str, dict[int, list[int]]] = {}  # queue -> bucket -> per kind
        # The queues the overview listed last: the only ones charted.
        self.queues: frozenset[str] = frozenset()
        self._forgot = 0  # the bucket old reports were last forgotten in

    @property
    def available(self) -> bool:
        return self._db is not None

    def touch(self, queues: list[str]) -> None:
        """The overview was opened, listing ``queues``: listen for the next CHART_S."""
        self.queues = frozenset(queues)
        if self._db is None:
            return
        self._until = time.monotonic() + CHART_S
        if self._task is None or self._task.done():
            # A fresh start: totals heard before a pause would become one false burst.
            self._workers.clear()
            self._since = time.time()
            self._task = asyncio.create_task(self._listen())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _listen(self) -> None:
        assert self._db is not None
        while time.monotonic() < self._until:
            try:
                async with await self._db.connect() as conn:
                    await conn.execute("LISTEN lonnymq_stats")
                    while time.monotonic() < self._until:
                        async for notify in conn.notifies(timeout=CHECK_S):
                            self.record(notify.payload, time.time())
            except psycopg.Error as exc:
                log.warning("throughput LISTEN lost (%s); reconnecting", exc)
                await asyncio.sleep(RECONNECT_DELAY_S)

    def record(self, payload: str, now: float) -> None:
        """Adds what a report says happened since the worker's previous one."""
        report = parse(payload)
        if report is None:
            return
        queue, worker, since, totals = report
        if queue not in self.queues:
            return  # a made-up name, or a queue newer than the overview's last read
        workers = self._workers.setdefault(queue, {})
        heard = workers.get(worker)
        if heard is None and len(workers) >= MAX_WORKERS:
            self._forget(now)
            return
        if heard is not None:
            before = heard[1]
        elif since >= self._since:
            before = dict.fromkeys(KINDS, 0)  # started while we listen: all of it is new
        else:
            before = None  # its totals include work done before we listened
        workers[worker] = (now, totals)
        if before is not None:
            bucket = self._buckets.setdefault(queue, {}).setdefault(
                int(now // BUCKET_S), [0] * len(KINDS)
            )
            for i, kind in enumerate(KINDS):
                bucket[i] = min(bucket[i] + max(totals[kind] - before[kind], 0), MAX_TOTAL)
        self._forget(now)

    def _forget(self, now: float) -> None:
        """Drops buckets and workers older than CHART_S: once per bucket, not per report
        (a burst of reports must not walk every queue and worker each time)."""
        if int(now // BUCKET_S) == self._forgot:
            return
        self._forgot = int(now // BUCKET_S)
        oldest = int((now - CHART_S) // BUCKET_S)
        for queue in list(self._buckets):
            kept = {b: v for b, v in self._buckets[queue].items() if b >= oldest}
            if kept:
                self._buckets[queue] = kept
            else:
                del self._buckets[queue]
        for queue in list(self._workers):
            kept_workers = {w: h for w, h in self._workers[queue].items() if h[0] >= now - CHART_S}
            if kept_workers:
                self._workers[queue] = kept_workers
            else:
                del self._workers[queue]

    def charts(self, now: float, width: float = 160.0, height: float = 28.0) -> dict[str, Any]:
        """Per queue: a sparkline of completions and failures per second over the finished
        buckets of the last CHART_S, the latest rates, and the totals heard (every bucket)."""
        current = int(now // BUCKET_S)
        count = int(CHART_S // BUCKET_S)
        first = current - count
        charts: dict[str, Any] = {}
        for queue, buckets in self._buckets.items():
            if queue not in self.queues:
                continue
            rates = [
                [v / BUCKET_S for v in buckets.get(b, [0] * len(KINDS))]
                for b in range(first, current)
            ]
            peak = max([max(r) for r in rates] + [1e-9])

            def line(kind: int, rates: list[list[float]] = rates, peak: float = peak) -> str:
                step = width / max(count - 1, 1)
                return " ".join(
                    f"{i * step:.1f},{height - 1 - r[kind] / peak * (height - 2):.1f}"
                    for i, r in enumerate(rates)
                )

            totals = [sum(v[i] for v in buckets.values()) for i in range(len(KINDS))]
            charts[queue] = {
                "completed": line(0),
                "failed": line(1),
                "completed_now": rates[-1][0],
                "failed_now": rates[-1][1],
                "peak": peak if peak > 1e-9 else 0.0,
                "completed_total": totals[0],
                "failed_total": totals[1],
                "width": width,
                "height": height,
            }
        return charts


def parse(payload: str) -> tuple[str, str, float, dict[str, int]] | None:
    """A report's queue, worker id, start time and totals (clamped to 0..MAX_TOTAL); None
    when malformed."""
    try:
        data = json.loads(payload)
        queue, worker, since = data["queue"], data["worker"], float(data["since"])
        totals = {kind: min(max(int(data[kind]), 0), MAX_TOTAL) for kind in KINDS}
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
        return None
    if not (isinstance(queue, str) and isinstance(worker, str) and math.isfinite(since)):
        return None
    if len(queue) > MAX_NAME_CHARS or len(worker) > MAX_NAME_CHARS:
        return None
    return queue, worker, since, totals
