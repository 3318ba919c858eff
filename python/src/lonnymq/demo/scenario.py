"""Who sends what: the demo's tenants, their channel policies and their jobs."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..queue import Queue

# How long a job "works" (simulated I/O), in milliseconds.
JOB_MS = (40, 120)
# Every tenth job fails once with a transient error before it succeeds.
TRANSIENT_EVERY = 10
POISON_TENANT = "small-2"


@dataclass(frozen=True)
class Tenant:
    name: str
    jobs: int
    # "backlog": every job at once; "trickle": one job every trickle_ms, like live traffic.
    arrival: str = "backlog"
    trickle_ms: int = 0
    max_concurrency: int | None = None
    release_interval_ms: int = 0

    @property
    def limit_text(self) -> str:
        if self.max_concurrency is not None:
            return f"max {self.max_concurrency} in flight"
        if self.release_interval_ms:
            return f"1 per {self.release_interval_ms} ms"
        return "-"


TENANTS = (
    Tenant("noisy", 1200),
    Tenant("small-1", 25, "trickle", 300),
    Tenant("small-2", 25, "trickle", 300),
    Tenant("small-3", 25, "trickle", 300),
    Tenant("throttled", 30, release_interval_ms=250),
    Tenant("serial", 40, max_concurrency=1),
)


def job(tenant: str, number: int, rng: random.Random) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "n": number,
        "ms": rng.randint(*JOB_MS),
        "transient": number % TRANSIENT_EVERY == 3,
        "poison": tenant == POISON_TENANT and number == 7,
        # Wall-clock creation time, so the view can show how long each tenant waited.
        "created": time.time(),
    }


def configure(queue: Queue) -> None:
    """Channel policies for the tenants that have limits."""
    for tenant in TENANTS:
        if tenant.max_concurrency is not None or tenant.release_interval_ms:
            queue.channel_set(
                tenant.name,
                max_concurrency=tenant.max_concurrency,
                release_interval_ms=tenant.release_interval_ms,
            )


def produce(queue: Queue, stop: threading.Event, seed: int = 1) -> None:
    """Create every tenant's jobs: backlogs in batches at once, trickles over time."""
    rng = random.Random(seed)
    for tenant in TENANTS:
        if tenant.arrival == "backlog":
            jobs = [job(tenant.name, n, rng) for n in range(tenant.jobs)]
            for start in range(0, len(jobs), 300):
                queue.create_batch(jobs[start : start + 300], channel=tenant.name)
    trickles = [t for t in TENANTS if t.arrival == "trickle"]
    sent = {t.name: 0 for t in trickles}
    started = time.monotonic()
    while any(sent[t.name] < t.jobs for t in trickles) and not stop.is_set():
        elapsed_ms = (time.monotonic() - started) * 1000
        for tenant in trickles:
            due = min(tenant.jobs, int(elapsed_ms // tenant.trickle_ms) + 1)
            while sent[tenant.name] < due:
                queue.create(job(tenant.name, sent[tenant.name], rng), channel=tenant.name)
                sent[tenant.name] += 1
        stop.wait(0.05)


def total_jobs() -> int:
    return sum(t.jobs for t in TENANTS)
