"""``/metrics`` of the dashboard: queue state read from the database, cached.

Names are ``lonnymq_*`` with a ``queue`` label. Per-channel series only when asked for
(``metrics_channels=True``): one channel per tenant multiplies the series count. Counts
come from ``queue_summary``/``channel_summary`` and stop at their count limit;
``lonnymq_dead_letters_total`` counts the archive's new dead rows (``tally.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .db import Database, Row
from .tally import ArchiveTally

# Per-channel series come from channel_summary, whose first rows are the channels that
# need attention (saturated, longest waiting): at most this many per queue.
CHANNELS_PER_QUEUE = 1000


class DatabaseCollector(Collector):
    def __init__(self, db: Database, *, cache_s: float, per_channel: bool) -> None:
        self._db = db
        self._cache_s = cache_s
        self._per_channel = per_channel
        self._queues: list[Row] = []
        self._channels: dict[str, list[Row]] = {}
        self._read_at = -float("inf")
        self._lock = asyncio.Lock()
        self.tally = ArchiveTally()

    async def refresh(self) -> None:
        """Reads the database unless the cached values are younger than ``cache_s``."""
        async with self._lock:
            if time.monotonic() - self._read_at < self._cache_s:
                return
            queues = await self._db.queues()
            await self.tally.refresh(self._db)
            channels: dict[str, list[Row]] = {}
            if self._per_channel:
                for q in queues:
                    channels[q["queue"]] = await self._db.channels(q["queue"], CHANNELS_PER_QUEUE)
            self._queues, self._channels = queues, channels
            self._read_at = time.monotonic()

    def collect(self) -> Iterable[Metric]:
        messages = GaugeMetricFamily(
            "lonnymq_queue_messages",
            "Live messages by state: ready, scheduled, locked (counts stop at the count limit).",
            labels=["queue", "state"],
        )
        archived = GaugeMetricFamily(
            "lonnymq_queue_archived",
            "Archived messages (stops at the count limit).",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "lonnymq_queue_oldest_ready_seconds",
            "Longest time a channel's next message has been ready.",
            labels=["queue"],
        )
        paused = GaugeMetricFamily("lonnymq_queue_paused", "1 while paused.", labels=["queue"])
        channels = GaugeMetricFamily(
            "lonnymq_queue_channels", "Channels (tenants) of the queue.", labels=["queue"]
        )
        for q in self._queues:
            name = q["queue"]
            for state in ("ready", "scheduled", "locked"):
                messages.add_metric([name, state], q[state])
            archived.add_metric([name], q["archived"])
            oldest.add_metric([name], (q["oldest_ready_ms"] or 0) / 1000)
            paused.add_metric([name], 1 if q["paused"] else 0)
            channels.add_metric([name], q["channels"])
        dead = CounterMetricFamily(
            "lonnymq_dead_letters",
            "Messages dead-lettered (out of max_attempts) since this app started.",
            labels=["queue"],
        )
        names = {q["queue"] for q in self._queues}
        names.update(queue for queue, _outcome in self.tally.counts)
        for name in sorted(names):
            dead.add_metric([name], self.tally.counts[name, "dead"])
        yield from (messages, archived, oldest, paused, channels, dead)
        if not self._per_channel:
            return
        labels = ["queue", "channel"]
        in_flight = GaugeMetricFamily(
            "lonnymq_channel_in_flight", "Messages of the channel locked now.", labels=labels
        )
        ready = GaugeMetricFamily("lonnymq_channel_ready", "Ready messages.", labels=labels)
        ch_oldest = GaugeMetricFamily(
            "lonnymq_channel_oldest_ready_seconds",
            "How long the channel's next message has been ready.",
            labels=labels,
        )
        ch_paused = GaugeMetricFamily("lonnymq_channel_paused", "1 while paused.", labels=labels)
        saturated = GaugeMetricFamily(
            "lonnymq_channel_saturated", "1 while max_concurrency is reached.", labels=labels
        )
        for queue, rows in self._channels.items():
            for c in rows:
                key = [queue, c["channel"]]
                in_flight.add_metric(key, c["in_flight"])
                ready.add_metric(key, c["ready"])
                ch_oldest.add_metric(key, (c["oldest_ready_ms"] or 0) / 1000)
                ch_paused.add_metric(key, 1 if c["paused"] else 0)
                saturated.add_metric(key, 1 if c["saturated"] else 0)
        yield from (in_flight, ready, ch_oldest, ch_paused, saturated)
