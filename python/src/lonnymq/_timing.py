"""How long an idle worker sleeps before it dequeues again (shared by both workers)."""

from __future__ import annotations

import time

# When wait_hint_ms says "ready now" but the dequeue found nothing (every ready channel is
# saturated or rate-limited), back off from this...
MIN_RETRY_MS = 20
# ...to this, so a blocked queue costs a few dequeues a second, not a busy loop.
MAX_RETRY_MS = 1000


def idle_sleep_ms(hint_ms: int | None, retry_ms: int, max_sleep_ms: int) -> int:
    """Sleep after an empty dequeue: until the hinted time, capped; ``retry_ms`` when the
    hint is 0; ``max_sleep_ms`` when the queue is empty (a NOTIFY wakes us earlier)."""
    if hint_ms is None:
        return max_sleep_ms
    if hint_ms <= 0:
        return min(retry_ms, max_sleep_ms)
    return min(hint_ms, max_sleep_ms)


def next_retry_ms(retry_ms: int, hint_ms: int | None, woken_early: bool) -> int:
    """The back-off after an empty dequeue: doubles while dequeues keep coming back empty
    although work was said to be ready (a hint of 0, or a wake-up that cut the previous
    sleep short); back to the minimum otherwise."""
    if hint_ms == 0 or woken_early:
        return min(retry_ms * 2, MAX_RETRY_MS)
    return MIN_RETRY_MS


def early_wake_floor_s(retry_ms: int, planned_ms: int, started: float) -> float:
    """How much longer to wait after a wake-up that cut a sleep short, before dequeuing.

    A wake-up is only a hint: NOTIFY needs no privilege, so any role can send ``lonnymq``
    notifications by the thousand. After an empty dequeue the next one therefore waits at
    least ``retry_ms`` (never longer than the planned sleep), and ``next_retry_ms`` doubles
    that while early wake-ups keep finding nothing: a flood of forged notifications costs an
    idle worker about one dequeue a second, while a real one after a quiet spell is acted on
    at once (the floor counts from the start of the sleep).
    """
    return max(0.0, min(retry_ms, planned_ms) / 1000 - (time.monotonic() - started))


# A settle whose connection died is re-issued on another connection for at most this long
# (and never past half the lock): first after SETTLE_RETRY_FIRST_S, doubling to 1 s.
SETTLE_RETRY_MAX_S = 10.0
SETTLE_RETRY_FIRST_S = 0.05


def settle_retry_delays_s(lock_ms: int) -> list[float]:
    """The pauses before each re-issue of a settle lost with its connection. The attempt
    number (the fencing token) makes a re-issue safe: a settle that did commit before the
    connection died, or a delivery redelivered since, is refused, never applied twice."""
    budget = min(SETTLE_RETRY_MAX_S, lock_ms / 2000)
    delays, delay, total = [], SETTLE_RETRY_FIRST_S, 0.0
    while total + delay <= budget:
        delays.append(delay)
        total += delay
        delay = min(delay * 2, 1.0)
    return delays


# A dequeue, or the LISTEN connection, that failed with its connection is tried again at
# once, then after ERROR_PAUSE_FIRST_S doubling to ERROR_PAUSE_MAX_S while failures repeat.
ERROR_PAUSE_FIRST_S = 0.05
ERROR_PAUSE_MAX_S = 1.0


def next_error_pause_s(pause_s: float) -> float:
    """The pause after the one just taken (``0.0`` for the first failure). The usual first
    failure is one connection killed while it sat in the pool: another one, or a new one,
    works at once, so waiting would only add latency. Repeated failures mean the server is
    away: then a few tries a second (the pool reconnects on the same schedule, see _pool)."""
    if pause_s <= 0:
        return ERROR_PAUSE_FIRST_S
    return min(pause_s * 2, ERROR_PAUSE_MAX_S)
