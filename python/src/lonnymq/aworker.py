"""``AsyncWorker``: the asyncio twin of ``Worker`` (same options, same behaviour).

Handlers are coroutines run as tasks, one per slot. A listener task (LISTEN) and finished
handlers set a wake event; ``wait_hint_ms`` bounds every sleep. See worker.py for the rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta

import psycopg

from . import _outcome, _periodic, _timing
from ._backoff import DEFAULT_BACKOFF, Backoff
from ._inflight import InFlight
from ._listener import NOTIFY_CHANNEL, POLL_STOP_S, RECONNECT_DELAY_S, concerns
from .aqueue import AsyncQueue
from .hooks import Dispatch, WorkerHooks
from .message import AsyncMessage
from .worker import LISTEN_READY_TIMEOUT_S, UNKNOWN_PERIODIC_DELAY_MS

log = logging.getLogger("lonnymq.worker")

AsyncHandler = Callable[[AsyncMessage], Awaitable[object]]


class AsyncWorker:
    def __init__(
        self,
        queue: AsyncQueue,
        handler: AsyncHandler,
        *,
        concurrency: int = 1,
        lock_ms: int = 30_000,
        max_attempts: int | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        heartbeat_ms: int | None = None,
        max_sleep_ms: int = 10_000,
        shutdown_grace_ms: int = 10_000,
        handle_signals: bool = True,
        hooks: WorkerHooks | Sequence[WorkerHooks] = (),
    ) -> None:
        if concurrency < 1 or lock_ms < 1:
            raise ValueError("concurrency and lock_ms must be positive")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.lock_ms = lock_ms
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.heartbeat_ms = heartbeat_ms if heartbeat_ms is not None else max(lock_ms // 3, 1)
        self.max_sleep_ms = max_sleep_ms
        self.shutdown_grace_ms = shutdown_grace_ms
        self.handle_signals = handle_signals
        self.hooks = Dispatch(hooks)
        self.counts = {"completed": 0, "deferred": 0, "failed": 0, "refused": 0}
        self._periodic: dict[str, _periodic.Periodic[AsyncHandler]] = {}
        # Keyed by delivery, not message: the same worker may hold an expired
        # attempt and its redelivery at once.
        self._inflight: dict[tuple[int, int], InFlight[AsyncMessage]] = {}
        self._tasks: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._listening = asyncio.Event()
        self._loop_ref: asyncio.AbstractEventLoop | None = None
        # Set while the loop waits for work with free slots (a threading.Event, so another
        # thread can watch it too): for health checks and tests.
        self.sleeping = threading.Event()

    # -- public API -------------------------------------------------------------------------

    def every(self, interval: timedelta | int, name: str, handler: AsyncHandler) -> None:
        """Run ``handler`` every ``interval`` (timedelta or ms); see ``Worker.every``."""
        self._periodic[_periodic.channel_for(name)] = _periodic.Periodic(
            name, _periodic.interval_ms(interval), handler
        )

    def stop(self) -> None:
        """Stop taking work. Safe to call from the event loop or from another thread.
        A stopped worker stays stopped: create a new one to run again."""
        loop = self._loop_ref
        if loop is not None and not _in_loop(loop):
            loop.call_soon_threadsafe(self.stop)
            return
        self._stopping = True
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def run(self, until_idle: bool = False) -> None:
        """Process messages until ``stop()`` (or SIGTERM/SIGINT); with ``until_idle``, also
        return once nothing is ready and nothing is in flight."""
        # _stopping is not reset: a stop() that lands just before run() must still count.
        self._loop_ref = asyncio.get_running_loop()
        self._listening = asyncio.Event()
        async with self._signals():
            listener = asyncio.create_task(self._listen(), name="lonnymq-listen")
            heartbeats = asyncio.create_task(self._heartbeat_loop(), name="lonnymq-heartbeat")
            try:
                # Listen before the first dequeue, so no NOTIFY falls between the two.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._listening.wait(), LISTEN_READY_TIMEOUT_S)
                await self._create_periodic()
                await self._loop(until_idle)
                await self._drain()
            finally:
                for task in (listener, heartbeats):
                    task.cancel()
                await asyncio.gather(listener, heartbeats, return_exceptions=True)

    # -- the loop ---------------------------------------------------------------------------

    async def _create_periodic(self) -> None:
        for job in self._periodic.values():
            await self.queue.create(
                {"every": job.name}, channel=job.channel, dedup_key=job.dedup_key
            )

    async def _stopped_or(self, seconds: float) -> None:
        """Sleeps ``seconds`` unless stop() comes first."""
        deadline = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, deadline - time.monotonic()))

    async def _sleep(self, ms: float) -> bool:
        """Sleeps until woken or ``ms`` passed; whether it was woken."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), ms / 1000)
            return True
        return False

    async def _loop(self, until_idle: bool) -> None:
        retry_ms = _timing.MIN_RETRY_MS
        woken_early = False  # whether the last sleep was cut short by a wake-up
        while not self._stopping:
            self._wake.clear()
            free = self.concurrency - self.in_flight
            if free <= 0:
                await self._sleep(self.max_sleep_ms)
                continue
            try:
                messages = await self.queue.dequeue(lock_ms=self.lock_ms, max_messages=free)
                if messages:
                    retry_ms, woken_early = _timing.MIN_RETRY_MS, False
                    for message in messages:
                        self._start(message)
                    continue
                # Nothing to do: sleep announced as a waiter, so that producers notify.
                async with self.queue.waiting() as hint:
                    if until_idle and self.in_flight == 0 and (hint is None or hint > 0):
                        return
                    self.sleeping.set()
                    planned_ms = _timing.idle_sleep_ms(hint, retry_ms, self.max_sleep_ms)
                    started = time.monotonic()
                    woken = await self._sleep(planned_ms)
                    self.sleeping.clear()
            except psycopg.OperationalError as exc:
                log.warning("dequeue failed (%s); retrying", exc)
                self.sleeping.clear()
                await asyncio.sleep(1.0)
                continue
            if woken:
                # Wake-ups are hints (any role may NOTIFY lonnymq): see _timing.
                await self._stopped_or(_timing.early_wake_floor_s(retry_ms, planned_ms, started))
            retry_ms = _timing.next_retry_ms(retry_ms, hint, woken_early)
            woken_early = woken

    def _start(self, message: AsyncMessage) -> None:
        self._inflight[(message.id, message.num_attempts)] = InFlight(message)
        self._tasks[(message.id, message.num_attempts)] = asyncio.create_task(
            self._handle(message), name=f"lonnymq-handler-{message.id}"
        )

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.queue.conninfo, autocommit=True
                ) as conn:
                    await conn.execute("LISTEN " + NOTIFY_CHANNEL)
                    self._listening.set()
                    self._wake.set()
                    while True:
                        async for notify in conn.notifies(timeout=POLL_STOP_S):
                            if concerns(notify.payload, self.queue.name):
                                self._wake.set()
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s); relying on timed wake-ups", exc)
                await asyncio.sleep(RECONNECT_DELAY_S)

    # -- one message ------------------------------------------------------------------------

    async def _handle(self, message: AsyncMessage) -> None:
        started = self.hooks.delivered(message)
        outcome: _outcome.Outcome | None = None
        status: str | None = None
        try:
            outcome = await self._run_handler(message)
            if not self._inflight[(message.id, message.num_attempts)].abandoned:
                status = await self._settle(message, outcome)
        finally:
            self.hooks.settled(message, outcome, status, started)
            self._inflight.pop((message.id, message.num_attempts), None)
            self._tasks.pop((message.id, message.num_attempts), None)
            self._wake.set()

    async def _run_handler(self, message: AsyncMessage) -> _outcome.Outcome:
        if _periodic.is_periodic(message.channel):
            return await self._run_periodic(message)
        try:
            await self.handler(message)
        except Exception as exc:
            log.info("message %s attempt %s raised %r", message.id, message.num_attempts, exc)
            return _outcome.for_exception(
                exc, message.num_attempts, self.max_attempts, self.backoff
            )
        return _outcome.COMPLETE

    async def _run_periodic(self, message: AsyncMessage) -> _outcome.Outcome:
        job = self._periodic.get(message.channel or "")
        if job is None:
            return _outcome.Outcome("defer", delay_ms=UNKNOWN_PERIODIC_DELAY_MS)
        try:
            await job.handler(message)
        except Exception:
            log.exception("periodic %s failed", job.name)
        return _outcome.Outcome("defer", delay_ms=job.interval_ms)

    async def _settle_once(self, message: AsyncMessage, outcome: _outcome.Outcome) -> str:
        if outcome.action == "complete":
            return await message.complete()
        if outcome.action == "defer":
            return await message.defer(delay_ms=outcome.delay_ms, state=outcome.state)
        return await message.fail(outcome.error)

    async def _settle(self, message: AsyncMessage, outcome: _outcome.Outcome) -> str | None:
        # As in Worker._settle: a settle lost with its connection is re-issued on another.
        retries = iter(_timing.settle_retry_delays_s(self.lock_ms))
        while True:
            try:
                status = await self._settle_once(message, outcome)
                break
            except psycopg.OperationalError as exc:
                delay = next(retries, None)
                if delay is None:
                    log.warning("could not %s message %s: %s", outcome.action, message.id, exc)
                    return None  # the lock expires and the message is redelivered: nothing is lost
                log.info("re-issuing %s of message %s: %s", outcome.action, message.id, exc)
                await asyncio.sleep(delay)
            except psycopg.Error as exc:
                log.warning("could not %s message %s: %s", outcome.action, message.id, exc)
                return None
        self.counts[status if status in self.counts else "refused"] += 1
        if status not in ("completed", "deferred", "failed"):
            log.warning("%s of message %s refused: %s", outcome.action, message.id, status)
        return status

    # -- heartbeats -------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_ms / 1000
        while True:
            await asyncio.sleep(min(interval / 4, 0.5))
            now = time.monotonic()
            due = [
                f
                for f in self._inflight.values()
                if not f.abandoned and now - f.last_extended >= interval
            ]
            for entry in due:
                try:
                    status = await entry.message.heartbeat(self.lock_ms)
                except psycopg.Error as exc:
                    log.warning("heartbeat of message %s failed: %s", entry.message.id, exc)
                    continue
                entry.last_extended = now
                if status != "extended":
                    log.warning("heartbeat of message %s refused: %s", entry.message.id, status)

    # -- shutdown ---------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Let running handlers finish within the grace period; cancel and defer the rest."""
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.shutdown_grace_ms / 1000)
        leftovers = [(self._inflight[i], t) for i, t in self._tasks.items() if i in self._inflight]
        for entry, task in leftovers:
            entry.abandoned = True
            task.cancel()
        for entry, _task in leftovers:
            try:
                status = await entry.message.defer()
                log.warning("message %s still running at shutdown: %s", entry.message.id, status)
            except psycopg.Error as exc:
                log.warning("could not defer message %s at shutdown: %s", entry.message.id, exc)
        await asyncio.gather(*(t for _e, t in leftovers), return_exceptions=True)

    @contextlib.asynccontextmanager
    async def _signals(self) -> AsyncIterator[None]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        try:
            yield
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
