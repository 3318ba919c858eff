"""A waiter on many queues that never dequeues (``lonnymq tail``, the dashboard's live
pages): which queues to announce (``wait_begin``), end (``wait_end``) or announce again.

Producers send ``lonnymq`` events only while a consumer waits on the queue. ``wait_begin``
returns how long its caller should sleep at most (NULL: until notified); a Worker dequeues
and announces itself again once that time is up, so a ``wait_begin`` that could not
announce it (its lock was taken at that instant) costs it nothing. A waiter that only
listens must do the same or miss the queue's events for good: here a queue whose
``wait_begin`` returned a time is announced again once that time is up, and no sooner than
a delay doubling from RETRY_FIRST_S to RETRY_MOST_S. The time does not say whether the
lock was taken (a queue with ready messages answers 0 every time), but a lock is missed
only for an instant: the first retries take it, and a queue that keeps answering a time
costs one announcement per RETRY_MOST_S. A queue announced with NULL stays announced
until it is ended.

The sync and asyncio callers send the statements (``_sql.ANNOUNCE``, ``_sql.WITHDRAW``);
this class only keeps the book.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RETRY_FIRST_S = 0.1
RETRY_MOST_S = 60.0


@dataclass(frozen=True)
class Plan:
    """One round: begin ``begin`` (new queues and ``again``), then end ``ended`` (``again``
    and ``gone``). A queue announced again is begun before its old announcement ends, so it
    stays announced throughout: the slot's lock is counted and ``wait_end`` ends one
    ``wait_begin``'s share, or only the record of one that did not announce, so whichever
    of the two took, the queue is announced after the round."""

    again: list[str]
    begin: list[str]
    gone: list[str]

    @property
    def ended(self) -> list[str]:
        return self.again + self.gone

    def __bool__(self) -> bool:
        return bool(self.begin or self.gone)


class Announcements:
    def __init__(self) -> None:
        self.held: set[str] = set()  # queues whose wait_begin ran and wait_end not yet
        self._retry: dict[str, tuple[float, float]] = {}  # queue -> (due, delay)

    def plan(self, queues: Iterable[str], now: float) -> Plan:
        wanted = list(dict.fromkeys(queues))
        again = [q for q in wanted if q in self.held and self._due(q, now)]
        new = [q for q in wanted if q not in self.held]
        keep = set(wanted)
        return Plan(again, new + again, [q for q in self.held if q not in keep])

    def record(self, plan: Plan, hints: Sequence[tuple[str, int | None]], now: float) -> None:
        """What the round's ``wait_begin`` calls returned, (queue, ms or None) each."""
        self.held.update(plan.begin)
        self.held.difference_update(plan.gone)
        for queue in plan.gone:
            self._retry.pop(queue, None)
        for queue, hint in hints:
            if hint is None:
                self._retry.pop(queue, None)
                continue
            previous = self._retry.get(queue)
            delay = RETRY_FIRST_S if previous is None else min(previous[1] * 2, RETRY_MOST_S)
            self._retry[queue] = (now + max(hint / 1000, delay), delay)

    def _due(self, queue: str, now: float) -> bool:
        retry = self._retry.get(queue)
        return retry is not None and retry[0] <= now

    def next_due(self) -> float | None:
        """When the next queue is to be announced again (monotonic), if any."""
        return min((due for due, _delay in self._retry.values()), default=None)
