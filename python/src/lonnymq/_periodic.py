"""Periodic work: one durable message per name that defers itself and never completes.

The message lives in its own channel (so the worker recognises it without decoding content,
and it never competes with a tenant's limits) and carries a dedup key, so however many
workers start together and try to create it, only one live message exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

CHANNEL_PREFIX = "lonnymq.every:"
# The error recorded in a periodic message's state is cut here: the log has the rest.
MAX_STATE_ERROR_CHARS = 500

H = TypeVar("H", bound=Callable[..., object])


def channel_for(name: str) -> str:
    return CHANNEL_PREFIX + name


def dedup_key_for(name: str) -> str:
    return CHANNEL_PREFIX + name


def is_periodic(channel: str | None) -> bool:
    return channel is not None and channel.startswith(CHANNEL_PREFIX)


def interval_ms(interval: timedelta | int) -> int:
    """A timedelta, or an int in milliseconds (like every other duration in the API)."""
    ms = int(interval.total_seconds() * 1000) if isinstance(interval, timedelta) else interval
    if ms <= 0:
        raise ValueError("a periodic interval must be positive")
    return ms


@dataclass(frozen=True)
class Periodic(Generic[H]):
    name: str
    interval_ms: int
    handler: H

    @property
    def channel(self) -> str:
        return channel_for(self.name)

    @property
    def dedup_key(self) -> str:
        return dedup_key_for(self.name)


def run_state(interval_ms: int, error: BaseException | None) -> bytes:
    """The state a periodic message keeps after each run, for the dashboard's Schedules page
    (``periodic_summary`` in SQL): its interval, when it last ran, and how that run ended."""
    text = None if error is None else f"{type(error).__name__}: {error}"[:MAX_STATE_ERROR_CHARS]
    ran_at = datetime.now(UTC).isoformat(timespec="seconds")
    return json.dumps({"interval_ms": interval_ms, "ran_at": ran_at, "error": text}).encode()
