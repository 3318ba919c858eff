"""Exponential backoff with jitter for handler failures."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt ``n + 1`` after attempt ``n`` failed.

    ``base_ms * factor ** (n - 1)`` capped at ``max_ms``; ``jitter`` is the fraction of that
    delay drawn at random, so workers that failed together do not retry together.
    """

    base_ms: int = 1000
    factor: float = 2.0
    max_ms: int = 300_000
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.max_ms < 0 or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError(
                "backoff needs base_ms >= 0, max_ms >= 0, factor >= 1, 0 <= jitter <= 1"
            )

    def delay_ms(self, num_attempts: int, rng: random.Random | None = None) -> int:
        """Delay in milliseconds after the ``num_attempts``-th delivery failed."""
        exponent = max(num_attempts - 1, 0)
        # Cap the exponent first: factor ** large overflows floats long before max_ms matters.
        raw = min(float(self.max_ms), self.base_ms * self.factor ** min(exponent, 64))
        fixed = raw * (1 - self.jitter)
        spread = raw * self.jitter
        return int(fixed + (rng or random).random() * spread)


DEFAULT_BACKOFF = Backoff()
