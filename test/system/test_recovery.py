"""How fast workers resume after a PostgreSQL restart and under backend kills, and what the
faults cost in redeliveries (issue 11, "Recover as fast as the peers").

A producer thread creates messages at a steady rate into two queues, one served by a
``Worker`` process and one by an ``AsyncWorker`` process (so one fault measures both). The
producer uses a bare psycopg connection that reconnects every 50 ms: what is measured is the
workers' recovery, not the producer's.

- **restart**: the server is stopped (``pg_ctl -m fast``), stays down ``DOWN_S`` seconds and
  is started again. Measured per worker: seconds from the first connection the server
  accepts to the first completion; the end-to-end latency (``archived_at - created_at``:
  claim, handler and settle) of messages created in the minute after the server is back.
- **backend kills**: for ``CHAOS_S`` seconds a random backend of the worker processes is
  terminated twice a second. Measured: the end-to-end latency of messages created during the
  chaos, the state each killed backend was in, and the redeliveries.

The tests assert correctness only (every acknowledged create completed exactly once, nothing
invented, ``verify()`` empty, the same worker processes carry on and resume within a
generous ``RESUME_BOUND_S``); the numbers are printed and written to
``test/system/results/recovery.json`` (``LONNYMQ_RESULTS_DIR`` to change the
directory), which docs/guarantees.md quotes. Timing goals belong to benchmarks, not tests.
"""

from __future__ import annotations

import functools
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from .conftest import (
    ROOT,
    OwnCluster,
    WorkerProcess,
    archive_outcomes,
    dsn_for,
    live_ids,
    recreate_database,
    verify,
    wait_for,
)

MODES = ("sync", "async")
RATE_PER_S = 40  # creates per second into each queue
LOCK_MS = 10_000
CONCURRENCY = 4
DOWN_S = 20  # the peers' harness keeps the server down 20 s
RECOVERY_WINDOW_S = 60  # latency is measured for messages created in this window
CHAOS_S = 30
KILL_EVERY_S = 0.5  # two kills a second
RESUME_BOUND_S = 60  # a worker that has not resumed by then is broken, not slow
RESULTS_DIR = Path(os.environ.get("LONNYMQ_RESULTS_DIR", ROOT / "test" / "system" / "results"))
CHANNELS = [f"c{n}" for n in range(8)]


class Producer(threading.Thread):
    """Creates ``RATE_PER_S`` messages a second into each queue over one autocommit
    connection, reconnecting every 50 ms while the server is away. Records every id whose
    create returned (committed) and counts creates whose answer was lost (in doubt)."""

    def __init__(self, dsn: str, queues: list[str]) -> None:
        super().__init__(daemon=True, name="producer")
        self.dsn, self.queues = dsn, queues
        self.acked: dict[str, list[int]] = {q: [] for q in queues}
        self.in_doubt = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        n = 0
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
                for queue in self.queues:
                    n += 1
                    row = conn.execute(
                        "SELECT id FROM lonnymq.message_create(%s, %s, %s::bytea)",
                        (queue, CHANNELS[n % len(CHANNELS)], b"{}"),
                    ).fetchone()
                    assert row is not None and row[0] is not None
                    self.acked[queue].append(row[0])
            except psycopg.OperationalError:
                self.in_doubt += 1
                if conn is not None:
                    conn.close()
                conn = None
                self._stop_event.wait(0.05)
                continue
            next_at += 1 / RATE_PER_S
            self._stop_event.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - 1)  # no burst after an outage

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)
        assert not self.is_alive()


def server_now(dsn: str) -> datetime:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def wait_until_up(dsn: str) -> datetime:
    """Polls every 50 ms; returns the server's clock at the first connection it accepts."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return server_now(dsn)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def latency_stats(dsn: str, queue: str, start: datetime, seconds: float) -> dict[str, Any]:
    """End-to-end latency of the messages created in [start, start + seconds): p50, p99
    and max in seconds, with how many there were and how many were redelivered."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            """
            SELECT count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY s),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY s),
                   max(s),
                   count(*) FILTER (WHERE num_attempts > 1),
                   coalesce(sum(num_attempts - 1), 0)
              FROM (SELECT extract(epoch FROM archived_at - created_at)::float8 AS s,
                           num_attempts
                      FROM lonnymq.message_archive
                     WHERE queue = %s AND created_at >= %s
                       AND created_at < %s + make_interval(secs => %s)) AS m
            """,
            (queue, start, start, seconds),
        ).fetchone()
    assert row is not None
    count, p50, p99, worst, redelivered, extra = row
    return {
        "messages": count,
        "latency_p50_s": round(p50, 3) if p50 is not None else None,
        "latency_p99_s": round(p99, 3) if p99 is not None else None,
        "latency_max_s": round(worst, 3) if worst is not None else None,
        "redelivered_messages": redelivered,
        "extra_deliveries": int(extra),
    }


def first_completion_after(dsn: str, queue: str, since: datetime) -> float | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM min(archived_at) - %s)::float8 "
            "FROM lonnymq.message_archive WHERE queue = %s AND archived_at >= %s",
            (since, queue, since),
        ).fetchone()
    return None if row is None or row[0] is None else round(float(row[0]), 3)


def completed_since(dsn: str, queue: str, since: datetime) -> bool:
    return first_completion_after(dsn, queue, since) is not None


def all_completed(dsn: str, queue: str, ids: set[int]) -> bool:
    return ids <= set(archive_outcomes(dsn, queue))


def redeliveries(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(num_attempts - 1), 0) FROM lonnymq.message_archive "
            "WHERE queue = %s",
            (queue,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def record(cell: str, numbers: dict[str, Any]) -> None:
    """Merge one cell's numbers into results/recovery.json and print them."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / "recovery.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[cell] = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **numbers}
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"\n{cell}: {json.dumps(numbers, sort_keys=True)}")


def assert_exactly_once(dsn: str, queue: str, producer: Producer, proc: WorkerProcess) -> None:
    """Every acknowledged create completed exactly once; nothing invented or left."""
    acked = set(producer.acked[queue])
    assert len(acked) == len(producer.acked[queue]), "an id was acknowledged twice"
    outcomes = archive_outcomes(dsn, queue)
    missing = acked - set(outcomes)
    assert not missing, f"{queue}: never completed: {sorted(missing)[:10]}"
    doubles = {m: o for m, o in outcomes.items() if len(o) > 1}
    assert not doubles, f"{queue}: settled more than once: {list(doubles.items())[:5]}"
    assert {o[0][0] for o in outcomes.values()} == {"completed"}
    # A create whose answer the fault cut off may have committed: at most those are extra.
    assert len(set(outcomes) - acked) <= producer.in_doubt
    assert not live_ids(dsn, queue)
    assert proc.alive() and proc.starts == 1, proc.log_text()[-3000:]


@pytest.fixture
def setup(
    own_cluster: OwnCluster, workers: Callable[..., WorkerProcess]
) -> Iterator[tuple[str, str, dict[str, WorkerProcess], Producer]]:
    """A database with one queue per worker mode, the workers (tagged by application_name
    so a killer finds them) and a running producer."""
    dsn = recreate_database(own_cluster.admin_dsn, "lonnymq_rel_recovery")
    app = "recovery_victim"
    worker_dsn = dsn_for(dsn, "lonnymq_rel_recovery", application_name=app)
    queues = {mode: f"rec_{mode}" for mode in MODES}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue in queues.values():
            for channel in CHANNELS:
                conn.execute(
                    "SELECT lonnymq.channel_set(%s, %s, retain_completed => true)",
                    (queue, channel),
                )
    procs = {
        mode: workers(worker_dsn, queue, CONCURRENCY, LOCK_MS, mode)
        for mode, queue in queues.items()
    }
    producer = Producer(dsn, list(queues.values()))
    producer.start()
    try:
        # Steady state first: both workers completing.
        for queue in queues.values():
            wait_for(
                functools.partial(archive_outcomes, dsn, queue), 60, f"{queue} to complete work"
            )
        yield dsn, app, procs, producer
    finally:
        producer.stop()


def finish(dsn: str, procs: dict[str, WorkerProcess], producer: Producer) -> None:
    producer.stop()
    for mode, proc in procs.items():
        queue = f"rec_{mode}"
        acked = set(producer.acked[queue])
        wait_for(
            functools.partial(all_completed, dsn, queue, acked),
            60,
            f"{queue}: every acknowledged create to complete",
        )
        assert_exactly_once(dsn, queue, producer, proc)
    assert verify(dsn) == []
    assert [p.terminate() for p in procs.values()] == [0, 0]


def test_workers_resume_after_a_restart(
    own_cluster: OwnCluster, setup: tuple[str, str, dict[str, WorkerProcess], Producer]
) -> None:
    dsn, _app, procs, producer = setup
    time.sleep(2)
    before = {mode: redeliveries(dsn, f"rec_{mode}") for mode in MODES}
    own_cluster.stop()
    time.sleep(DOWN_S)
    own_cluster.start()
    up = wait_until_up(dsn)
    resumed: dict[str, float | None] = {}
    for mode in MODES:
        queue = f"rec_{mode}"
        wait_for(
            functools.partial(completed_since, dsn, queue, up),
            RESUME_BOUND_S,
            f"the {mode} worker to resume",
        )
        resumed[mode] = first_completion_after(dsn, queue, up)
    # Let the recovery window fill with messages before measuring it.
    wait_for(
        lambda: (server_now(dsn) - up).total_seconds() >= RECOVERY_WINDOW_S,
        RECOVERY_WINDOW_S + 30,
        "the recovery window to pass",
        every=1,
    )
    finish(dsn, procs, producer)
    for mode in MODES:
        queue = f"rec_{mode}"
        record(
            f"restart_{mode}",
            {
                "down_s": DOWN_S,
                "first_completion_after_up_s": resumed[mode],
                "redeliveries": redeliveries(dsn, queue) - before[mode],
                "recovery_window": latency_stats(dsn, queue, up, RECOVERY_WINDOW_S),
            },
        )


def test_workers_keep_up_under_backend_kills(
    setup: tuple[str, str, dict[str, WorkerProcess], Producer],
) -> None:
    dsn, app, procs, producer = setup
    states: dict[str, int] = {}
    seen_idle_in_transaction = samples = 0
    start = server_now(dsn)
    with psycopg.connect(dsn, autocommit=True) as admin:
        deadline = time.monotonic() + CHAOS_S
        while time.monotonic() < deadline:
            backends = admin.execute(
                "SELECT pid, state FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchall()
            samples += len(backends)
            seen_idle_in_transaction += sum(s == "idle in transaction" for _, s in backends)
            if backends:
                pid, state = random.choice(backends)
                if admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,):
                    states[state or "unknown"] = states.get(state or "unknown", 0) + 1
            time.sleep(KILL_EVERY_S)
    finish(dsn, procs, producer)
    assert sum(states.values()) >= CHAOS_S  # about two a second were really terminated
    for mode in MODES:
        queue = f"rec_{mode}"
        record(
            f"backend_kills_{mode}",
            {
                "chaos_s": CHAOS_S,
                "kills_by_state": states,
                "idle_in_transaction_share": round(seen_idle_in_transaction / max(samples, 1), 3),
                "redeliveries": redeliveries(dsn, queue),
                "chaos_window": latency_stats(dsn, queue, start, CHAOS_S),
            },
        )
