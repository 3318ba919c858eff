"""Bookkeeping for a delivery a worker holds: when it was last heartbeated, whether its
outcome waits in the settle buffer, and whether the worker gave it up at shutdown (so a late
handler result is not applied)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

M = TypeVar("M")


class Delivered(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def num_attempts(self) -> int: ...


def delivery(message: Delivered) -> tuple[int, int]:
    """The key of a delivery, not of a message: the same worker may hold an expired attempt
    and its redelivery at once."""
    return (message.id, message.num_attempts)


@dataclass
class InFlight(Generic[M]):
    message: M
    last_extended: float = field(default_factory=time.monotonic)
    # The handler is done and its settle waits for a flush: the lock is still ours.
    awaiting_flush: bool = False
    abandoned: bool = False
    # When its handler started (WorkerHooks measure durations from it).
    started: float = field(default_factory=time.monotonic)
