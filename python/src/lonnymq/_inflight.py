"""Bookkeeping for messages a worker holds: when they were last heartbeated, and whether
the worker gave them up at shutdown (so a late handler result is not applied)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Generic, TypeVar

M = TypeVar("M")


@dataclass
class InFlight(Generic[M]):
    message: M
    last_extended: float = field(default_factory=time.monotonic)
    abandoned: bool = False
