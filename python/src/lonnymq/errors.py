"""Exceptions a handler raises to steer the worker, and errors the client raises."""

from __future__ import annotations

from ._content import Content


class LonnymqError(Exception):
    """Base class for errors raised by the lonnymq client itself."""


class Retry(Exception):
    """Raise from a handler to defer the message instead of completing it.

    The worker defers with exactly ``delay_ms`` (no backoff) and saves ``state`` when given.
    It never turns a ``Retry`` into a fail; only the channel's ``max_attempts`` (enforced by
    the extension, since every delivery counts as an attempt) can dead-letter such a message.
    """

    def __init__(self, delay_ms: int = 0, state: Content | None = None) -> None:
        super().__init__(f"retry in {delay_ms} ms")
        self.delay_ms = delay_ms
        self.state = state
