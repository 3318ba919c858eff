"""``WorkerHooks``: watch what a ``Worker`` or ``AsyncWorker`` does without subclassing it
(metrics, tracing, logging). Pass one or several as ``hooks=``.

Each call happens on the worker's own thread or event loop, right where the event happens,
so keep it quick; an exception raised by a hook is logged and ignored (a broken exporter
must not stop the work). Periodic (``every``) messages are not reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from . import _periodic
from ._outcome import Outcome
from .models import MessageData

log = logging.getLogger("lonnymq.worker")


class WorkerHooks:
    """Override the calls you need; the others do nothing."""

    def on_deliver(self, message: MessageData) -> None:
        """A message was dequeued and its handler is about to run."""

    def on_complete(self, message: MessageData, duration_s: float) -> None:
        """The handler returned and the message was completed."""

    def on_retry(self, message: MessageData, duration_s: float, delay_ms: int) -> None:
        """The handler raised (or asked to retry) and the message was deferred for another
        attempt in ``delay_ms``."""

    def on_fail(self, message: MessageData, duration_s: float, error: str | None) -> None:
        """The handler raised on the last allowed attempt: the message went to the archive."""

    def on_finish(self, message: MessageData) -> None:
        """The worker let go of the message, however it ended (also when the settle was
        refused or failed, or at shutdown): pairs with every ``on_deliver``."""


class Dispatch:
    """The worker's side: calls every hook, shielding the worker from their errors."""

    def __init__(self, hooks: WorkerHooks | Sequence[WorkerHooks]) -> None:
        self.hooks: tuple[WorkerHooks, ...] = (
            (hooks,) if isinstance(hooks, WorkerHooks) else tuple(hooks)
        )

    def delivered(self, message: MessageData) -> float:
        """Reports a delivery; returns the start time that ``settled`` needs."""
        if self.hooks and not _periodic.is_periodic(message.channel):
            for hook in self.hooks:
                self._call(hook.on_deliver, message)
        return time.monotonic()

    def settled(
        self, message: MessageData, outcome: Outcome | None, status: str | None, started: float
    ) -> None:
        """Reports how a delivery ended: ``status`` is what the settle returned, None when
        it was not settled (abandoned at shutdown, or the settle failed)."""
        if not self.hooks or _periodic.is_periodic(message.channel):
            return
        duration = time.monotonic() - started
        for hook in self.hooks:
            if outcome is not None and status == "completed":
                self._call(hook.on_complete, message, duration)
            elif outcome is not None and status == "deferred":
                self._call(hook.on_retry, message, duration, outcome.delay_ms)
            elif outcome is not None and status == "failed":
                self._call(hook.on_fail, message, duration, outcome.error)
            self._call(hook.on_finish, message)

    @staticmethod
    def _call(method: Callable[..., object], *args: object) -> None:
        try:
            method(*args)
        except Exception:
            log.exception("worker hook %r failed", method)
