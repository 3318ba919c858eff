"""Batched fetch and batched settles in Worker and AsyncWorker: what is sent, and that
nothing is lost or settled twice — not with many concurrent workers, not at shutdown, not
when a flush fails, not when a handler settles its message in its own transaction."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest

from lonnymq import (
    AsyncMessage,
    AsyncQueue,
    AsyncWorker,
    Backoff,
    CompleteResult,
    CreateResult,
    Message,
    Queue,
    Retry,
    Worker,
)
from lonnymq._outcome import COMPLETE, Outcome
from lonnymq._settle import SettleBuffer

from .helpers import live_ids, locked_count, wait_for

FAST_BACKOFF = Backoff(base_ms=10, factor=1.0, max_ms=10, jitter=0.0)


class SpyQueue(Queue):
    """A real Queue that records the calls a worker makes (and can fail some on purpose)."""

    def __init__(self, dsn: str, name: str) -> None:
        super().__init__(dsn, name, pool_size=12)
        self.guard = threading.Lock()
        self.dequeued: list[int] = []  # messages per dequeue that returned any
        self.batches: list[list[int]] = []  # ids per complete_batch
        self.singles: list[int] = []  # ids completed one by one
        self.fail_batches = 0  # complete_batch calls still to fail before reaching the server

    def dequeue(
        self, *, lock_ms: int, max_messages: int = 1, conn: psycopg.Connection[Any] | None = None
    ) -> list[Message]:
        got = super().dequeue(lock_ms=lock_ms, max_messages=max_messages, conn=conn)
        if got:
            with self.guard:
                self.dequeued.append(len(got))
        return got

    def complete_batch(
        self, messages: Sequence[Message], *, conn: psycopg.Connection[Any] | None = None
    ) -> list[CompleteResult]:
        with self.guard:
            if self.fail_batches:
                self.fail_batches -= 1
                raise psycopg.OperationalError("injected: connection lost")
            self.batches.append([m.id for m in messages])
        return super().complete_batch(messages, conn=conn)

    def complete(
        self, id: int, num_attempts: int, *, conn: psycopg.Connection[Any] | None = None
    ) -> str:
        with self.guard:
            self.singles.append(id)
        return super().complete(id, num_attempts, conn=conn)


@pytest.fixture
def spy(dsn: str, queue_name: str) -> Iterator[SpyQueue]:
    q = SpyQueue(dsn, queue_name)
    try:
        yield q
    finally:
        q.close()


def ids(results: Sequence[CreateResult]) -> list[int]:
    assert all(r.id is not None for r in results)
    return [r.id for r in results if r.id is not None]


def archived_completed(db: psycopg.Connection[Any], queue: str) -> list[int]:
    rows = db.execute(
        "SELECT message_id FROM lonnymq.message_archive WHERE queue = %s AND outcome = 'completed'",
        (queue,),
    ).fetchall()
    return [int(r[0]) for r in rows]


# -- the settle buffer on its own ----------------------------------------------------------


def test_settle_buffer_flushes_on_size_or_age() -> None:
    buffer: SettleBuffer[str] = SettleBuffer(interval_ms=100, batch_size=3)
    assert buffer.wait_s(0.0) is None  # nothing waits: nothing to flush
    buffer.add("a", COMPLETE, now=10.0)
    assert buffer.wait_s(10.04) == pytest.approx(0.06)  # due 100 ms after the oldest
    buffer.add("b", Outcome("defer", delay_ms=5), now=10.05)
    assert buffer.wait_s(10.10) == 0.0
    buffer.add("c", COMPLETE, now=10.06)
    assert buffer.wait_s(10.06) == 0.0  # full batch: due at once
    buffer.add("d", COMPLETE, now=10.07)
    assert [s.message for s in buffer.take()] == ["a", "b", "c"]  # oldest first, at most 3
    assert buffer.wait_s(10.07) == pytest.approx(0.1)  # now timed from "d", the oldest left
    failed = buffer.take()
    buffer.add("e", COMPLETE, now=10.5)
    buffer.put_back(failed)  # a flush of "d" failed: "d" goes first again
    assert [s.message for s in buffer.take()] == ["d", "e"] and len(buffer) == 0


@pytest.mark.parametrize(("interval_ms", "batch_size"), [(-1, 1), (1001, 1), (0, 0), (0, 1001)])
def test_settle_options_are_bounded(queue: Queue, interval_ms: int, batch_size: int) -> None:
    with pytest.raises(ValueError, match="settle_"):
        Worker(queue, lambda m: None, settle_interval_ms=interval_ms, settle_batch_size=batch_size)
    with pytest.raises(ValueError, match="settle_"):
        AsyncWorker(
            AsyncQueue(queue.conninfo, queue.name),
            _noop,
            settle_interval_ms=interval_ms,
            settle_batch_size=batch_size,
        )


async def _noop(message: AsyncMessage) -> None:
    return None


# -- batched fetch and flush ----------------------------------------------------------------


def test_completes_travel_in_batches(
    spy: SpyQueue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    created = set(ids(spy.create_batch([str(n) for n in range(100)], channel="c")))
    # Ten handlers that meet at a barrier: every round fills all ten slots at once, so ten
    # outcomes arrive together and fill one batch (the interval is far longer).
    barrier = threading.Barrier(10)
    seen: list[int] = []
    guard = threading.Lock()

    def handler(message: Message) -> None:
        barrier.wait(timeout=30)
        with guard:
            seen.append(message.id)

    worker = Worker(spy, handler, concurrency=10, settle_interval_ms=1000, settle_batch_size=10)
    worker.run(until_idle=True)
    assert sorted(seen) == sorted(created)
    assert spy.singles == []
    assert sorted(i for batch in spy.batches for i in batch) == sorted(created)
    assert max(len(b) for b in spy.batches) <= 10
    # 100 completes in about ten statements, not a hundred.
    assert len(spy.batches) <= 12, [len(b) for b in spy.batches]
    # Fetches fill every free slot in one call: ten dequeues of ten would do; never one each.
    assert len(spy.dequeued) < 50 and max(spy.dequeued) == 10
    assert worker.counts == {"completed": 100, "deferred": 0, "failed": 0, "refused": 0}
    assert live_ids(db, spy.name) == set()


def test_many_workers_settle_everything_exactly_once(
    spy: SpyQueue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    """Four workers of four slots on twenty channels, two of them limited to one in flight,
    every seventh message failing once: each message is handled to completion exactly once
    (completed messages are archived, so the archive counts them) and the limits hold while
    settles wait in buffers."""
    for n in range(20):
        spy.channel_set(f"c{n}", retain_completed=True, max_concurrency=1 if n < 2 else None)
    channels = [f"c{n % 20}" for n in range(600)]
    created = ids(spy.create_batch([str(n) for n in range(600)], channels=channels))
    guard = threading.Lock()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    succeeded: list[int] = []

    def handler(message: Message) -> None:
        channel = message.channel or ""
        with guard:
            running[channel] = running.get(channel, 0) + 1
            peak[channel] = max(peak.get(channel, 0), running[channel])
        try:
            if message.id % 7 == 0 and message.num_attempts == 1:
                raise RuntimeError("fails once")
            with guard:
                succeeded.append(message.id)
        finally:
            with guard:
                running[channel] -= 1

    workers = [Worker(spy, handler, concurrency=4, backoff=FAST_BACKOFF) for _ in range(4)]
    for worker in workers:
        start_worker(worker)
    wait_for(lambda: live_ids(db, spy.name) == set(), timeout=90, what="every message settled")
    wait_for(lambda: all(w.in_flight == 0 for w in workers), what="every flush recorded")
    assert sorted(succeeded) == sorted(created)  # each handled to success exactly once
    assert sorted(archived_completed(db, spy.name)) == sorted(created)
    assert peak["c0"] == 1 and peak["c1"] == 1
    assert sum(w.counts["completed"] for w in workers) == len(created)
    assert sum(w.counts["deferred"] for w in workers) == sum(1 for i in created if i % 7 == 0)
    assert all(w.counts["refused"] == 0 and w.counts["failed"] == 0 for w in workers)
    assert spy.singles == []
    assert spy.verify() == []


def test_a_failed_flush_is_retried_without_loss(spy: SpyQueue, db: psycopg.Connection[Any]) -> None:
    created = set(ids(spy.create_batch([str(n) for n in range(20)])))
    spy.fail_batches = 2
    worker = Worker(spy, lambda m: None, concurrency=4)
    worker.run(until_idle=True)
    assert spy.fail_batches == 0  # both failures happened
    assert sorted(i for b in spy.batches for i in b) == sorted(created)  # each sent once
    assert worker.counts["completed"] == 20 and worker.counts["refused"] == 0
    assert live_ids(db, spy.name) == set()


def test_run_again_after_until_idle_still_flushes(
    spy: SpyQueue, db: psycopg.Connection[Any]
) -> None:
    worker = Worker(spy, lambda m: None, concurrency=2)
    spy.create_batch(["a", "b", "c"])
    worker.run(until_idle=True)
    spy.create_batch(["d", "e", "f"])
    worker.run(until_idle=True)  # returns only once the second batch was flushed too
    assert worker.counts["completed"] == 6 and live_ids(db, spy.name) == set()


def test_finished_work_is_flushed_before_a_recovered_message_runs(
    spy: SpyQueue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    """A recovered message may be a poison that kills the worker: whatever finished before
    it must be committed before it runs, or it would be delivered again (and a channel's
    max_attempts could dead-letter innocent work)."""
    [suspect] = ids([spy.create("suspect", channel="c")])
    [taken] = spy.dequeue(lock_ms=300)  # held by a worker that dies: the lock expires
    assert taken.id == suspect
    [innocent] = ids([spy.create("innocent", channel="c")])
    seen_live: list[set[int]] = []

    def handler(message: Message) -> None:
        if message.recovered:
            seen_live.append(live_ids(db, spy.name))

    worker = Worker(spy, handler, settle_batch_size=1000)
    worker._settles.interval_s = 3600.0  # no timed flush: only the rule can flush
    start_worker(worker)
    wait_for(lambda: seen_live, what="the recovered message to run")
    assert seen_live == [{suspect}]  # the innocent one was completed first
    assert spy.batches[0] == [innocent]


class FlushBeforeIdleCheck(SpyQueue):
    """Lets the worker's buffered settles reach the server after an empty dequeue and its
    wait hint, just before the worker decides whether it is idle."""

    worker: Worker | None = None

    @contextmanager
    def _waiting(self) -> Iterator[tuple[int | None, psycopg.Connection[Any]]]:
        with super()._waiting() as (hint, conn):
            worker = self.worker
            if worker is not None:
                wait_for(lambda: worker.in_flight == 0, what="the buffered settles to flush")
            yield hint, conn


def test_until_idle_sees_a_defer_flushed_after_its_empty_dequeue(
    dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    # The dequeue finds nothing while the deferred message is still locked, then the defer
    # is flushed: the message is ready again, though neither the dequeue nor the hint saw
    # it. Idle would be a lie (and the deferred message left behind).
    q = FlushBeforeIdleCheck(dsn, queue_name)
    try:
        q.create_batch(["a", "b"])
        deferred: list[int] = []

        def handler(message: Message) -> None:
            if not deferred:
                deferred.append(message.id)
                raise Retry(delay_ms=0)

        worker = Worker(q, handler, concurrency=1)
        worker._settles.interval_s = 0.5  # the settles wait: the empty dequeue comes first
        q.worker = worker
        worker.run(until_idle=True)
        assert worker.counts == {"completed": 2, "deferred": 1, "failed": 0, "refused": 0}
        assert live_ids(db, queue_name) == set()
    finally:
        q.close()


def test_a_handler_raising_system_exit_keeps_its_slot(
    spy: SpyQueue, db: psycopg.Connection[Any]
) -> None:
    spy.create_batch(["a", "b", "c"])
    exits: list[int] = []

    def handler(message: Message) -> None:
        if message.num_attempts == 1 and not exits:
            exits.append(message.id)
            raise SystemExit(1)

    worker = Worker(spy, handler, concurrency=1)  # one slot: losing it would stop everything
    worker.run(until_idle=True)
    assert worker.counts == {"completed": 3, "deferred": 1, "failed": 0, "refused": 0}
    assert live_ids(db, spy.name) == set()


# -- a handler that settles in its own transaction ---------------------------------------


@pytest.fixture
def orders(db: psycopg.Connection[Any]) -> str:
    db.execute("CREATE TABLE IF NOT EXISTS pytest_worker_orders (id bigint PRIMARY KEY)")
    db.execute("TRUNCATE pytest_worker_orders")
    return "pytest_worker_orders"


def test_handler_completes_in_its_own_transaction(
    dsn: str, spy: SpyQueue, db: psycopg.Connection[Any], orders: str
) -> None:
    created = set(ids(spy.create_batch([str(n) for n in range(10)])))
    failed_once: set[int] = set()
    guard = threading.Lock()

    def handler(message: Message) -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            conn.execute("INSERT INTO pytest_worker_orders VALUES (%s)", (message.id,))
            assert message.complete(conn=conn) == "completed"
            with guard:
                roll_back = message.id not in failed_once and len(failed_once) < 3
                if roll_back:
                    failed_once.add(message.id)
            if roll_back:
                raise RuntimeError("after the complete, before the commit")  # rolls back

    worker = Worker(spy, handler, concurrency=3, backoff=FAST_BACKOFF)
    worker.run(until_idle=True)
    # The order and the complete committed together, once per message; the three rolled
    # back were retried by the worker and completed on their second delivery.
    assert {int(r[0]) for r in db.execute("SELECT id FROM pytest_worker_orders")} == created
    assert live_ids(db, spy.name) == set()
    assert spy.batches == []  # the worker sent no complete of its own
    assert worker.counts == {"completed": 10, "deferred": 3, "failed": 0, "refused": 0}


# -- shutdown ------------------------------------------------------------------------------


def test_shutdown_flushes_buffered_settles(
    spy: SpyQueue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    created = set(ids(spy.create_batch([str(n) for n in range(5)])))
    done = threading.Semaphore(0)
    worker = Worker(spy, lambda m: done.release(), concurrency=5, settle_batch_size=1000)
    worker._settles.interval_s = 3600.0  # only the shutdown can flush them
    thread = start_worker(worker)
    for _ in range(5):
        assert done.acquire(timeout=10)
    wait_for(lambda: len(worker._settles) == 5, what="five settles buffered")
    assert locked_count(db, spy.name) == 5 and spy.batches == []
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert [sorted(b) for b in spy.batches] == [sorted(created)]
    assert live_ids(db, spy.name) == set() and worker.counts["completed"] == 5
    assert worker.in_flight == 0


def test_shutdown_releases_unstarted_messages_at_once(
    spy: SpyQueue, db: psycopg.Connection[Any], start_worker: Any
) -> None:
    [first] = ids([spy.create("running")])
    started, release = threading.Event(), threading.Event()

    def handler(message: Message) -> None:
        started.set()
        assert release.wait(20)

    worker = Worker(spy, handler, concurrency=1, shutdown_grace_ms=20_000)
    thread = start_worker(worker)
    assert started.wait(10)
    # A message fetched while every slot is busy waits in the buffer, unstarted.
    spy.create("buffered")
    [waiting] = spy.dequeue(lock_ms=30_000)
    worker._hand_out([waiting])
    worker.stop()
    # Released long before the 20 s grace of the running handler ends: ready again, unlocked.
    wait_for(lambda: locked_count(db, spy.name) == 1, what="the buffered message released")
    assert thread.is_alive()
    [again] = spy.dequeue(lock_ms=30_000)
    assert again.id == waiting.id and again.num_attempts == 2
    assert again.complete() == "completed"
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert live_ids(db, spy.name) == set() and worker.counts["completed"] == 1
    assert spy.batches == [[first]]


# -- asyncio -------------------------------------------------------------------------------


class AsyncSpyQueue(AsyncQueue):
    def __init__(self, dsn: str, name: str) -> None:
        super().__init__(dsn, name, pool_size=12)
        self.batches: list[list[int]] = []

    async def complete_batch(
        self, messages: Sequence[AsyncMessage], *, conn: Any = None
    ) -> list[CompleteResult]:
        self.batches.append([m.id for m in messages])
        return await super().complete_batch(messages, conn=conn)


async def test_async_worker_batches_and_leaves_self_settled_alone(
    dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    aspy = AsyncSpyQueue(dsn, queue_name)
    async with aspy:
        created = ids(await aspy.create_batch([str(n) for n in range(60)]))
        self_settled = set(created[:10])

        async def handler(message: AsyncMessage) -> None:
            if message.id in self_settled:
                assert await message.complete() == "completed"

        worker = AsyncWorker(aspy, handler, concurrency=8, settle_batch_size=20)
        await worker.run(until_idle=True)
        sent = [i for b in aspy.batches for i in b]
        assert sorted(sent) == sorted(set(created) - self_settled)  # each once, not those
        assert len(aspy.batches) < 50 and max(len(b) for b in aspy.batches) <= 20
        assert worker.counts == {"completed": 60, "deferred": 0, "failed": 0, "refused": 0}
        assert live_ids(db, queue_name) == set() and worker.in_flight == 0


async def test_an_async_handler_raising_system_exit_keeps_its_slot(
    aqueue: AsyncQueue, db: psycopg.Connection[Any]
) -> None:
    # As for Worker: a slot task outlives its handler's SystemExit (which asyncio would
    # otherwise carry out of the event loop).
    await aqueue.create_batch(["a", "b", "c"])
    exits: list[int] = []

    async def handler(message: AsyncMessage) -> None:
        if message.num_attempts == 1 and not exits:
            exits.append(message.id)
            raise SystemExit(1)

    worker = AsyncWorker(aqueue, handler, concurrency=1, handle_signals=False)
    await worker.run(until_idle=True)
    assert worker.counts == {"completed": 3, "deferred": 1, "failed": 0, "refused": 0}
    assert live_ids(db, aqueue.name) == set()


class AsyncFlushBeforeIdleCheck(AsyncQueue):
    """FlushBeforeIdleCheck for the AsyncWorker."""

    worker: AsyncWorker | None = None

    @asynccontextmanager
    async def _waiting(self) -> AsyncIterator[tuple[int | None, psycopg.AsyncConnection[Any]]]:
        async with super()._waiting() as (hint, conn):
            deadline = time.monotonic() + 10
            while self.worker is not None and self.worker.in_flight:
                assert time.monotonic() < deadline, "the buffered settles never flushed"
                await asyncio.sleep(0.02)
            yield hint, conn


async def test_async_until_idle_sees_a_defer_flushed_after_its_empty_dequeue(
    dsn: str, queue_name: str, db: psycopg.Connection[Any]
) -> None:
    q = AsyncFlushBeforeIdleCheck(dsn, queue_name, pool_size=12)
    async with q:
        await q.create_batch(["a", "b"])
        deferred: list[int] = []

        async def handler(message: AsyncMessage) -> None:
            if not deferred:
                deferred.append(message.id)
                raise Retry(delay_ms=0)

        worker = AsyncWorker(q, handler, concurrency=1)
        worker._settles.interval_s = 0.5  # the settles wait: the empty dequeue comes first
        q.worker = worker
        await worker.run(until_idle=True)
        assert worker.counts == {"completed": 2, "deferred": 1, "failed": 0, "refused": 0}
        assert live_ids(db, queue_name) == set()
