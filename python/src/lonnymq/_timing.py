"""How long an idle worker sleeps before it dequeues again (shared by both workers)."""

from __future__ import annotations

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


def next_retry_ms(retry_ms: int) -> int:
    return min(retry_ms * 2, MAX_RETRY_MS)
