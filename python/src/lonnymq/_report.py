"""Throughput reports of a worker, for the dashboard's per-queue chart.

A completion without ``retain_completed`` leaves no row behind, and counting completions
per queue in the database would add a write to every settle. The worker knows what it
settled: every ``stats_interval_ms`` (when something changed) it sends its running totals
as one ``NOTIFY lonnymq_stats``, off the hot path (from the heartbeat loop, one small
notification per worker per interval). Totals, not increments: a notification nobody hears
loses nothing, the next one carries it. Nothing is sent while the worker settles nothing; a
stopping worker sends its last totals.
"""

from __future__ import annotations

import json
import time
import uuid

NOTIFY_CHANNEL = "lonnymq_stats"
NOTIFY = "SELECT pg_catalog.pg_notify('lonnymq_stats', %s)"
DEFAULT_INTERVAL_MS = 5000
REPORTED = ("completed", "failed", "deferred")


class Reporter:
    def __init__(self, queue: str, interval_ms: int | None) -> None:
        if interval_ms is not None and interval_ms < 1:
            raise ValueError("stats_interval_ms must be positive, or None for no reports")
        self.queue = queue
        self.interval_s = None if interval_ms is None else interval_ms / 1000
        self.worker = uuid.uuid4().hex  # tells the dashboard whose totals these are
        self.since = time.time()
        self._sent: tuple[int, ...] = (0,) * len(REPORTED)
        self._sent_at = time.monotonic()

    def due(self, counts: dict[str, int], final: bool = False) -> str | None:
        """The payload to send now, or None (not yet, nothing new, or reports are off);
        ``final``: the worker is stopping, send what is new whatever the interval."""
        now = time.monotonic()
        if self.interval_s is None or (now - self._sent_at < self.interval_s and not final):
            return None
        totals = tuple(counts[k] for k in REPORTED)
        if totals == self._sent:
            return None
        self._sent, self._sent_at = totals, now
        return json.dumps(
            {"queue": self.queue, "worker": self.worker, "since": self.since}
            | dict(zip(REPORTED, totals, strict=True)),
            separators=(",", ":"),
        )
