"""``AsyncWorker``: runs a handler over a queue with N concurrent slots.

worker.py is generated from aworker.py by python/tools/async_to_sync.py, so the two workers
share every rule: a slot, the flusher, the heartbeats and the listener are threads in the
one and asyncio tasks in the other. Four loops, as in a broker's subscriber.
**Fetch**: the ``run()`` loop dequeues as many messages as there are free slots, in one
call, into a local buffer that the slots take from; between rounds it sleeps on a wake event
set by LISTEN notifications, finished handlers, flushes and ``stop()``, with
``wait_hint_ms`` as the timed fallback. **Work**: each slot runs the handler and puts its
outcome in the settle buffer. **Flush**: the flusher sends the buffered settles in batches
(``_settle.py``) once the oldest is ``settle_interval_ms`` old or ``settle_batch_size``
wait. **Heartbeats** extend the locks of everything held. See docs/python.md.
"""

from __future__ import annotations

import asyncio  # ASYNC
import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import psycopg

from . import _outcome, _periodic, _pool, _report, _settle, _timing
from ._backoff import DEFAULT_BACKOFF, Backoff
from ._inflight import InFlight, delivery
from .amessage import AsyncMessage
from .aqueue import AsyncQueue
from .hooks import Dispatch, WorkerHooks

if True:  # ASYNC
    # The concurrency primitives: all that differs between the two workers lives in these
    # two branches and in the few lines marked ASYNC.
    from asyncio import Event, Lock
    from asyncio import Queue as Buffer
    from asyncio import QueueEmpty as BufferEmpty
    from collections.abc import Awaitable, Coroutine

    AsyncHandler = Callable[[AsyncMessage], Awaitable[object]]
    Strand = asyncio.Task[None]

    def _spawn(
        target: Callable[..., Coroutine[Any, Any, None]], *args: object, name: str
    ) -> Strand:
        return asyncio.create_task(target(*args), name=name)

    async def _join(strand: Strand) -> None:
        await asyncio.gather(strand, return_exceptions=True)

    async def _wait(event: Event, seconds: float | None) -> bool:
        """Whether ``event`` was set within ``seconds`` (None: no limit)."""
        if event.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
            return True
        return False

    def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
        try:
            return asyncio.get_running_loop() is loop
        except RuntimeError:
            return False
else:
    from queue import Empty as BufferEmpty
    from queue import SimpleQueue as Buffer
    from threading import Event, Lock
    from threading import Thread as Strand

    Handler = Callable[[AsyncMessage], object]

    def _spawn(target: Callable[..., None], *args: object, name: str) -> Strand:
        # A daemon: a handler stuck past the grace period must not block exit.
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    def _join(strand: Strand) -> None:
        strand.join()

    def _wait(event: Event, seconds: float | None) -> bool:
        return event.wait(seconds)


log = logging.getLogger("lonnymq.worker")

# A periodic message seen by a worker that did not register its name: leave it for another.
UNKNOWN_PERIODIC_DELAY_MS = 5000
# Start without LISTEN after this long (the timed fallback still finds the work).
LISTEN_READY_TIMEOUT_S = 5.0
SIGNALS = (signal.SIGTERM, signal.SIGINT)
NOTIFY_CHANNEL = "lonnymq"
# How often the listener re-checks whether it should stop while no notification arrives.
POLL_STOP_S = 0.5


def concerns(payload: str, queue: str) -> bool:
    """Whether a NOTIFY payload is about ``queue`` (an unreadable payload wakes anyway)."""
    try:
        return bool(json.loads(payload).get("queue") == queue)
    except (ValueError, AttributeError):
        return True


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
        # A third of the lock leaves two chances to extend it before it expires.
        self.heartbeat_ms = heartbeat_ms if heartbeat_ms is not None else max(lock_ms // 3, 1)
        self.max_sleep_ms = max_sleep_ms
        self.shutdown_grace_ms = shutdown_grace_ms
        self.handle_signals = handle_signals
        self.hooks = Dispatch(hooks)
        self._reporter = _report.Reporter(queue.name, stats_interval_ms)
        self.counts = {"completed": 0, "deferred": 0, "failed": 0, "refused": 0}
        self._periodic: dict[str, _periodic.Periodic[AsyncHandler]] = {}
        # Every delivery held: buffered, running, or done with its settle not yet flushed.
        self._held: dict[tuple[int, int], InFlight[AsyncMessage]] = {}
        # Slots in use: buffered or running (a settle waiting for a flush frees its slot).
        self._busy = 0
        self._buffer: Buffer[AsyncMessage | None] = Buffer()
        self._slots: list[Strand] = []
        self._settles: _settle.SettleBuffer[AsyncMessage] = _settle.SettleBuffer(
            settle_interval_ms, settle_batch_size
        )
        # Guards the state above. Never held across a wait, so it serves asyncio as well.
        self._lock = threading.Lock()
        self._flushing = Lock()
        self._wake = Event()
        self._flush_wake = Event()
        self._stopping = Event()
        self._closing = Event()  # no more settles will come: flush all, then end
        self._finished = Event()
        self._listening = Event()
        self._loop_ref: asyncio.AbstractEventLoop | None = None  # ASYNC
        # Set while the loop waits for work with free slots (a threading.Event, so another
        # thread can watch it too): for health checks and tests.
        self.sleeping = threading.Event()

    # -- public API -------------------------------------------------------------------------

    def every(self, interval: timedelta | int, name: str, handler: AsyncHandler) -> None:
        """Run ``handler`` every ``interval`` (timedelta or ms) from one durable message.

        The message is created when ``run()`` starts (deduplicated across workers), is
        deferred by ``interval`` after each run, and is never completed.
        """
        self._periodic[_periodic.channel_for(name)] = _periodic.Periodic(
            name, _periodic.interval_ms(interval), handler
        )

    def stop(self) -> None:
        """Stop taking work; ``run()`` returns once running handlers finish. Safe to call
        from any thread. A stopped worker stays stopped: create a new one to run again."""
        if True:  # ASYNC
            loop = self._loop_ref
            if loop is not None and not _in_loop(loop):
                # asyncio's events are not thread-safe: set them from their own loop.
                loop.call_soon_threadsafe(self.stop)
                return
        self._stopping.set()
        self._wake.set()

    @property
    def in_flight(self) -> int:
        """Deliveries held: buffered, running, or settled but not yet flushed."""
        with self._lock:
            return len(self._held)

    async def run(self, until_idle: bool = False) -> None:
        """Process messages until ``stop()`` (or SIGTERM/SIGINT); with ``until_idle``, also
        return once nothing is ready and nothing is held."""
        # _stopping is not reset: a stop() that lands just before run() must still count.
        self._loop_ref = asyncio.get_running_loop()  # ASYNC
        self._finished.clear()
        self._closing.clear()  # run() may follow a run(until_idle=True)
        self._listening = Event()
        # A fresh buffer per run: a handler abandoned by an earlier run may still return.
        self._buffer = Buffer()
        async with self._signals():
            listener = _spawn(self._listen, name=f"lonnymq-listen-{self.queue.name}")
            heartbeats = _spawn(self._heartbeat_loop, name="lonnymq-heartbeat")
            flusher = _spawn(self._flush_loop, name="lonnymq-flush")
            self._slots = [
                _spawn(self._slot, self._buffer, name=f"lonnymq-slot-{n}")
                for n in range(self.concurrency)
            ]
            try:
                # Listen before the first dequeue, so no NOTIFY falls between the two.
                await _wait(self._listening, LISTEN_READY_TIMEOUT_S)
                await self._create_periodic()
                await self._loop(until_idle)
                await self._drain()
            finally:
                for _ in self._slots:
                    self._buffer.put_nowait(None)
                self._closing.set()
                self._flush_wake.set()
                await _join(flusher)  # the final flush, while heartbeats still run
                self._finished.set()
                if True:  # ASYNC
                    # Unlike threads, tasks can be interrupted: a handler given up at shutdown
                    # stops where it waits (its message is deferred already), and the
                    # listener need not finish its poll.
                    for task in (listener, *self._slots):
                        task.cancel()
                    await asyncio.gather(*self._slots, return_exceptions=True)
                await _join(heartbeats)
                await _join(listener)
                await self._report(final=True)

    # -- fetch ------------------------------------------------------------------------------

    async def _create_periodic(self) -> None:
        for job in self._periodic.values():
            result = await self.queue.create(
                {"every": job.name}, channel=job.channel, dedup_key=job.dedup_key
            )
            log.debug("periodic %s: %s", job.name, result.status)

    async def _loop(self, until_idle: bool) -> None:
        retry_ms = _timing.MIN_RETRY_MS
        woken_early = False  # whether the last sleep was cut short by a wake-up
        error_pause_s = 0.0  # before retrying a dequeue that lost its connection
        while not self._stopping.is_set():
            # Clear before looking, so a wake-up that arrives while we look is not lost.
            self._wake.clear()
            with self._lock:
                free = self.concurrency - self._busy
                # Read before the dequeue: a settle flushed after it can make a message
                # ready again (a defer) that neither the dequeue nor the wait hint saw.
                held = len(self._held)
            if free <= 0:
                await _wait(self._wake, self.max_sleep_ms / 1000)
                continue
            try:
                # One call for every free slot: under load, slots free up while a dequeue
                # runs, so batches grow by themselves.
                messages = await self.queue.dequeue(lock_ms=self.lock_ms, max_messages=free)
                error_pause_s = 0.0
                if messages:
                    retry_ms, woken_early = _timing.MIN_RETRY_MS, False
                    self._hand_out(messages)
                    continue
                # Nothing to do: sleep announced as a waiter, so that producers notify.
                async with self.queue._waiting() as (hint, announcing):
                    if until_idle and held == 0 and (hint is None or hint > 0):
                        return
                    self.sleeping.set()
                    planned_ms = _timing.idle_sleep_ms(hint, retry_ms, self.max_sleep_ms)
                    started = time.monotonic()
                    woken = await self._sleep(planned_ms / 1000, announcing)
                    self.sleeping.clear()
            except psycopg.OperationalError as exc:
                log.warning("dequeue failed (%s); retrying", exc)
                self.sleeping.clear()
                await _wait(self._stopping, error_pause_s)
                error_pause_s = _timing.next_error_pause_s(error_pause_s)
                continue
            if woken:
                # Wake-ups are hints (any role may NOTIFY lonnymq): see _timing.
                await _wait(
                    self._stopping, _timing.early_wake_floor_s(retry_ms, planned_ms, started)
                )
            retry_ms = _timing.next_retry_ms(retry_ms, hint, woken_early)
            woken_early = woken

    async def _sleep(self, seconds: float, announcing: psycopg.AsyncConnection[Any]) -> bool:
        """Sleeps until woken (returns True) or ``seconds`` passed, or the connection holding
        the waiting announcement is lost: producers stop notifying with it gone, so the loop
        must look for work and announce again at once, not at the end of a long sleep."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if await _wait(self._wake, min(left, _pool.WATCH_S)):
                return True
            if _pool.closed_by_server(announcing):
                log.info("waiting connection lost; looking for work again")
                break
        return False

    def _hand_out(self, messages: list[AsyncMessage]) -> None:
        with self._lock:
            for message in messages:
                self._held[delivery(message)] = InFlight(message)
            self._busy += len(messages)
        for message in messages:
            self._buffer.put_nowait(message)

    async def _listen(self) -> None:
        """LISTENs on its own connection and wakes the loop when this queue gets work.
        Notifications only save latency: while the connection is lost, the loop's timed
        sleeps (``wait_hint_ms``) still find the work."""
        pause_s = 0.0  # before reconnecting: none after a connection that listened
        while not self._finished.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.queue.conninfo, autocommit=True
                ) as conn:
                    await conn.execute("LISTEN " + NOTIFY_CHANNEL)
                    pause_s = 0.0
                    self._listening.set()
                    # Something may have been created while we were (re)connecting.
                    self._wake.set()
                    while not self._finished.is_set():
                        async for notify in conn.notifies(timeout=POLL_STOP_S):
                            if concerns(notify.payload, self.queue.name):
                                self._wake.set()
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s); relying on timed wake-ups", exc)
                self._wake.set()
                await _wait(self._finished, pause_s)
                pause_s = _timing.next_error_pause_s(pause_s)

    # -- work -------------------------------------------------------------------------------

    async def _slot(self, buffer: Buffer[AsyncMessage | None]) -> None:
        while (message := await buffer.get()) is not None:
            try:
                outcome = await self._work(message)
            except asyncio.CancelledError:  # ASYNC
                # Cancelled as run() ends: the slot ends at its sentinel, as the others do.  # ASYNC
                outcome = _outcome.Outcome("defer")  # ASYNC
            except BaseException:  # SystemExit and the like, which handlers should not raise
                # Keep the slot: the message goes back at once and the slot goes on.
                log.exception("message %s: handler raised past Exception", message.id)
                outcome = _outcome.Outcome("defer")
            self._done(message, outcome)

    async def _work(self, message: AsyncMessage) -> _outcome.Outcome | None:
        if message.recovered:
            # Its last lock expired: it may be what killed a worker. Flush first, so
            # if it kills this one too, no finished work goes down with it.
            await self._flush_all()
        started = self.hooks.delivered(message)
        with self._lock:
            entry = self._held.get(delivery(message))
            if entry is not None:
                entry.started = started
        return await self._run_handler(message)

    def _done(self, message: AsyncMessage, outcome: _outcome.Outcome | None) -> None:
        """Record a finished handler: its outcome waits for the flusher, unless the handler
        settled the message itself (``outcome`` None) or the worker gave it up."""
        ended: str | None = None  # the hooks hear now of a self-settled or abandoned one
        with self._lock:
            self._busy -= 1
            entry = self._held.get(delivery(message))
            if entry is not None and not entry.abandoned:
                if outcome is None:
                    del self._held[delivery(message)]
                    ended = message._settles[-1]
                    self._count(ended)
                else:
                    entry.awaiting_flush = True
                    self._settles.add(message, outcome, time.monotonic())
        if entry is not None and (outcome is None or entry.abandoned):
            self.hooks.settled(message, outcome if ended is None else None, ended, entry.started)
        self._flush_wake.set()
        self._wake.set()

    async def _run_handler(self, message: AsyncMessage) -> _outcome.Outcome | None:
        """The outcome to settle; None when the handler returned after settling the message
        itself (e.g. ``message.complete(conn=...)`` inside its own transaction)."""
        if _periodic.is_periodic(message.channel):
            return await self._run_periodic(message)
        try:
            await self.handler(message)
        except Exception as exc:
            # If the handler settled it and then raised, the settle either rolled back with
            # its transaction (the retry applies) or stands (the retry is refused).
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
            # A periodic job must keep its schedule: log and run again next interval.
            log.exception("periodic %s failed", job.name)
        return _outcome.Outcome(
            "defer", delay_ms=job.interval_ms, state=_periodic.run_state(job.interval_ms, error)
        )

    def _count(self, status: str) -> None:
        """Tally one settle's status (the caller holds ``_lock``)."""
        self.counts[status if status in _settle.APPLIED else "refused"] += 1

    # -- flush ------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        # While flushes keep losing their connection: the pauses left before giving up.
        retries: Iterator[float] | None = None
        retry_at = 0.0  # after a failed flush, not before this
        while True:
            self._flush_wake.clear()
            now = time.monotonic()
            with self._lock:
                wait = self._settles.wait_s(now)
            closing = self._closing.is_set()
            if wait is None and closing:
                return
            if wait is not None and (wait == 0 or closing):
                wait = max(retry_at - now, 0.0)
            if wait != 0:
                await _wait(self._flush_wake, wait)
                continue
            unsent, lost = await self._flush()
            if not unsent:
                retries = None
                continue
            # Re-issued on another connection as a single settle would be (_timing); the
            # fencing token makes a re-issue safe.
            retries = retries or iter(_timing.settle_retry_delays_s(self.lock_ms))
            pause = next(retries, None) if lost else None
            if pause is None:
                self._drop(unsent)
                retries = None
                continue
            with self._lock:
                self._settles.put_back(unsent)
            retry_at = time.monotonic() + pause

    async def _flush_all(self) -> None:
        """Flush everything buffered now, from the calling slot (stops at an error and
        leaves the rest to the flusher)."""
        while self._buffered_settles():
            unsent, _lost = await self._flush()
            if unsent:
                with self._lock:
                    self._settles.put_back(unsent)
                return

    def _buffered_settles(self) -> int:
        with self._lock:
            return len(self._settles)

    async def _flush(self) -> tuple[list[_settle.Settle[AsyncMessage]], bool]:
        """Send one batch. Returns the settles not sent (empty when all went) and whether
        the connection was lost. One flush at a time: who flushes after another also waits
        for its commit."""
        async with self._flushing:
            with self._lock:
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
        ended = []
        with self._lock:
            for settle, status in sent:
                entry = self._held.pop(delivery(settle.message), None)
                ended.append((settle, status, entry.started if entry else time.monotonic()))
                self._count(status)
        for settle, status, started in ended:
            self.hooks.settled(settle.message, settle.outcome, status, started)
        for settle, status in sent:
            if status not in _settle.APPLIED:
                log.warning(
                    "%s of message %s refused: %s",
                    settle.outcome.action,
                    settle.message.id,
                    status,
                )
        if sent:
            self._wake.set()  # until_idle waits for the flush; a freed channel may have work

    def _drop(self, settles: list[_settle.Settle[AsyncMessage]]) -> None:
        """Give up on settles that could not be sent: their locks expire and the messages
        are delivered again, so nothing is lost."""
        ended = []
        with self._lock:
            for settle in settles:
                entry = self._held.pop(delivery(settle.message), None)
                ended.append((settle, entry.started if entry else time.monotonic()))
        for settle, started in ended:
            self.hooks.settled(settle.message, settle.outcome, None, started)
        log.warning("could not flush %d settles: they will be delivered again", len(settles))
        self._wake.set()

    # -- heartbeats -------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_ms / 1000
        while not await _wait(self._finished, min(interval / 4, 0.5)):
            now = time.monotonic()
            with self._lock:
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
                with self._lock:
                    # A flush may have settled it meanwhile: then the refusal is expected.
                    still_held = delivery(entry.message) in self._held
                if status != "extended" and still_held:
                    log.warning("heartbeat of message %s refused: %s", entry.message.id, status)
            await self._report()

    async def _report(self, final: bool = False) -> None:
        """Send the throughput report when one is due (see _report)."""
        with self._lock:
            payload = self._reporter.due(self.counts, final)
        if payload is not None:
            try:
                await self.queue._scalar(_report.NOTIFY, (payload,), None)
            except psycopg.Error as exc:
                log.info("throughput report not sent: %s", exc)

    # -- shutdown ---------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Release what was fetched but not started at once; let running handlers finish
        within the grace period (their settles are flushed as usual); defer the rest."""
        unstarted: list[AsyncMessage] = []
        while True:
            try:
                message = self._buffer.get_nowait()
            except BufferEmpty:
                break
            if message is not None:
                unstarted.append(message)
        with self._lock:
            self._busy -= len(unstarted)
        # Fetched just before the stop: routine, hence only logged at INFO.
        await self._release(unstarted, "not started at shutdown", logging.INFO)
        deadline = time.monotonic() + self.shutdown_grace_ms / 1000
        while time.monotonic() < deadline:
            self._wake.clear()
            with self._lock:
                if self._busy == 0:
                    break
            await _wait(self._wake, min(0.1, max(deadline - time.monotonic(), 0)))
        with self._lock:
            running = [
                f.message for f in self._held.values() if not f.awaiting_flush and not f.abandoned
            ]
        await self._release(running, "still running at shutdown")

    async def _release(
        self, messages: list[AsyncMessage], why: str, level: int = logging.WARNING
    ) -> None:
        """Defer (not fail) deliveries the worker gives up: another worker picks them up at
        once, attempts unchanged. Marked abandoned first, so a late result is dropped."""
        with self._lock:
            for message in messages:
                self._held[delivery(message)].abandoned = True
        for message in messages:
            try:
                status = await message.defer()
                log.log(level, "message %s %s: %s", message.id, why, status)
            except psycopg.Error as exc:
                log.warning("could not defer message %s (%s): %s", message.id, why, exc)
            with self._lock:
                self._held.pop(delivery(message), None)

    def _on_signal(self, signum: int, frame: object = None) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        self.stop()

    @contextlib.asynccontextmanager
    async def _signals(self) -> AsyncIterator[None]:
        """Stops on SIGTERM/SIGINT while ``run()`` runs, when called from the main thread."""
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            yield
            return
        if True:  # ASYNC
            loop = asyncio.get_running_loop()
            for signum in SIGNALS:
                loop.add_signal_handler(signum, self._on_signal, signum)
            try:
                yield
            finally:
                for signum in SIGNALS:
                    loop.remove_signal_handler(signum)
        else:
            previous = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
            try:
                yield
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
