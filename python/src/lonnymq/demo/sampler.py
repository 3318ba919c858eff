"""Samples the database while the demo runs: per-channel locked counts (to prove limits
from the server's side, not just the handlers') and queue totals for the view."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import psycopg

from ..queue import Queue

SAMPLE_EVERY_S = 0.05


@dataclass
class Samples:
    count: int = 0
    max_locked: dict[str, int] = field(default_factory=dict)
    ready: int = 0
    scheduled: int = 0
    locked: int = 0


class Sampler(threading.Thread):
    def __init__(self, queue: Queue) -> None:
        super().__init__(name="demo-sampler", daemon=True)
        self.queue = queue
        self.samples = Samples()
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        while not self._stop_event.is_set():
            # A missed sample only lowers coverage; the next one retries.
            with contextlib.suppress(psycopg.Error):
                self.sample()
            self._stop_event.wait(SAMPLE_EVERY_S)

    def sample(self) -> None:
        channels = self.queue.channel_stats()
        samples = self.samples
        for stats in channels:
            if stats.channel is not None:
                previous = samples.max_locked.get(stats.channel, 0)
                samples.max_locked[stats.channel] = max(previous, stats.locked)
        samples.ready = sum(c.ready for c in channels)
        samples.scheduled = sum(c.scheduled for c in channels)
        samples.locked = sum(c.locked for c in channels)
        samples.count += 1
