"""AsyncQueue and AsyncWorker: the asyncio twins behave like Queue and Worker."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from lonnymq import AsyncMessage, AsyncQueue, AsyncWorker, Backoff, Retry

from .helpers import live_ids, locked_count

FAST_BACKOFF = Backoff(base_ms=50, factor=2.0, max_ms=1000, jitter=0.0)


async def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_every_call_and_status(aqueue: AsyncQueue) -> None:
    policy = await aqueue.channel_set("c", max_concurrency=4, max_size=10)
    assert policy.max_concurrency == 4 and policy.max_size == 10
    first = await aqueue.create({"n": 1}, channel="c", dedup_key="k")
    assert (await aqueue.create("dup", channel="c", dedup_key="k")).id == first.id
    batch = await aqueue.create_batch(["b", "c", "d", "e"], channel="c", idempotency_key="i")
    assert [r.status for r in batch] == ["created"] * 4
    # The key is scoped to the queue and the batch's channels: same channel, same batch.
    assert {
        r.status for r in await aqueue.create_batch(["x"], channel="c", idempotency_key="i")
    } == {"duplicate_batch"}
    assert await aqueue.wait_hint_ms() == 0
    m1, m2, m3, m4 = await aqueue.dequeue(lock_ms=10_000, max_messages=4)
    assert m1.json() == {"n": 1} and m1.num_attempts == 1
    assert await m1.heartbeat(20_000) == "extended"
    assert await aqueue.cancel(m1.id) == "locked"
    assert await m1.complete() == "completed"
    assert await m1.complete() == "not_found"
    assert await m2.defer(state="s", delay_ms=60_000) == "deferred"
    assert await m2.defer() == "state_invalid"
    assert await m3.fail("nope") == "failed"
    assert [r.status for r in await aqueue.complete_batch([m4])] == ["completed"]
    assert batch[3].id is not None
    assert await aqueue.cancel(batch[3].id) == "cancelled"
    assert m2.id is not None and await aqueue.cancel(m2.id) == "cancelled"
    [archived] = await aqueue.message_archive(outcome="failed")
    assert archived.error == "nope"
    assert (await aqueue.archive_requeue(archived.id)).status == "created"
    stats = await aqueue.queue_stats()
    assert (stats.ready, stats.locked) == (1, 0)
    assert [c.channel for c in await aqueue.channel_stats()] == ["c"]
    assert await aqueue.archive_prune(timedelta(days=1)) == 0
    assert await aqueue.channel_delete("c") == "not_empty"
    assert await aqueue.verify() == []


async def test_conn_joins_the_callers_transaction(dsn: str, aqueue: AsyncQueue) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await aqueue.create("rolled back", conn=conn)
        await conn.rollback()
        async with conn.transaction():
            await aqueue.create("kept", conn=conn)
            assert await aqueue.dequeue(lock_ms=1000) == []  # not committed yet
    [m] = await aqueue.dequeue(lock_ms=10_000)
    assert m.content == b"kept"


async def test_worker_retries_backs_off_and_fails(aqueue: AsyncQueue) -> None:
    await aqueue.create("ok")
    await aqueue.create("retry")
    await aqueue.create("poison")
    seen: list[tuple[str, int]] = []

    async def handler(message: AsyncMessage) -> None:
        seen.append((message.text(), message.num_attempts))
        if message.text() == "retry" and message.num_attempts == 1:
            raise Retry(delay_ms=0, state="step")
        if message.text() == "poison":
            raise RuntimeError("always")

    worker = AsyncWorker(
        aqueue, handler, concurrency=3, max_attempts=2, backoff=FAST_BACKOFF, handle_signals=False
    )
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: worker.counts["failed"] == 1 and worker.counts["completed"] == 2)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert sorted(seen) == [("ok", 1), ("poison", 1), ("poison", 2), ("retry", 1), ("retry", 2)]
    [failed] = await aqueue.message_archive(outcome="failed")
    assert failed.error is not None and failed.error.startswith("RuntimeError: always")


async def test_until_idle(aqueue: AsyncQueue) -> None:
    await aqueue.create_batch([str(n) for n in range(5)], channels=["a", "b", "a", "b", None])
    done: list[str] = []

    async def handler(message: AsyncMessage) -> None:
        done.append(message.text())

    await AsyncWorker(aqueue, handler, concurrency=2, handle_signals=False).run(until_idle=True)
    assert sorted(done) == ["0", "1", "2", "3", "4"]


async def test_listen_wakeup_and_heartbeat(aqueue: AsyncQueue, db: psycopg.Connection[Any]) -> None:
    picked = asyncio.Event()
    release = asyncio.Event()

    async def handler(message: AsyncMessage) -> None:
        picked.set()
        await release.wait()

    worker = AsyncWorker(aqueue, handler, lock_ms=1000, max_sleep_ms=60_000, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await wait_until(worker.sleeping.is_set)
    started = time.monotonic()
    await aqueue.create("wake")
    await asyncio.wait_for(picked.wait(), 10)
    assert time.monotonic() - started < 1.0  # NOTIFY, not the 60 s fallback
    await asyncio.sleep(3.0)  # three lock periods: only heartbeats can keep the lock
    assert locked_count(db, aqueue.name) == 1
    assert await aqueue.dequeue(lock_ms=1000) == []
    release.set()
    await wait_until(lambda: worker.counts["completed"] == 1)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert worker.counts["refused"] == 0 and live_ids(db, aqueue.name) == set()


async def test_stop_from_another_thread_defers_after_grace(
    aqueue: AsyncQueue, db: psycopg.Connection[Any]
) -> None:
    created = await aqueue.create("stuck")
    started = asyncio.Event()

    async def handler(message: AsyncMessage) -> None:
        started.set()
        await asyncio.sleep(60)

    worker = AsyncWorker(aqueue, handler, shutdown_grace_ms=200, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    threading.Thread(target=worker.stop).start()
    await asyncio.wait_for(task, 5)
    assert locked_count(db, aqueue.name) == 0
    [again] = await aqueue.dequeue(lock_ms=10_000)
    assert (again.id, again.num_attempts) == (created.id, 2)


async def test_every_once_under_many_workers(
    aqueue: AsyncQueue, db: psycopg.Connection[Any]
) -> None:
    ticks: list[float] = []

    async def tick(message: AsyncMessage) -> None:
        ticks.append(time.monotonic())

    async def nothing(message: AsyncMessage) -> None:
        return None

    workers = [AsyncWorker(aqueue, nothing, handle_signals=False) for _ in range(5)]
    for worker in workers:
        worker.every(timedelta(milliseconds=250), "tick", tick)
    tasks = [asyncio.create_task(w.run()) for w in workers]
    await wait_until(lambda: len(ticks) >= 3, timeout=15)
    for worker in workers:
        worker.stop()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    rows = db.execute(
        "SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (aqueue.name,)
    ).fetchone()
    assert rows == (1,)
    assert min(b - a for a, b in itertools.pairwise(ticks)) >= 0.23


@pytest.mark.parametrize("interval", [0, -5])
def test_every_rejects_non_positive_intervals(aqueue: AsyncQueue, interval: int) -> None:
    worker = AsyncWorker(aqueue, lambda m: asyncio.sleep(0), handle_signals=False)
    with pytest.raises(ValueError):
        worker.every(interval, "x", lambda m: asyncio.sleep(0))


async def test_forged_notifications_cause_a_bounded_number_of_dequeues(
    dsn: str, aqueue: AsyncQueue
) -> None:
    """As for Worker (test_worker.py): a flood of forged NOTIFYs for the queue costs an idle
    AsyncWorker about a dequeue a second, and real work is still picked up."""
    calls: list[float] = []
    real_dequeue = aqueue.dequeue

    async def counting_dequeue(*args: Any, **kwargs: Any) -> list[AsyncMessage]:
        calls.append(time.monotonic())
        return await real_dequeue(*args, **kwargs)

    aqueue.dequeue = counting_dequeue  # type: ignore[method-assign]
    picked = asyncio.Event()

    async def handler(message: AsyncMessage) -> None:
        picked.set()

    worker = AsyncWorker(aqueue, handler, max_sleep_ms=60_000, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await wait_until(worker.sleeping.is_set)
    stop = threading.Event()
    payload = f'{{"queue": "{aqueue.name}", "event": "created"}}'

    def flood() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute("SELECT pg_notify('lonnymq', %s)", (payload,))

    flooder = threading.Thread(target=flood)
    calls.clear()
    flooder.start()
    await asyncio.sleep(4.0)
    during = len(calls)
    await aqueue.create("real work")
    await asyncio.wait_for(picked.wait(), 10)
    stop.set()
    flooder.join(10)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert during <= 12, f"{during} dequeues in 4 s of forged notifications"


async def test_a_settle_lost_with_its_connection_is_reissued(
    dsn: str, aqueue: AsyncQueue, db: psycopg.Connection[Any]
) -> None:
    """As for Worker (test_worker.py): the settle's connection dies as the handler returns;
    the AsyncWorker re-issues it with the same attempt number instead of leaving the message
    locked for its 60 s lock."""
    await aqueue.create("job")
    calls: list[int] = []

    async def handler(message: AsyncMessage) -> None:
        calls.append(message.num_attempts)
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND pid <> %s AND backend_type = 'client backend' AND state = 'idle'",
                (db.info.backend_pid,),
            )

    worker = AsyncWorker(aqueue, handler, lock_ms=60_000, max_sleep_ms=200, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: live_ids(db, aqueue.name) == set(), timeout=15)
    worker.stop()
    await asyncio.wait_for(task, 15)
    assert calls == [1] and worker.counts["completed"] == 1


async def test_worker_reports_its_totals(dsn: str, aqueue: AsyncQueue) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute("LISTEN lonnymq_stats")
        for i in range(3):
            await aqueue.create(b"ok" if i else b"bad")

        async def handle(message: AsyncMessage) -> None:
            if message.content == b"bad":
                raise RuntimeError("no")

        await AsyncWorker(aqueue, handle, max_attempts=1).run(until_idle=True)
        # The last totals are sent when the worker stops, whatever the interval.
        reports = [json.loads(n.payload) async for n in listener.notifies(timeout=5, stop_after=1)]
    assert reports and reports[-1]["queue"] == aqueue.name
    assert (reports[-1]["completed"], reports[-1]["failed"]) == (2, 1)
