"""Workload 6: fairness and rate limits under 8 concurrent consumers.

Fairness: one channel with a 100k backlog, created first, then 99 channels
with 100 messages each, all through the API. 8 consumers dequeue one message
and complete it (two commits), recording the database time of each delivery
(locked_until - lock_ms, read in the dequeue's transaction). Over the first
9,900 deliveries the big channel should get 1% and Jain's index over the
backlogged channels should be >= 0.99.

Rate limits: 4 channels with release_interval_ms and 4 unlimited channels,
all backlogged; the gaps between consecutive deliveries of a rate-limited
channel must never be shorter than its interval.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from common import PAYLOAD, connect, log, reset_lonnymq, scalar

LOCK_MS = 30000
CONSUMERS = 8


def _create(conn: Any, queue: str, channel: str, count: int) -> None:
    for start in range(0, count, 5000):
        n = min(5000, count - start)
        conn.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch(%s, "
            "array_fill(%s::text, ARRAY[%s]), array_fill(%s::bytea, ARRAY[%s]))",
            (queue, channel, n, PAYLOAD, n),
        )


def _consume(
    queue: str,
    stop_after: int | None,
    deadline: float,
    out: list[tuple[int, float, str, int]],
    lock: threading.Lock,
) -> None:
    with connect(autocommit=False) as conn:
        while time.monotonic() < deadline:
            with lock:
                if stop_after is not None and len(out) >= stop_after:
                    return
            row = conn.execute(
                "SELECT id, channel, num_attempts FROM lonnymq.message_dequeue(%s, %s)",
                (queue, LOCK_MS),
            ).fetchone()
            if row is None:
                conn.rollback()
                time.sleep(0.002)
                continue
            turn_ms = scalar(
                conn,
                "SELECT locked_until_ms - %s FROM lonnymq.message WHERE id = %s",
                (LOCK_MS, row[0]),
            )
            conn.commit()
            received = time.monotonic()
            conn.execute("SELECT lonnymq.message_complete(%s, %s)", (row[0], row[2]))
            conn.commit()
            with lock:
                out.append((turn_ms, received, row[1], row[0]))


def _run_consumers(
    queue: str, stop_after: int | None, seconds: float
) -> list[tuple[int, float, str, int]]:
    out: list[tuple[int, float, str, int]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_consume, args=(queue, stop_after, deadline, out, lock))
        for _ in range(CONSUMERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(out)


def jain(values: Sequence[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if values else float("nan")


def fairness(big: int, small_channels: int, small: int, window: int) -> dict[str, Any]:
    with connect() as conn:
        reset_lonnymq(conn)
        _create(conn, "fair", "big", big)
        for i in range(small_channels):
            _create(conn, "fair", f"small{i:02d}", small)
        conn.execute("VACUUM ANALYZE lonnymq.message")
        conn.execute("VACUUM ANALYZE lonnymq.channel_hint")
    t0 = time.monotonic()
    deliveries = _run_consumers("fair", window + 8 * CONSUMERS, 600)
    elapsed = time.monotonic() - t0
    first = deliveries[:window]
    counts = Counter(d[2] for d in first)
    share = counts["big"] / len(first)
    per_channel = [counts.get("big", 0)] + [
        counts.get(f"small{i:02d}", 0) for i in range(small_channels)
    ]
    # Where the big channel's turns fell: its cumulative count after each delivery.
    cumulative, running = [], 0
    for d in first:
        running += d[2] == "big"
        cumulative.append(running)
    result = {
        "big_backlog": big,
        "small_channels": small_channels,
        "small_backlog": small,
        "window": len(first),
        "big_share": share,
        "jain_index": jain(per_channel),
        "big_count": counts["big"],
        "small_min": min(per_channel[1:]),
        "small_max": max(per_channel[1:]),
        "deliveries_per_s": len(deliveries) / elapsed,
        "big_cumulative": cumulative[:: max(1, len(cumulative) // 500)],
        "big_first_100_positions": [i for i, d in enumerate(first) if d[2] == "big"][:100],
    }
    log(
        f"  w6 fairness: big share {share:.2%} (goal 1% +- 0.2%), Jain {result['jain_index']:.4f} "
        f"over {len(first)} deliveries, small min/max {result['small_min']}/{result['small_max']}"
    )
    return result


def rate_limits(interval_ms: int, seconds: float) -> dict[str, Any]:
    limited = [f"rl{i}" for i in range(4)]
    with connect() as conn:
        reset_lonnymq(conn)
        for ch in limited:
            conn.execute(
                "SELECT lonnymq.channel_set('rate', %s, release_interval_ms => %s)",
                (ch, interval_ms),
            )
            _create(conn, "rate", ch, 200)
        for i in range(4):
            _create(conn, "rate", f"free{i}", 5000)
    deliveries = _run_consumers("rate", None, seconds)
    turns: dict[str, list[int]] = defaultdict(list)
    for turn_ms, _recv, channel, _id in deliveries:
        turns[channel].append(turn_ms)
    gaps = {ch: [b - a for a, b in itertools.pairwise(sorted(turns[ch]))] for ch in limited}
    min_gap = min((min(g) for g in gaps.values() if g), default=None)
    violations = sum(1 for g in gaps.values() for x in g if x < interval_ms)
    result: dict[str, Any] = {
        "interval_ms": interval_ms,
        "seconds": seconds,
        "limited_deliveries": {ch: len(turns[ch]) for ch in limited},
        "max_allowed_per_channel": int(seconds * 1000 / interval_ms) + 1,
        "unlimited_deliveries": {f"free{i}": len(turns[f"free{i}"]) for i in range(4)},
        "min_gap_ms": min_gap,
        "violations": violations,
    }
    log(
        f"  w6 rate limits: interval {interval_ms} ms, min observed gap {min_gap} ms, "
        f"{violations} violations, "
        f"per limited channel {list(result['limited_deliveries'].values())} "
        f"(at most {result['max_allowed_per_channel']})"
    )
    return result


def run(scale: float) -> dict[str, Any]:
    return {
        "fairness": fairness(int(100_000 * scale), 99, 100, 9900),
        "rate_limits": rate_limits(100, 5.0 if scale >= 1 else 2.0),
    }
