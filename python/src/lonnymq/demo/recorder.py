"""What the handlers observe, per tenant: progress, waits, in-flight peaks, delivery times.

Handlers run on many threads, so every update happens under one lock.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field


@dataclass
class TenantRecord:
    done: int = 0
    transient_failures: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    wait_total_s: float = 0.0
    waits: int = 0
    # Delivery times on the database clock (ms), for the rate limit check.
    delivered_ms: list[int] = field(default_factory=list)
    # Fresh-delivery counts per view refresh, for the fairness column.
    recent_starts: int = 0

    @property
    def avg_wait_s(self) -> float:
        return self.wait_total_s / self.waits if self.waits else 0.0

    def min_gap_ms(self) -> int | None:
        times = sorted(self.delivered_ms)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return min(gaps) if gaps else None


class Recorder:
    def __init__(self, tenants: list[str]) -> None:
        self._lock = threading.Lock()
        self.tenants = {name: TenantRecord() for name in tenants}
        self.started = time.monotonic()

    def start(self, tenant: str, created_wall: float, first_attempt: bool) -> None:
        with self._lock:
            record = self.tenants[tenant]
            record.in_flight += 1
            record.max_in_flight = max(record.max_in_flight, record.in_flight)
            record.recent_starts += 1
            if first_attempt:
                record.wait_total_s += max(time.time() - created_wall, 0.0)
                record.waits += 1

    def delivered(self, tenant: str, at_ms: int) -> None:
        with self._lock:
            self.tenants[tenant].delivered_ms.append(at_ms)

    def finish(self, tenant: str, ok: bool) -> None:
        with self._lock:
            record = self.tenants[tenant]
            record.in_flight -= 1
            if ok:
                record.done += 1
            else:
                record.transient_failures += 1

    def take_recent(self) -> dict[str, int]:
        """Deliveries per tenant since the last call (the fairness column)."""
        with self._lock:
            recent = {n: r.recent_starts for n, r in self.tenants.items()}
            for record in self.tenants.values():
                record.recent_starts = 0
            return recent

    def elapsed(self) -> float:
        return time.monotonic() - self.started
