"""Recovery after lost connections (issue 11, "Recover as fast as the peers").

- A call through the queue's pool is one statement in its own transaction (autocommit):
  no BEGIN round trip before it, no connection left idle in transaction around it.
- The pool a queue creates retries a refused connection within a second, never after the
  growing 2 s, 4 s, 8 s... of psycopg_pool's default (a TCP proxy plays the server away).
- A worker retries a dequeue that lost its connection at once, and reconnects its LISTEN
  connection at once, instead of pausing a fixed second.
- A sleeping worker whose waiting announcement (wait_begin's session lock) dies with its
  connection announces again at once: producers notify only while someone waits.

The bounds below are the retry policy itself (at most ``RECONNECT_MAX_S`` between tries,
the first retry immediate) checked with wide margins; how fast recovery is end to end is
measured by test/system/test_recovery.py, not asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from lonnymq import AsyncQueue, AsyncWorker, Queue, Worker
from lonnymq._pool import RECONNECT_MAX_S

from .conftest import ADMIN_DSN, TEST_DATABASE
from .helpers import wait_for


class Proxy(threading.Thread):
    """A TCP proxy in front of the test server that can play the server being away: while
    down, it accepts each connection attempt, notes when, and closes it at once."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="proxy")
        params = conninfo.conninfo_to_dict(ADMIN_DSN)
        self.upstream = (str(params.get("host", "127.0.0.1")), int(str(params.get("port", 5432))))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = False
        self.refused: list[float] = []  # monotonic times of attempts made while down
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def dsn(self) -> str:
        return conninfo.make_conninfo(
            ADMIN_DSN, host="127.0.0.1", port=self.port, dbname=TEST_DATABASE
        )

    def run(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                self.refused.append(time.monotonic())
                client.close()
                continue
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def go_down(self) -> None:
        """Every open connection is cut and new ones are refused."""
        self.down = True
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self._open.clear()

    def close(self) -> None:
        self.go_down()
        self.listener.close()


@pytest.fixture
def proxy(dsn: str) -> Iterator[Proxy]:
    p = Proxy()
    p.start()
    yield p
    p.close()


def max_gap(times: list[float]) -> float:
    return max(b - a for a, b in itertools.pairwise(times))


# -- no transaction around a call --------------------------------------------------------------

# True when the statement's transaction began with the statement itself: no BEGIN before it.
OWN_TRANSACTION = "SELECT pg_catalog.now() = pg_catalog.statement_timestamp()"


def test_a_call_is_its_own_transaction(queue: Queue) -> None:
    assert queue._scalar(OWN_TRANSACTION, (), None) is True
    with queue.pool.connection() as conn:  # the pool's own setting is left as it was
        assert conn.autocommit is False


async def test_an_async_call_is_its_own_transaction(aqueue: AsyncQueue) -> None:
    assert await aqueue._scalar(OWN_TRANSACTION, (), None) is True
    async with aqueue.pool.connection() as conn:
        assert conn.autocommit is False


# -- the pool reconnects promptly ---------------------------------------------------------------

DOWN_S = 8.0


def test_the_pool_retries_a_refused_connection_within_a_second(proxy: Proxy) -> None:
    with Queue(proxy.dsn(), "reconnect", pool_size=2) as queue:
        assert queue.wait_hint_ms() is None
        proxy.go_down()
        with pytest.raises(psycopg.OperationalError):
            queue.wait_hint_ms()  # on the cut connection: the pool replaces it
        time.sleep(DOWN_S)
        tries = list(proxy.refused)
        proxy.down = False
        # Works again once the server is back (after each cut connection still idle in the
        # pool has been found out by a failing call: a worker retries at once).
        for _ in range(2):
            with contextlib.suppress(psycopg.OperationalError):
                queue.wait_hint_ms()
        assert queue.wait_hint_ms() is None
    # psycopg_pool's default: tries at 0, 1, 3, 7 s (gaps doubling from 1 s).
    assert len(tries) >= DOWN_S / RECONNECT_MAX_S - 1, tries
    assert max_gap(tries) < 2 * RECONNECT_MAX_S, tries


async def test_the_async_pool_retries_a_refused_connection_within_a_second(
    proxy: Proxy,
) -> None:
    async with AsyncQueue(proxy.dsn(), "reconnect", pool_size=2) as queue:
        assert await queue.wait_hint_ms() is None
        proxy.go_down()
        with pytest.raises(psycopg.OperationalError):
            await queue.wait_hint_ms()
        await asyncio.sleep(DOWN_S)
        tries = list(proxy.refused)
        proxy.down = False
        for _ in range(2):
            with contextlib.suppress(psycopg.OperationalError):
                await queue.wait_hint_ms()
        assert await queue.wait_hint_ms() is None
    assert len(tries) >= DOWN_S / RECONNECT_MAX_S - 1, tries
    assert max_gap(tries) < 2 * RECONNECT_MAX_S, tries


# -- workers retry at once ------------------------------------------------------------------------


class FailingOnce:
    """Wraps ``queue.dequeue``: the first call after ``arm()`` raises OperationalError (as on
    a pooled connection killed while idle); records when each call was made."""

    def __init__(self, dequeue: Any) -> None:
        self.dequeue = dequeue
        self.armed = False
        self.failed_at: float | None = None
        self.retried_at: float | None = None

    def arm(self) -> None:
        self.armed = True

    def note(self) -> None:
        if self.failed_at is not None and self.retried_at is None:
            self.retried_at = time.monotonic()
        if self.armed:
            self.armed = False
            self.failed_at = time.monotonic()
            raise psycopg.OperationalError("terminating connection (simulated)")

    def sync(self, **kwargs: Any) -> Any:
        self.note()
        return self.dequeue(**kwargs)

    async def aio(self, **kwargs: Any) -> Any:
        self.note()
        return await self.dequeue(**kwargs)

    def retry_gap(self) -> float:
        assert self.failed_at is not None and self.retried_at is not None
        return self.retried_at - self.failed_at


# The old fixed pause was 1 s; the first retry now comes at once.
FIRST_RETRY_BOUND_S = 0.5


def test_a_worker_retries_a_failed_dequeue_at_once(queue: Queue, start_worker: Any) -> None:
    spy = FailingOnce(queue.dequeue)
    queue.dequeue = spy.sync  # type: ignore[method-assign]
    worker = Worker(queue, lambda m: None, max_sleep_ms=50)
    start_worker(worker)
    wait_for(worker.sleeping.is_set, timeout=10, what="the worker to sleep")
    spy.arm()
    wait_for(lambda: spy.retried_at is not None, timeout=10, what="the retry")
    assert spy.retry_gap() < FIRST_RETRY_BOUND_S


async def test_an_async_worker_retries_a_failed_dequeue_at_once(aqueue: AsyncQueue) -> None:
    spy = FailingOnce(aqueue.dequeue)
    aqueue.dequeue = spy.aio  # type: ignore[method-assign]
    worker = AsyncWorker(aqueue, _async_noop, max_sleep_ms=50)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            if worker.sleeping.is_set():
                break
            await asyncio.sleep(0.05)
        spy.arm()
        for _ in range(200):
            if spy.retried_at is not None:
                break
            await asyncio.sleep(0.05)
        assert spy.retry_gap() < FIRST_RETRY_BOUND_S
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


async def _async_noop(message: Any) -> None:
    return None


def listen_backends(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND query = 'LISTEN lonnymq'"
            )
        ]


def relisten_gap(dsn: str) -> float:
    """Terminates the one LISTEN backend; seconds until a new one has listened."""
    (old,) = listen_backends(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (old,))
    killed = time.monotonic()
    while not [p for p in listen_backends(dsn) if p != old]:
        assert time.monotonic() < killed + 10, "no new LISTEN"
        time.sleep(0.02)
    return time.monotonic() - killed


def test_a_worker_listens_again_at_once(dsn: str, queue: Queue, start_worker: Any) -> None:
    worker = Worker(queue, lambda m: None, max_sleep_ms=50)
    start_worker(worker)
    wait_for(lambda: len(listen_backends(dsn)) == 1, 10, "the worker to LISTEN")
    assert relisten_gap(dsn) < FIRST_RETRY_BOUND_S


async def test_an_async_worker_listens_again_at_once(dsn: str, aqueue: AsyncQueue) -> None:
    worker = AsyncWorker(aqueue, _async_noop, max_sleep_ms=50)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.to_thread(
            wait_for, lambda: len(listen_backends(dsn)) == 1, 10, "the worker to LISTEN"
        )
        assert await asyncio.to_thread(relisten_gap, dsn) < FIRST_RETRY_BOUND_S
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


# -- a sleeping worker announces itself again ------------------------------------------------------


def announcing_backends(dsn: str, queue: str) -> list[int]:
    """Backends holding a waiting announcement (wait_begin's session lock) of ``queue``'s slot."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND objsubid = 2 AND classid = lonnymq._waiting_lock_class()::oid"
                " AND objid = lonnymq._wait_slot(%s)::oid",
                (queue,),
            )
        ]


def kill_the_announcement(dsn: str, queue: str) -> None:
    """Terminates the backend that holds the announcement of a sleeping worker; returns once
    another backend announces (the worker noticed and announced again)."""
    wait_for(lambda: len(announcing_backends(dsn, queue)) == 1, 10, "the worker to announce")
    (old,) = announcing_backends(dsn, queue)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (old,))
    # The worker sleeps up to a minute: before the fix it announced again only then, and a
    # producer, seeing no waiter, sent no NOTIFY meanwhile.
    wait_for(
        lambda: [p for p in announcing_backends(dsn, queue) if p != old],
        15,
        "a new announcement",
    )


def test_a_worker_announces_again_when_its_waiting_connection_dies(
    dsn: str, queue: Queue, start_worker: Any
) -> None:
    handled: list[int] = []
    worker = Worker(queue, lambda m: handled.append(m.id), max_sleep_ms=60_000)
    start_worker(worker)
    kill_the_announcement(dsn, queue.name)
    created = queue.create("job").id
    wait_for(lambda: handled == [created], 15, "the NOTIFY-driven pickup")


async def test_an_async_worker_announces_again_when_its_waiting_connection_dies(
    dsn: str, aqueue: AsyncQueue
) -> None:
    handled: list[int] = []

    async def handler(message: Any) -> None:
        handled.append(message.id)

    worker = AsyncWorker(aqueue, handler, max_sleep_ms=60_000)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.to_thread(kill_the_announcement, dsn, aqueue.name)
        created = (await aqueue.create("job")).id
        for _ in range(300):
            if handled == [created]:
                break
            await asyncio.sleep(0.05)
        assert handled == [created]
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
