"""Worker: completion, retries with backoff, failing after max_attempts, heartbeats,
LISTEN wake-ups and graceful stop — each checked against the database."""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

import psycopg
import pytest

from lonnymq import Backoff, Message, Queue, Retry, Worker

from .helpers import live_ids, locked_count, wait_for

FAST_BACKOFF = Backoff(base_ms=50, factor=2.0, max_ms=1000, jitter=0.0)


def test_backoff_grows_and_jitters() -> None:
    backoff = Backoff(base_ms=100, factor=2.0, max_ms=1000, jitter=0.5)
    rng = random.Random(7)
    for attempts, full in ((1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (50, 1000)):
        delays = {backoff.delay_ms(attempts, rng) for _ in range(50)}
        assert min(delays) >= full // 2 and max(delays) <= full
        assert len(delays) > 1  # jitter spreads retries out
    with pytest.raises(ValueError):
        Backoff(jitter=2)


def test_until_idle_completes_everything(queue: Queue) -> None:
    queue.create_batch([{"n": n} for n in range(6)], channels=["a", "b"] * 3)
    seen: list[int] = []
    worker = Worker(queue, lambda m: seen.append(m.json()["n"]), concurrency=3)
    worker.run(until_idle=True)
    assert sorted(seen) == list(range(6))
    assert worker.counts["completed"] == 6
    assert queue.queue_stats().ready == 0 and queue.queue_stats().locked == 0


def test_retry_defers_with_state(queue: Queue) -> None:
    queue.create("job")
    deliveries: list[tuple[int, bytes | None]] = []

    def handler(message: Message) -> None:
        deliveries.append((message.num_attempts, message.state))
        if message.num_attempts == 1:
            raise Retry(delay_ms=0, state={"checkpoint": 1})

    worker = Worker(queue, handler, max_attempts=1)  # Retry never turns into a fail
    worker.run(until_idle=True)
    assert deliveries == [(1, None), (2, b'{"checkpoint":1}')]
    assert worker.counts == {"completed": 1, "deferred": 1, "failed": 0, "refused": 0}


def test_exception_backs_off_then_fails(queue: Queue, start_worker: Any) -> None:
    queue.create("poison")
    attempts: list[float] = []

    def handler(message: Message) -> None:
        attempts.append(time.monotonic())
        raise ValueError("bad input")

    worker = Worker(queue, handler, max_attempts=3, backoff=FAST_BACKOFF)
    start_worker(worker)
    wait_for(lambda: queue.message_archive(outcome="failed"), what="the message to be failed")
    [archived] = queue.message_archive(outcome="failed")
    assert archived.num_attempts == 3
    assert archived.error is not None and archived.error.startswith("ValueError: bad input")
    assert len(attempts) == 3
    # Backoff without jitter: at least 50 ms, then 100 ms between deliveries.
    assert attempts[1] - attempts[0] >= 0.045 and attempts[2] - attempts[1] >= 0.095
    wait_for(lambda: worker.counts["failed"] == 1)
    assert worker.counts["deferred"] == 2


def test_heartbeat_keeps_a_long_handler_locked(
    queue: Queue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    queue.create("slow")
    started, release = threading.Event(), threading.Event()

    def handler(message: Message) -> None:
        started.set()
        assert release.wait(20)

    worker = Worker(queue, handler, lock_ms=1000)  # heartbeats every ~333 ms
    start_worker(worker)
    assert started.wait(10)
    time.sleep(3.0)  # three lock periods: only heartbeats can keep it locked
    row = db.execute(
        "SELECT locked_until > now(), num_attempts FROM lonnymq.messages WHERE queue = %s",
        (queue.name,),
    ).fetchone()
    assert row == (True, 1)
    assert queue.dequeue(lock_ms=1000) == []  # not redelivered to anyone else
    release.set()
    wait_for(lambda: worker.counts["completed"] == 1, what="completion")
    assert worker.counts["refused"] == 0 and live_ids(db, queue.name) == set()


def test_without_heartbeats_the_lock_expires_and_is_fenced(queue: Queue, start_worker: Any) -> None:
    """The control for the test above: no heartbeat, so another dequeue takes the message
    over and the slow handler's late completion is refused."""
    queue.create("slow")
    started, release = threading.Event(), threading.Event()

    def handler(message: Message) -> None:
        started.set()
        assert release.wait(20)

    worker = Worker(queue, handler, lock_ms=300, heartbeat_ms=600_000)
    start_worker(worker)
    assert started.wait(10)
    time.sleep(0.6)
    [taken] = queue.dequeue(lock_ms=10_000)
    assert taken.recovered and taken.num_attempts == 2
    release.set()
    wait_for(lambda: worker.counts["refused"] == 1, what="the stale completion")
    assert worker.counts["completed"] == 0 and taken.complete() == "completed"


def test_listen_wakes_an_idle_worker_quickly(queue: Queue, start_worker: Any) -> None:
    picked = threading.Event()
    # A minute of fallback sleep: only the NOTIFY can explain a fast pick-up.
    worker = Worker(queue, lambda m: picked.set(), max_sleep_ms=60_000)
    start_worker(worker)
    assert worker.sleeping.wait(10), "worker never went idle"
    started = time.monotonic()
    queue.create("wake up")
    assert picked.wait(10)
    latency = time.monotonic() - started
    assert latency < 1.0, f"picked up after {latency:.3f}s"


def test_delayed_message_is_picked_up_when_due(queue: Queue, start_worker: Any) -> None:
    picked = threading.Event()
    worker = Worker(queue, lambda m: picked.set(), max_sleep_ms=60_000)
    start_worker(worker)
    assert worker.sleeping.wait(10)
    started = time.monotonic()
    queue.create("later", delay_ms=500)
    assert picked.wait(10)
    elapsed = time.monotonic() - started
    # Never early (database clock), and woken by wait_hint_ms, not the 60 s fallback.
    assert 0.45 <= elapsed < 3.0, f"picked up after {elapsed:.3f}s"


def test_stop_lets_the_running_handler_finish(queue: Queue, start_worker: Any) -> None:
    queue.create("job")
    started, release = threading.Event(), threading.Event()

    def handler(message: Message) -> None:
        started.set()
        assert release.wait(20)

    worker = Worker(queue, handler, shutdown_grace_ms=20_000)
    thread = start_worker(worker)
    assert started.wait(10)
    worker.stop()
    thread.join(0.3)
    assert thread.is_alive()  # still waiting for the handler
    release.set()
    thread.join(10)
    assert not thread.is_alive() and worker.counts["completed"] == 1


def test_shutdown_defers_what_cannot_finish(
    queue: Queue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    created = queue.create("stuck")
    started, release = threading.Event(), threading.Event()

    def handler(message: Message) -> None:
        started.set()
        release.wait(20)

    worker = Worker(queue, handler, shutdown_grace_ms=200)
    thread = start_worker(worker)
    assert started.wait(10)
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert locked_count(db, queue.name) == 0
    [again] = queue.dequeue(lock_ms=10_000)  # deferred for immediate redelivery
    assert (again.id, again.num_attempts) == (created.id, 2)
    release.set()


def test_dedup_key_creates_once_under_concurrency(queue: Queue) -> None:
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def create() -> None:
        barrier.wait()
        results.append(queue.create("tick", channel="p", dedup_key="only-one"))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status for r in results) == ["created"] + ["deduplicated"] * 7
    assert len({r.id for r in results}) == 1


def test_every_runs_one_message_under_many_workers(
    queue: Queue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    ticks: list[tuple[float, float]] = []
    running = [0]
    overlap = [0]
    guard = threading.Lock()

    def tick(message: Message) -> None:
        with guard:
            running[0] += 1
            overlap[0] = max(overlap[0], running[0])
        start = time.monotonic()
        time.sleep(0.02)
        with guard:
            running[0] -= 1
            ticks.append((start, time.monotonic()))

    workers = []
    for _ in range(6):
        worker = Worker(queue, lambda m: None, concurrency=2)
        worker.every(300, "tick", tick)
        workers.append(worker)
    for worker in workers:
        start_worker(worker)
    wait_for(lambda: len(ticks) >= 4, timeout=15, what="four ticks")
    rows = db.execute(
        "SELECT num_attempts FROM lonnymq.messages WHERE queue = %s "
        "AND channel = 'lonnymq.every:tick'",
        (queue.name,),
    ).fetchall()
    assert len(rows) == 1  # one durable message, however many workers created it
    assert overlap[0] == 1
    starts = sorted(s for s, _e in ticks)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.28, gaps  # deferred by the interval after each run


def test_lost_listen_connection_is_replaced(
    queue: Queue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    picked = threading.Event()
    worker = Worker(queue, lambda m: picked.set(), max_sleep_ms=60_000)
    start_worker(worker)
    assert worker.sleeping.wait(10)
    killed = db.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query = 'LISTEN lonnymq'"
    ).fetchone()
    assert killed is not None and killed[0] >= 1
    # The listener reconnects (after about a second) and listens again.
    wait_for(
        lambda: (
            db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query = 'LISTEN lonnymq'"
            ).fetchone()
            == (1,)
        ),
        what="a new LISTEN connection",
    )
    wait_for(worker.sleeping.is_set, what="the worker to sleep again")
    started = time.monotonic()
    queue.create("after reconnect")
    assert picked.wait(10)
    assert time.monotonic() - started < 1.0


def test_stop_before_run_is_not_lost(queue: Queue) -> None:
    queue.create("never handled")
    worker = Worker(queue, lambda m: None)
    worker.stop()
    worker.run()  # returns at once instead of running forever
    assert worker.counts["completed"] == 0


def flood(dsn: str, queue_name: str, stop: threading.Event) -> int:
    """Forged ``created`` notifications for the queue, as fast as one connection sends them
    (any role may NOTIFY); returns how many were sent."""
    payload = f'{{"queue": "{queue_name}", "event": "created"}}'
    sent = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("SELECT pg_notify('lonnymq', %s)", (payload,))
            sent += 1
    return sent


def test_forged_notifications_cause_a_bounded_number_of_dequeues(
    dsn: str, queue: Queue, start_worker: Any
) -> None:
    """A flood of forged NOTIFYs took an idle worker from 0 to 511 dequeue calls in 5 s.
    Wake-ups are hints: while they keep finding nothing, the next dequeue waits longer (up
    to a second); a real message is still picked up."""
    calls: list[float] = []
    real_dequeue = queue.dequeue

    def counting_dequeue(*args: Any, **kwargs: Any) -> list[Message]:
        calls.append(time.monotonic())
        return real_dequeue(*args, **kwargs)

    queue.dequeue = counting_dequeue  # type: ignore[method-assign]
    picked = threading.Event()
    worker = Worker(queue, lambda m: picked.set(), max_sleep_ms=60_000)
    start_worker(worker)
    assert worker.sleeping.wait(10), "worker never went idle"
    stop = threading.Event()
    sent: list[int] = []
    flooder = threading.Thread(target=lambda: sent.append(flood(dsn, queue.name, stop)))
    calls.clear()
    flooder.start()
    time.sleep(4.0)
    during = len(calls)
    queue.create("real work")
    assert picked.wait(10), "the real message was not picked up during the flood"
    stop.set()
    flooder.join(10)
    assert sent[0] > 200, sent  # it really was a flood
    # 20 ms doubling to 1 s between empty dequeues: about 8 in 4 s.
    assert during <= 12, f"{during} dequeues for {sent[0]} forged notifications"


def test_a_settle_lost_with_its_connection_is_reissued(
    dsn: str, queue: Queue, start_worker: Any
) -> None:
    """The handler's work is done but the connection the settle would use dies (here every
    idle backend of the database is terminated as the handler returns). The worker re-issues
    the settle on another connection with the same attempt number: the message is completed
    at once, not left locked until its 60 s lock runs out and then redelivered."""
    queue.create("job")
    calls: list[int] = []

    def handler(message: Message) -> None:
        calls.append(message.num_attempts)
        with psycopg.connect(dsn, autocommit=True) as killer:
            killed = killer.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' AND state = 'idle'"
            ).fetchone()
        assert killed is not None and killed[0] > 0

    worker = Worker(queue, handler, lock_ms=60_000, max_sleep_ms=200)
    start_worker(worker)

    def settled() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (queue.name,)
            ).fetchone()
        return row is not None and row[0] == 0

    wait_for(settled, timeout=15, what="the re-issued completion")
    assert calls == [1] and worker.counts["completed"] == 1
