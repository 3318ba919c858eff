"""``Worker``: runs a handler over a queue with N concurrent slots (one thread each).

One loop thread dequeues into free slots and sleeps between rounds on a wake event set by
LISTEN notifications, finished handlers and ``stop()``, with ``wait_hint_ms`` as the timed
fallback. A heartbeat thread extends the locks of running handlers. See docs/python.md.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType

import psycopg

from . import _outcome, _periodic, _timing
from ._backoff import DEFAULT_BACKOFF, Backoff
from ._inflight import InFlight
from ._listener import Listener
from .hooks import Dispatch, WorkerHooks
from .message import Message
from .queue import Queue

log = logging.getLogger("lonnymq.worker")

Handler = Callable[[Message], object]

# A periodic message seen by a worker that did not register its name: leave it for another.
UNKNOWN_PERIODIC_DELAY_MS = 5000
# Start without LISTEN after this long (the timed fallback still finds the work).
LISTEN_READY_TIMEOUT_S = 5.0


class Worker:
    def __init__(
        self,
        queue: Queue,
        handler: Handler,
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
        # A third of the lock leaves two chances to extend it before it expires.
        self.heartbeat_ms = heartbeat_ms if heartbeat_ms is not None else max(lock_ms // 3, 1)
        self.max_sleep_ms = max_sleep_ms
        self.shutdown_grace_ms = shutdown_grace_ms
        self.handle_signals = handle_signals
        self.hooks = Dispatch(hooks)
        self.counts = {"completed": 0, "deferred": 0, "failed": 0, "refused": 0}
        self._periodic: dict[str, _periodic.Periodic[Handler]] = {}
        # Keyed by delivery, not message: the same worker may hold an expired
        # attempt and its redelivery at once.
        self._inflight: dict[tuple[int, int], InFlight[Message]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._finished = threading.Event()
        # Set while the loop waits for work with free slots: for health checks and tests.
        self.sleeping = threading.Event()

    # -- public API -------------------------------------------------------------------------

    def every(self, interval: timedelta | int, name: str, handler: Handler) -> None:
        """Run ``handler`` every ``interval`` (timedelta or ms) from one durable message.

        The message is created when ``run()`` starts (deduplicated across workers), is
        deferred by ``interval`` after each run, and is never completed.
        """
        self._periodic[_periodic.channel_for(name)] = _periodic.Periodic(
            name, _periodic.interval_ms(interval), handler
        )

    def stop(self) -> None:
        """Stop taking work; ``run()`` returns once running handlers finish (thread-safe).
        A stopped worker stays stopped: create a new one to run again."""
        self._stopping.set()
        self._wake.set()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._inflight)

    def run(self, until_idle: bool = False) -> None:
        """Process messages until ``stop()`` (or SIGTERM/SIGINT); with ``until_idle``, also
        return once nothing is ready and nothing is in flight."""
        # _stopping is not reset: a stop() that lands just before run() must still count.
        self._finished.clear()
        listener = Listener(self.queue.conninfo, self.queue.name, self._wake)
        heartbeats = threading.Thread(
            target=self._heartbeat_loop, name="lonnymq-heartbeat", daemon=True
        )
        with self._signals():
            listener.start()
            heartbeats.start()
            try:
                # Listen before the first dequeue, so no NOTIFY falls between the two.
                listener.ready.wait(LISTEN_READY_TIMEOUT_S)
                self._create_periodic()
                self._loop(until_idle)
                self._drain()
            finally:
                listener.stop()
                self._finished.set()
                heartbeats.join()
                listener.join()

    # -- the loop ---------------------------------------------------------------------------

    def _create_periodic(self) -> None:
        for job in self._periodic.values():
            result = self.queue.create(
                {"every": job.name}, channel=job.channel, dedup_key=job.dedup_key
            )
            log.debug("periodic %s: %s", job.name, result.status)

    def _loop(self, until_idle: bool) -> None:
        retry_ms = _timing.MIN_RETRY_MS
        woken_early = False  # whether the last sleep was cut short by a wake-up
        while not self._stopping.is_set():
            # Clear before looking, so a wake-up that arrives while we look is not lost.
            self._wake.clear()
            free = self.concurrency - self.in_flight
            if free <= 0:
                self._wake.wait(self.max_sleep_ms / 1000)
                continue
            try:
                messages = self.queue.dequeue(lock_ms=self.lock_ms, max_messages=free)
                if messages:
                    retry_ms, woken_early = _timing.MIN_RETRY_MS, False
                    for message in messages:
                        self._start(message)
                    continue
                # Nothing to do: sleep announced as a waiter, so that producers notify.
                with self.queue.waiting() as hint:
                    if until_idle and self.in_flight == 0 and (hint is None or hint > 0):
                        return
                    self.sleeping.set()
                    planned_ms = _timing.idle_sleep_ms(hint, retry_ms, self.max_sleep_ms)
                    started = time.monotonic()
                    woken = self._wake.wait(planned_ms / 1000)
                    self.sleeping.clear()
            except psycopg.OperationalError as exc:
                log.warning("dequeue failed (%s); retrying", exc)
                self.sleeping.clear()
                self._stopping.wait(1.0)
                continue
            if woken:
                # Wake-ups are hints (any role may NOTIFY lonnymq): see _timing.
                self._stopping.wait(_timing.early_wake_floor_s(retry_ms, planned_ms, started))
            retry_ms = _timing.next_retry_ms(retry_ms, hint, woken_early)
            woken_early = woken

    def _start(self, message: Message) -> None:
        with self._lock:
            self._inflight[(message.id, message.num_attempts)] = InFlight(message)
        threading.Thread(
            target=self._handle,
            args=(message,),
            name=f"lonnymq-handler-{message.id}",
            daemon=True,  # a handler stuck past the grace period must not block exit
        ).start()

    # -- one message ------------------------------------------------------------------------

    def _handle(self, message: Message) -> None:
        started = self.hooks.delivered(message)
        outcome: _outcome.Outcome | None = None
        status: str | None = None
        try:
            outcome = self._run_handler(message)
            with self._lock:
                abandoned = self._inflight[(message.id, message.num_attempts)].abandoned
            if not abandoned:
                status = self._settle(message, outcome)
        finally:
            self.hooks.settled(message, outcome, status, started)
            with self._lock:
                self._inflight.pop((message.id, message.num_attempts), None)
            self._wake.set()

    def _run_handler(self, message: Message) -> _outcome.Outcome:
        if _periodic.is_periodic(message.channel):
            return self._run_periodic(message)
        try:
            self.handler(message)
        except Exception as exc:
            log.info("message %s attempt %s raised %r", message.id, message.num_attempts, exc)
            return _outcome.for_exception(
                exc, message.num_attempts, self.max_attempts, self.backoff
            )
        return _outcome.COMPLETE

    def _run_periodic(self, message: Message) -> _outcome.Outcome:
        job = self._periodic.get(message.channel or "")
        if job is None:
            return _outcome.Outcome("defer", delay_ms=UNKNOWN_PERIODIC_DELAY_MS)
        try:
            job.handler(message)
        except Exception:
            # A periodic job must keep its schedule: log and run again next interval.
            log.exception("periodic %s failed", job.name)
        return _outcome.Outcome("defer", delay_ms=job.interval_ms)

    def _settle_once(self, message: Message, outcome: _outcome.Outcome) -> str:
        if outcome.action == "complete":
            return message.complete()
        if outcome.action == "defer":
            return message.defer(delay_ms=outcome.delay_ms, state=outcome.state)
        return message.fail(outcome.error)

    def _settle(self, message: Message, outcome: _outcome.Outcome) -> str | None:
        # A connection that died (a killed backend, a restart) does not leave the message
        # locked until lock_ms runs out: the settle is re-issued on another connection.
        retries = iter(_timing.settle_retry_delays_s(self.lock_ms))
        while True:
            try:
                status = self._settle_once(message, outcome)
                break
            except psycopg.OperationalError as exc:
                delay = next(retries, None)
                if delay is None:
                    log.warning("could not %s message %s: %s", outcome.action, message.id, exc)
                    return None  # the lock expires and the message is redelivered: nothing is lost
                log.info("re-issuing %s of message %s: %s", outcome.action, message.id, exc)
                time.sleep(delay)
            except psycopg.Error as exc:
                # The lock will expire and the message be redelivered: nothing is lost.
                log.warning("could not %s message %s: %s", outcome.action, message.id, exc)
                return None
        with self._lock:
            if status in self.counts:
                self.counts[status] += 1
            else:
                self.counts["refused"] += 1
        if status not in ("completed", "deferred", "failed"):
            log.warning("%s of message %s refused: %s", outcome.action, message.id, status)
        return status

    # -- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_ms / 1000
        while not self._finished.wait(min(interval / 4, 0.5)):
            now = time.monotonic()
            with self._lock:
                due = [
                    f
                    for f in self._inflight.values()
                    if not f.abandoned and now - f.last_extended >= interval
                ]
            for entry in due:
                try:
                    status = entry.message.heartbeat(self.lock_ms)
                except psycopg.Error as exc:
                    log.warning("heartbeat of message %s failed: %s", entry.message.id, exc)
                    continue
                entry.last_extended = now
                if status != "extended":
                    log.warning("heartbeat of message %s refused: %s", entry.message.id, status)

    # -- shutdown ---------------------------------------------------------------------------

    def _drain(self) -> None:
        """Let running handlers finish within the grace period; defer the rest."""
        deadline = time.monotonic() + self.shutdown_grace_ms / 1000
        while self.in_flight and time.monotonic() < deadline:
            self._wake.wait(min(0.1, max(deadline - time.monotonic(), 0)))
            self._wake.clear()
        with self._lock:
            leftovers = list(self._inflight.values())
            for entry in leftovers:
                entry.abandoned = True
        for entry in leftovers:
            # Defer (not fail): another worker picks it up at once, attempts unchanged.
            try:
                status = entry.message.defer()
                log.warning("message %s still running at shutdown: %s", entry.message.id, status)
            except psycopg.Error as exc:
                log.warning("could not defer message %s at shutdown: %s", entry.message.id, exc)

    @contextmanager
    def _signals(self) -> Iterator[None]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("received %s; stopping", signal.Signals(signum).name)
            self.stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
