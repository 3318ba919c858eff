"""``AsyncWorker``: the asyncio twin of ``Worker`` (same options, same behaviour).

Handlers are coroutines run as tasks, one per slot: the messages of one dequeue start at
once, so no buffer sits between fetch and work. Their outcomes wait in the settle buffer
for a flusher task, which sends them in batches as ``Worker``'s flusher thread does. A
listener task (LISTEN), finished handlers and flushes set a wake event; ``wait_hint_ms``
bounds every sleep. See worker.py for the rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import psycopg

from . import _outcome, _periodic, _pool, _report, _settle, _timing
from ._backoff import DEFAULT_BACKOFF, Backoff
from ._inflight import InFlight, delivery
from ._listener import NOTIFY_CHANNEL, POLL_STOP_S, concerns
from .amessage import AsyncMessage
from .aqueue import AsyncQueue
from .hooks import Dispatch, WorkerHooks
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
        settle_interval_ms: int = _settle.DEFAULT_INTERVAL_MS,
        settle_batch_size: int = _settle.DEFAULT_BATCH_SIZE,
        handle_signals: bool = True,
        hooks: WorkerHooks | Sequence[WorkerHooks] = (),
        stats_interval_ms: int | None = _report.DEFAULT_INTERVAL_MS,
    ) -> None:
        if concurrency < 1 or lock_ms < 1:
            raise ValueError("concurrency and lock_ms must be positive")
        _settle.check_options(settle_interval_ms, settle_batch_size)
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
        self._reporter = _report.Reporter(queue.name, stats_interval_ms)
        self.counts = {"completed": 0, "deferred": 0, "failed": 0, "refused": 0}
        self._periodic: dict[str, _periodic.Periodic[AsyncHandler]] = {}
        # Every delivery held: running, or done with its settle not yet flushed.
        self._held: dict[tuple[int, int], InFlight[AsyncMessage]] = {}
        # Running handlers (a settle waiting for a flush frees its slot).
        self._tasks: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._settles: _settle.SettleBuffer[AsyncMessage] = _settle.SettleBuffer(
            settle_interval_ms, settle_batch_size
        )
        self._wake = asyncio.Event()
        self._flush_wake = asyncio.Event()
        self._flushing = asyncio.Lock()
        self._stopping = False
        self._closing = False
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
        """Deliveries held: running, or settled but not yet flushed."""
        return len(self._held)

    async def run(self, until_idle: bool = False) -> None:
        """Process messages until ``stop()`` (or SIGTERM/SIGINT); with ``until_idle``, also
        return once nothing is ready and nothing is held."""
        # _stopping is not reset: a stop() that lands just before run() must still count.
        self._loop_ref = asyncio.get_running_loop()
        self._listening = asyncio.Event()
        self._closing = False  # run() may follow a run(until_idle=True)
        async with self._signals():
            listener = asyncio.create_task(self._listen(), name="lonnymq-listen")
            heartbeats = asyncio.create_task(self._heartbeat_loop(), name="lonnymq-heartbeat")
            flusher = asyncio.create_task(self._flush_loop(), name="lonnymq-flush")
            try:
                # Listen before the first dequeue, so no NOTIFY falls between the two.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._listening.wait(), LISTEN_READY_TIMEOUT_S)
                await self._create_periodic()
                await self._loop(until_idle)
                await self._drain()
            finally:
                self._closing = True
                self._flush_wake.set()
                # The final flush, while heartbeats still run.
                await asyncio.gather(flusher, return_exceptions=True)
                for task in (listener, heartbeats):
                    task.cancel()
                await asyncio.gather(listener, heartbeats, return_exceptions=True)
                await self._report(final=True)

    # -- fetch ------------------------------------------------------------------------------

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

    async def _sleep(self, event: asyncio.Event, seconds: float | None) -> bool:
        """Sleeps until ``event`` is set or ``seconds`` passed; whether it was set."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
            return True
        return False

    async def _sleep_announced(
        self, seconds: float, announcing: psycopg.AsyncConnection[Any]
    ) -> bool:
        """Sleeps until woken (returns True) or ``seconds`` passed, or the connection holding
        the waiting announcement is lost: producers stop notifying with it gone, so the loop
        must look for work and announce again at once, not at the end of a long sleep."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if await self._sleep(self._wake, min(left, _pool.WATCH_S)):
                return True
            if _pool.closed_by_server(announcing):
                log.info("waiting connection lost; looking for work again")
                break
        return False

    async def _loop(self, until_idle: bool) -> None:
        retry_ms = _timing.MIN_RETRY_MS
        woken_early = False  # whether the last sleep was cut short by a wake-up
        error_pause_s = 0.0  # before retrying a dequeue that lost its connection
        while not self._stopping:
            self._wake.clear()
            free = self.concurrency - len(self._tasks)
            # Read before the dequeue: a settle flushed after it can make a message ready
            # again (a defer) that neither the dequeue nor the wait hint saw.
            held = self.in_flight
            if free <= 0:
                await self._sleep(self._wake, self.max_sleep_ms / 1000)
                continue
            try:
                messages = await self.queue.dequeue(lock_ms=self.lock_ms, max_messages=free)
                error_pause_s = 0.0
                if messages:
                    retry_ms, woken_early = _timing.MIN_RETRY_MS, False
                    for message in messages:
                        self._start(message)
                    continue
                # Nothing to do: sleep announced as a waiter, so that producers notify.
                async with self.queue._waiting() as (hint, announcing):
                    if until_idle and held == 0 and (hint is None or hint > 0):
                        return
                    self.sleeping.set()
                    planned_ms = _timing.idle_sleep_ms(hint, retry_ms, self.max_sleep_ms)
                    started = time.monotonic()
                    woken = await self._sleep_announced(planned_ms / 1000, announcing)
                    self.sleeping.clear()
            except psycopg.OperationalError as exc:
                log.warning("dequeue failed (%s); retrying", exc)
                self.sleeping.clear()
                await self._stopped_or(error_pause_s)
                error_pause_s = _timing.next_error_pause_s(error_pause_s)
                continue
            if woken:
                # Wake-ups are hints (any role may NOTIFY lonnymq): see _timing.
                await self._stopped_or(_timing.early_wake_floor_s(retry_ms, planned_ms, started))
            retry_ms = _timing.next_retry_ms(retry_ms, hint, woken_early)
            woken_early = woken

    def _start(self, message: AsyncMessage) -> None:
        self._held[delivery(message)] = InFlight(message)
        self._tasks[delivery(message)] = asyncio.create_task(
            self._handle(message), name=f"lonnymq-handler-{message.id}"
        )

    async def _listen(self) -> None:
        pause_s = 0.0  # before reconnecting: none after a connection that listened
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.queue.conninfo, autocommit=True
                ) as conn:
                    await conn.execute("LISTEN " + NOTIFY_CHANNEL)
                    pause_s = 0.0
                    self._listening.set()
                    self._wake.set()
                    while True:
                        async for notify in conn.notifies(timeout=POLL_STOP_S):
                            if concerns(notify.payload, self.queue.name):
                                self._wake.set()
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s); relying on timed wake-ups", exc)
                await asyncio.sleep(pause_s)
                pause_s = _timing.next_error_pause_s(pause_s)

    # -- work -------------------------------------------------------------------------------

    async def _handle(self, message: AsyncMessage) -> None:
        started = self.hooks.delivered(message)
        outcome: _outcome.Outcome | None = None
        status: str | None = None
        try:
            if message.recovered:
                # Its last lock expired: it may be what killed a worker. Flush first, so
                # if it kills this one too, no finished work goes down with it.
                await self._flush_all()
            outcome = await self._run_handler(message)
            entry = self._held.get(delivery(message))
            if entry is not None:
                entry.started = started
            if entry is not None and not entry.abandoned:
                if outcome is None:
                    del self._held[delivery(message)]
                    status = message._settles[-1]
                    self._count(status)
                    self.hooks.settled(message, None, status, started)
                else:
                    entry.awaiting_flush = True
                    self._settles.add(message, outcome, time.monotonic())
                    self._flush_wake.set()
            else:
                self.hooks.settled(message, outcome, None, started)  # abandoned, or gone
        finally:
            self._tasks.pop(delivery(message), None)
            self._wake.set()

    async def _run_handler(self, message: AsyncMessage) -> _outcome.Outcome | None:
        """The outcome to settle; None when the handler returned after settling the message
        itself (see ``Worker._run_handler``)."""
        if _periodic.is_periodic(message.channel):
            return await self._run_periodic(message)
        try:
            await self.handler(message)
        except Exception as exc:
            log.info("message %s attempt %s raised %r", message.id, message.num_attempts, exc)
            return _outcome.for_exception(
                exc, message.num_attempts, self.max_attempts, self.backoff
            )
        return None if message._settles else _outcome.COMPLETE

    async def _run_periodic(self, message: AsyncMessage) -> _outcome.Outcome:
        job = self._periodic.get(message.channel or "")
        if job is None:
            return _outcome.Outcome("defer", delay_ms=UNKNOWN_PERIODIC_DELAY_MS)
        error: Exception | None = None
        try:
            await job.handler(message)
        except Exception as exc:
            error = exc
            log.exception("periodic %s failed", job.name)
        return _outcome.Outcome(
            "defer", delay_ms=job.interval_ms, state=_periodic.run_state(job.interval_ms, error)
        )

    def _count(self, status: str) -> None:
        self.counts[status if status in _settle.APPLIED else "refused"] += 1

    # -- flush ------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        retries: Iterator[float] | None = None  # see Worker._flush_loop
        retry_at = 0.0
        while True:
            self._flush_wake.clear()
            now = time.monotonic()
            wait = self._settles.wait_s(now)
            if wait is None and self._closing:
                return
            if wait is not None and (wait == 0 or self._closing):
                wait = max(retry_at - now, 0.0)
            if wait != 0:
                await self._sleep(self._flush_wake, wait)
                continue
            unsent, lost = await self._flush()
            if not unsent:
                retries = None
                continue
            retries = retries or iter(_timing.settle_retry_delays_s(self.lock_ms))
            pause = next(retries, None) if lost else None
            if pause is None:
                self._drop(unsent)
                retries = None
                continue
            self._settles.put_back(unsent)
            retry_at = time.monotonic() + pause

    async def _flush_all(self) -> None:
        """Flush everything buffered now (stops at an error and leaves the rest to the
        flusher)."""
        while len(self._settles):
            unsent, _lost = await self._flush()
            if unsent:
                self._settles.put_back(unsent)
                return

    async def _flush(self) -> tuple[list[_settle.Settle[AsyncMessage]], bool]:
        """See ``Worker._flush``."""
        async with self._flushing:
            batch = self._settles.take()
            sent: list[tuple[_settle.Settle[AsyncMessage], str]] = []
            try:
                completes, others = _settle.split(batch)
                if completes:
                    results = await self.queue.complete_batch([s.message for s in completes])
                    sent += zip(completes, (r.status for r in results), strict=True)
                for settle in others:
                    sent.append((settle, await self._send(settle)))
            except psycopg.Error as exc:
                done = {id(s) for s, _status in sent}
                unsent = [s for s in batch if id(s) not in done]
                log.info("flush of %d settles failed: %s", len(unsent), exc)
                self._record(sent)
                return unsent, isinstance(exc, psycopg.OperationalError)
            self._record(sent)
            return [], False

    async def _send(self, settle: _settle.Settle[AsyncMessage]) -> str:
        message, outcome = settle.message, settle.outcome
        if outcome.action == "defer":
            return await self.queue.defer(
                message.id, message.num_attempts, delay_ms=outcome.delay_ms, state=outcome.state
            )
        return await self.queue.fail(message.id, message.num_attempts, outcome.error)

    def _record(self, sent: list[tuple[_settle.Settle[AsyncMessage], str]]) -> None:
        for settle, status in sent:
            entry = self._held.pop(delivery(settle.message), None)
            self._count(status)
            self.hooks.settled(
                settle.message, settle.outcome, status, entry.started if entry else time.monotonic()
            )
            if status not in _settle.APPLIED:
                log.warning(
                    "%s of message %s refused: %s",
                    settle.outcome.action,
                    settle.message.id,
                    status,
                )
        if sent:
            self._wake.set()

    def _drop(self, settles: list[_settle.Settle[AsyncMessage]]) -> None:
        """See ``Worker._drop``."""
        for settle in settles:
            entry = self._held.pop(delivery(settle.message), None)
            self.hooks.settled(
                settle.message, settle.outcome, None, entry.started if entry else time.monotonic()
            )
        log.warning("could not flush %d settles: they will be delivered again", len(settles))
        self._wake.set()

    # -- heartbeats -------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_ms / 1000
        while True:
            await asyncio.sleep(min(interval / 4, 0.5))
            now = time.monotonic()
            due = [
                f
                for f in self._held.values()
                if not f.abandoned and now - f.last_extended >= interval
            ]
            for entry in due:
                try:
                    status = await entry.message.heartbeat(self.lock_ms)
                except psycopg.Error as exc:
                    log.warning("heartbeat of message %s failed: %s", entry.message.id, exc)
                    continue
                entry.last_extended = now
                # A flush may have settled it meanwhile: then the refusal is expected.
                if status != "extended" and delivery(entry.message) in self._held:
                    log.warning("heartbeat of message %s refused: %s", entry.message.id, status)
            await self._report()

    async def _report(self, final: bool = False) -> None:
        """Send the throughput report when one is due (see _report)."""
        payload = self._reporter.due(self.counts, final)
        if payload is not None:
            try:
                await self.queue._scalar(_report.NOTIFY, (payload,), None)
            except psycopg.Error as exc:
                log.info("throughput report not sent: %s", exc)

    # -- shutdown ---------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Let running handlers finish within the grace period (their settles are flushed
        as usual); cancel and defer the rest."""
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.shutdown_grace_ms / 1000)
        leftovers = [(self._held[k], t) for k, t in self._tasks.items() if k in self._held]
        for entry, task in leftovers:
            entry.abandoned = True
            task.cancel()
        for entry, _task in leftovers:
            try:
                status = await entry.message.defer()
                log.warning("message %s still running at shutdown: %s", entry.message.id, status)
            except psycopg.Error as exc:
                log.warning("could not defer message %s at shutdown: %s", entry.message.id, exc)
            self._held.pop(delivery(entry.message), None)
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
