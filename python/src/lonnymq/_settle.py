"""Settles a worker holds back and sends in batches (shared by ``Worker`` and ``AsyncWorker``).

A handler's outcome is not sent at once: it waits in a ``SettleBuffer`` until the oldest
waiting settle is ``interval_ms`` old or ``batch_size`` settles wait. One flush then sends
every waiting complete as one ``message_complete_batch`` (one statement, one commit: the
WAL flush is shared), and each defer or fail as a statement of its own (the SQL API has no
batch call for them; they are the retry path, rarely hot). The buffer only keeps time and
order; the workers do the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from ._outcome import Outcome

# Bounds of the options. A longer interval would hold channel slots (and the locks behind
# them) long after the work is done; a bigger batch only lengthens one transaction.
MAX_INTERVAL_MS = 1000
MAX_BATCH_SIZE = 1000
DEFAULT_INTERVAL_MS = 10
DEFAULT_BATCH_SIZE = 100

# The statuses of an action that took effect; anything else (not_found, state_invalid) means
# the delivery was no longer ours, e.g. its lock expired and it was delivered again.
APPLIED = frozenset({"completed", "deferred", "failed"})

M = TypeVar("M")


def check_options(interval_ms: int, batch_size: int) -> None:
    if not 0 <= interval_ms <= MAX_INTERVAL_MS:
        raise ValueError(f"settle_interval_ms must be between 0 and {MAX_INTERVAL_MS}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"settle_batch_size must be between 1 and {MAX_BATCH_SIZE}")


@dataclass(frozen=True)
class Settle(Generic[M]):
    message: M
    outcome: Outcome
    added_at: float  # time.monotonic() when the handler finished


class SettleBuffer(Generic[M]):
    """Settles waiting for a flush, oldest first. Not thread-safe: the caller locks."""

    def __init__(self, interval_ms: int, batch_size: int) -> None:
        check_options(interval_ms, batch_size)
        self.interval_s = interval_ms / 1000
        self.batch_size = batch_size
        self._items: list[Settle[M]] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, message: M, outcome: Outcome, now: float) -> None:
        self._items.append(Settle(message, outcome, now))

    def wait_s(self, now: float) -> float | None:
        """Seconds until a flush is due: 0 when due now, None when nothing waits."""
        if not self._items:
            return None
        if len(self._items) >= self.batch_size:
            return 0.0
        return max(self._items[0].added_at + self.interval_s - now, 0.0)

    def take(self) -> list[Settle[M]]:
        """The oldest ``batch_size`` settles, removed from the buffer."""
        batch, self._items = self._items[: self.batch_size], self._items[self.batch_size :]
        return batch

    def put_back(self, settles: list[Settle[M]]) -> None:
        """Settles a failed flush did not send: first in line (and due) for the next one."""
        self._items = settles + self._items


def split(batch: list[Settle[M]]) -> tuple[list[Settle[M]], list[Settle[M]]]:
    """(completes, everything else), each in buffer order."""
    completes = [s for s in batch if s.outcome.action == "complete"]
    others = [s for s in batch if s.outcome.action != "complete"]
    return completes, others
