"""Fault 3: ``pg_terminate_backend`` on the workers' connections, at random.

Three worker processes (two ``Worker``, one ``AsyncWorker``) tag their connections with an
application_name; while they drain
the queue the test terminates a random one of those backends (pooled, LISTEN, mid-dequeue or
mid-complete) every 100-400 ms for 12 s. The workers must recover by themselves (same processes) and
every message must be settled exactly once: one archive row per message, nothing live,
``verify()`` empty, counters exact, limits never exceeded. Channels are of both kinds: with
``max_concurrency`` (accounted: exact ``locked_count``) and without limits (shared).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable

import psycopg

from lonnymq import Queue

from .conftest import (
    LimitSampler,
    WorkerProcess,
    archive_outcomes,
    archived_count,
    dsn_for,
    live_ids,
    verify,
    wait_for,
)

# Enough work to outlast MIN_TERMINATED terminations: batched workers drain 3,000 in 2 s.
N_MESSAGES = 9000
CHAOS_S = 12  # terminate for this long (or until all is settled), then let it drain
MIN_TERMINATED = 20
LIMITED = [f"lim{n}" for n in range(10)]
SHARED = [f"shr{n}" for n in range(10)]


def test_terminated_backends_lose_and_double_nothing(
    shared_db: str, queue_name: str, workers: Callable[..., WorkerProcess]
) -> None:
    app = f"victim_{queue_name}"
    worker_dsn = dsn_for(
        shared_db, str(psycopg.conninfo.conninfo_to_dict(shared_db)["dbname"]), application_name=app
    )
    channels = LIMITED + SHARED
    with Queue(shared_db, queue_name, pool_size=2) as queue:
        for c in LIMITED:
            queue.channel_set(c, max_concurrency=2, retain_completed=True)
        for c in SHARED:
            queue.channel_set(c, retain_completed=True)
        created: set[int] = set()
        for first in range(0, N_MESSAGES, 1000):
            results = queue.create_batch(
                [json.dumps({"sleep_ms": random.choice((0, 1, 3))}) for _ in range(1000)],
                channels=[channels[(first + i) % len(channels)] for i in range(1000)],
            )
            created.update(r.id for r in results if r.id is not None)
        assert len(created) == N_MESSAGES

    sampler = LimitSampler(shared_db, queue_name)
    sampler.start()
    procs = [workers(worker_dsn, queue_name, 4, 1500, mode) for mode in ("sync", "sync", "async")]
    pids = [p.pid for p in procs]
    terminated = 0

    def settled() -> int:
        return archived_count(shared_db, queue_name)

    with psycopg.connect(shared_db, autocommit=True) as admin:
        # At least CHAOS_S seconds and MIN_TERMINATED terminations (on a loaded machine the
        # second takes longer), at most 3 * CHAOS_S, and only while there is work left.
        start = time.monotonic()
        while (
            settled() < N_MESSAGES
            and time.monotonic() < start + 3 * CHAOS_S
            and (time.monotonic() < start + CHAOS_S or terminated < MIN_TERMINATED)
        ):
            pid = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "ORDER BY random() LIMIT 1",
                (app,),
            ).fetchone()
            if pid is not None and admin.execute("SELECT pg_terminate_backend(%s)", pid).fetchone():
                terminated += 1
            time.sleep(random.uniform(0.1, 0.4))
    try:
        wait_for(lambda: settled() >= N_MESSAGES, 60, "every message to be settled")
    finally:
        sampler.stop()

    assert terminated >= 10, f"only {terminated} backends terminated before the work ran out"
    assert all(p.alive() for p in procs) and [p.pid for p in procs] == pids, [
        p.log_text()[-3000:] for p in procs
    ]
    outcomes = archive_outcomes(shared_db, queue_name)
    assert set(outcomes) == created
    doubles = {m: o for m, o in outcomes.items() if len(o) > 1}
    assert not doubles, f"settled more than once: {list(doubles.items())[:5]}"
    assert {o[0][0] for o in outcomes.values()} == {"completed"}
    assert not live_ids(shared_db, queue_name)
    assert verify(shared_db) == []
    assert sampler.violations == [], sampler.violations[:10]
    assert [p.terminate() for p in procs] == [0, 0, 0]
    print(f"\n{N_MESSAGES} messages, {terminated} backends terminated")
