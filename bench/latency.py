"""Workload 5: single-dequeue latency in a small queue and in large or pathological ones.

Every shape has the same 1k ready messages (100 channels x 10) that dequeue
serves; the shapes add bulk around them. A separate 1k reference queue lives
beside each shape and is sampled alternately with it: each ratio compares the
shape with the 1k case measured in the same minute, on the same server state. The bulk
is written with plain INSERTs into lonnymq's tables in the state the API leaves behind (the
future-dated messages keep their producer hints, as message_create leaves
them) and lonnymq.verify() must find nothing wrong. Each sample is one
message_dequeue in its own transaction, rolled back, so every sample sees the
same shape. The plans of every statement the dequeue runs are captured with
auto_explain (log_nested_statements) and printed alongside.
"""

from __future__ import annotations

import re
import time
from typing import Any

from common import PAYLOAD, RESULTS, connect, log, percentile, reset_lonnymq

QUEUE = "lat"
BASE_QUEUE = "base"  # the 1k reference queue, sampled alternately with every shape
BASE_CHANNELS = 100
BASE_PER_CHANNEL = 10
LOCK_MS = 30000


def _now_ms(conn: Any) -> int:
    return int(conn.execute("SELECT lonnymq._now_ms()").fetchone()[0])


def _queue_id(conn: Any, queue: str = QUEUE) -> int:
    return int(conn.execute("SELECT id FROM lonnymq.queue WHERE name = %s", (queue,)).fetchone()[0])


def _ready_base(conn: Any, queue: str) -> None:
    """1k ready messages through the API, hints folded in (committed) like a live queue."""
    n = BASE_CHANNELS * BASE_PER_CHANNEL
    conn.execute(
        "SELECT count(*) FROM lonnymq.message_create_batch(%s, "
        "(SELECT array_agg('b' || lpad((1 + i %% %s)::text, 3, '0') ORDER BY i) "
        "FROM generate_series(0, %s - 1) i), "
        "array_fill(%s::bytea, ARRAY[%s]))",
        (queue, BASE_CHANNELS, n, PAYLOAD, n),
    )
    time.sleep(0.01)  # the hints are due strictly after creation
    conn.execute(
        "SELECT lonnymq._absorb_hints(%s, lonnymq._now_ms(), 1000000)", (_queue_id(conn, queue),)
    )


def _base(conn: Any) -> None:
    """A fresh database holding the reference queue and the shape's own 1k ready messages."""
    reset_lonnymq(conn)
    _ready_base(conn, BASE_QUEUE)
    _ready_base(conn, QUEUE)


def _insert_channels(
    conn: Any, prefix: str, count: int, extra_cols: str = "", extra_vals: str = ""
) -> None:
    conn.execute(
        f"INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms{extra_cols}) "
        f"SELECT %s, %s || lpad(i::text, 6, '0'), %s{extra_vals} FROM generate_series(1, %s) i",
        (_queue_id(conn), prefix, _now_ms(conn) - 3_600_000, count),
    )


def shape_ready(conn: Any, total: int) -> None:
    """total ready messages in the same 100 channels (appended behind the base heads)."""
    _base(conn)
    now = _now_ms(conn)
    conn.execute(
        "INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms) "
        "SELECT %s, c.id, %s::bytea, %s + i FROM generate_series(1, %s) i "
        "JOIN lonnymq.channel c "
        "ON c.queue_id = %s AND c.name = 'b' || lpad((1 + i %% %s)::text, 3, '0')",
        (
            _queue_id(conn),
            PAYLOAD,
            now,
            total - BASE_CHANNELS * BASE_PER_CHANNEL,
            _queue_id(conn),
            BASE_CHANNELS,
        ),
    )


def shape_future(conn: Any, total: int) -> None:
    """base + total messages due in the next day, in 1000 other channels, with their hints."""
    _base(conn)
    qid, now = _queue_id(conn), _now_ms(conn)
    _insert_channels(conn, "f", 1000)
    conn.execute(
        "WITH c AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM lonnymq.channel "
        "           WHERE queue_id = %s AND name LIKE 'f%%'), "
        "m AS (INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms) "
        "      SELECT %s, c.id, %s::bytea, %s + 3600000 + (i * 86400000::bigint / %s) "
        "      FROM generate_series(1, %s) i JOIN c ON c.k = i %% 1000 "
        "      RETURNING channel_id, dequeue_ms) "
        "INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms) "
        "SELECT %s, channel_id, dequeue_ms FROM m",
        (qid, qid, PAYLOAD, now, total, total, qid),
    )


def shape_saturated(conn: Any, channels: int) -> None:
    """base + channels at max_concurrency 1, each with one message in flight and one waiting."""
    _base(conn)
    qid, now = _queue_id(conn), _now_ms(conn)
    _insert_channels(
        conn,
        "s",
        channels,
        ", explicit, max_concurrency, locked_count, turn_seq",
        ", true, 1, 1, 1",
    )
    conn.execute(
        "INSERT INTO lonnymq.message "
        "(queue_id, channel_id, content, dequeue_ms, num_attempts, locked_until_ms) "
        "SELECT %s, c.id, %s::bytea, %s - 2000, 1, %s + 3600000 FROM lonnymq.channel c "
        "WHERE c.queue_id = %s AND c.name LIKE 's%%'",
        (qid, PAYLOAD, now, now, qid),
    )
    conn.execute(
        "INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms) "
        "SELECT %s, c.id, %s::bytea, %s - 1000 FROM lonnymq.channel c "
        "WHERE c.queue_id = %s AND c.name LIKE 's%%'",
        (qid, PAYLOAD, now, qid),
    )
    conn.execute(
        "UPDATE lonnymq.channel SET head_ms = %s - 1000 WHERE queue_id = %s AND name LIKE 's%%'",
        (now, qid),
    )


def shape_expired(conn: Any, total: int) -> None:
    """base + total messages whose locks expired (workers died), in 1000 channels."""
    _base(conn)
    qid, now = _queue_id(conn), _now_ms(conn)
    _insert_channels(conn, "e", 1000, ", locked_count, turn_seq", f", {total // 1000}, 1")
    conn.execute(
        "WITH c AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM lonnymq.channel "
        "           WHERE queue_id = %s AND name LIKE 'e%%') "
        "INSERT INTO lonnymq.message "
        "(queue_id, channel_id, content, dequeue_ms, num_attempts, locked_until_ms) "
        "SELECT %s, c.id, %s::bytea, %s - 600000, 1, %s - 300000 + (i * 240000::bigint / %s) "
        "FROM generate_series(0, %s - 1) i JOIN c ON c.k = i %% 1000",
        (qid, qid, PAYLOAD, now, now, total, total),
    )
    # channel_set recounts whatever in-flight accounting this version keeps.
    conn.execute(
        "SELECT count(lonnymq.channel_set(%s, c.name)) FROM lonnymq.channel c "
        "WHERE c.queue_id = %s AND c.name LIKE 'e%%'",
        (QUEUE, qid),
    )


def shape_empty(conn: Any, channels: int) -> None:
    """base + channels configured with channel_set but empty (never swept)."""
    _base(conn)
    _insert_channels(conn, "z", channels, ", explicit", ", true")


def shape_channel_less(conn: Any, total: int) -> None:
    """base + total ready channel-less messages (channel => NULL), created earlier than the base."""
    _base(conn)
    qid, now = _queue_id(conn), _now_ms(conn)
    conn.execute(
        "INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms) "
        "SELECT %s, NULL, %s::bytea, %s - 7200000 + i FROM generate_series(1, %s) i",
        (qid, PAYLOAD, now, total),
    )


def shape_completed(conn: Any, total: int) -> Any:
    """base + total messages delivered and completed since the last vacuum: a busy queue
    between two autovacuum runs. Their rows are deleted after the shape's VACUUM (the
    returned step), so their index entries stay behind, dead, as completes leave them;
    autovacuum is kept off the table until the samples are taken."""
    _base(conn)
    qid, now = _queue_id(conn), _now_ms(conn)
    _insert_channels(conn, "d", 100)
    conn.execute(
        "WITH c AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM lonnymq.channel "
        "           WHERE queue_id = %s AND name LIKE 'd%%') "
        "INSERT INTO lonnymq.message "
        "(queue_id, channel_id, content, dequeue_ms, num_attempts, locked_until_ms) "
        "SELECT %s, c.id, %s::bytea, %s - 600000, 1, %s + 600000 + i "
        "FROM generate_series(0, %s - 1) i JOIN c ON c.k = i %% 100",
        (qid, qid, PAYLOAD, now, now, total),
    )

    def complete_all(conn: Any) -> None:
        conn.execute("ALTER TABLE lonnymq.message SET (autovacuum_enabled = false)")
        conn.execute(
            "DELETE FROM lonnymq.message m USING lonnymq.channel c "
            "WHERE c.id = m.channel_id AND c.queue_id = %s AND c.name LIKE 'd%%'",
            (qid,),
        )

    return complete_all


def shapes(scale: float) -> list[tuple[str, str, Any, int]]:
    big, mid, sat = int(1_000_000 * scale), int(100_000 * scale), int(10_000 * scale)
    return [
        ("base_1k", "1k ready messages (100 channels)", lambda c: _base(c), 1000),
        ("ready_1m", f"{big:,} ready messages (100 channels)", lambda c: shape_ready(c, big), big),
        ("future_1m", f"1k ready + {big:,} future-dated", lambda c: shape_future(c, big), big),
        (
            "saturated_10k",
            f"1k ready + {sat:,} saturated channels",
            lambda c: shape_saturated(c, sat),
            sat,
        ),
        ("expired_100k", f"1k ready + {mid:,} expired locks", lambda c: shape_expired(c, mid), mid),
        ("empty_100k", f"1k ready + {mid:,} empty channels", lambda c: shape_empty(c, mid), mid),
        # Not one of the shapes: dead index entries of completed messages, which only
        # vacuum removes (the recovery probe walked them all, a heap fetch each, until 1.2).
        (
            "completed_100k",
            f"1k ready + {mid:,} completed since the last vacuum",
            lambda c: shape_completed(c, mid),
            mid,
        ),
        # Not one of the issue's shapes: channel-less backlog (workload 3's queue when it grows).
        (
            "channel_less_1m",
            f"1k ready + {big:,} channel-less ready",
            lambda c: shape_channel_less(c, big),
            big,
        ),
    ]


def _sample(
    conn: Any, samples: int, warmup: int, budget_s: float = 30.0
) -> tuple[list[float], list[float], Any]:
    """Alternates dequeues from the shape and from the 1k reference queue, so CPU noise
    from other work on the machine falls on both alike. A shape that is far too slow
    stops after budget_s (with at least 20 samples): its verdict is clear by then."""
    times: dict[str, list[float]] = {QUEUE: [], BASE_QUEUE: []}
    first = None
    deadline = time.monotonic() + budget_s
    for i in range(warmup + samples):
        if i >= warmup + 20 and time.monotonic() > deadline:
            break
        for queue in (QUEUE, BASE_QUEUE) if i % 2 == 0 else (BASE_QUEUE, QUEUE):
            t0 = time.perf_counter()
            rows = conn.execute(
                "SELECT * FROM lonnymq.message_dequeue(%s, %s)", (queue, LOCK_MS)
            ).fetchall()
            elapsed = (time.perf_counter() - t0) * 1000
            conn.rollback()
            if not rows:
                raise RuntimeError(f"dequeue from {queue} returned nothing: the shape is broken")
            if first is None and queue == QUEUE:
                first = rows[0]
            if i >= warmup:
                times[queue].append(elapsed)
    return times[QUEUE], times[BASE_QUEUE], first


PLAN_NOISE = re.compile(r"^\s*(Query Text:|Planning:|Buffers: shared hit=\d+$)")


def _explain(conn: Any) -> list[dict[str, Any]]:
    """Plans of every statement one dequeue runs (auto_explain at NOTICE level)."""
    notes: list[str] = []
    handler = lambda diag: notes.append(diag.message_primary or "")  # noqa: E731
    conn.add_notice_handler(handler)
    try:
        for setting in (
            "log_min_duration = 0",
            "log_analyze = on",
            "log_buffers = on",
            "log_nested_statements = on",
            "log_timing = on",
            "log_level = 'notice'",
        ):
            conn.execute(f"SET LOCAL auto_explain.{setting}")
        conn.execute("SELECT * FROM lonnymq.message_dequeue(%s, %s)", (QUEUE, LOCK_MS)).fetchall()
        conn.rollback()
    finally:
        conn.remove_notice_handler(handler)
    plans = []
    for note in notes:
        match = re.match(r"duration: ([\d.]+) ms\s+plan:\n(.*)", note, re.S)
        if not match or not re.search(
            r" on (message|channel|channel_hint|queue)\b", match.group(2)
        ):
            continue
        body = match.group(2)
        query = re.search(r"Query Text: (.*?)\n(?=\S)", body + "\nX", re.S)
        plan_text = body[query.end() :] if query else body
        plans.append(
            {
                "ms": float(match.group(1)),
                "query": re.sub(r"\s+", " ", query.group(1) if query else "")[:400],
                "plan": plan_text.rstrip(),
            }
        )
    return plans


def run(scale: float, samples: int, warmup: int, mode: str) -> dict[str, Any]:
    results: dict[str, Any] = {"samples": samples, "scale": scale, "shapes": {}}
    explain_lines: list[str] = []
    for key, label, build, size in shapes(scale):
        with connect() as conn:
            t0 = time.perf_counter()
            after_vacuum = build(conn)
            conn.execute("VACUUM ANALYZE lonnymq.message")
            conn.execute("VACUUM ANALYZE lonnymq.channel")
            conn.execute("VACUUM ANALYZE lonnymq.channel_hint")
            problems = [
                r[0] for r in conn.execute("SELECT * FROM lonnymq.verify() LIMIT 5").fetchall()
            ]
            if after_vacuum is not None:
                after_vacuum(conn)
            built_s = time.perf_counter() - t0
        try:
            with connect(autocommit=False) as conn:
                times, base_times, first = _sample(conn, samples, warmup)
                plans = _explain(conn)
        finally:
            with connect() as conn:
                conn.execute("ALTER TABLE lonnymq.message RESET (autovacuum_enabled)")
        entry: dict[str, Any] = {
            "label": label,
            "size": size,
            "build_s": round(built_s, 1),
            "verify_problems": problems,
            "p50_ms": percentile(times, 50),
            "p99_ms": percentile(times, 99),
            "mean_ms": sum(times) / len(times),
            "recovered": bool(first[-1]),
            "samples": len(times),
            # the 1k reference queue, sampled in the same minute
            "base_p50_ms": percentile(base_times, 50),
            "base_p99_ms": percentile(base_times, 99),
            "statements": len(plans),
            "plans": plans,
        }
        entry["p50_ratio"] = entry["p50_ms"] / entry["base_p50_ms"]
        entry["p99_ratio"] = entry["p99_ms"] / entry["base_p99_ms"]
        results["shapes"][key] = entry
        log(
            f"  w5 {key:15s} p50 {entry['p50_ms']:7.3f} ms ({entry['p50_ratio']:5.2f}x)  "
            f"p99 {entry['p99_ms']:7.3f} ms ({entry['p99_ratio']:5.2f}x)  "
            f"[1k ref {entry['base_p50_ms']:.3f}/{entry['base_p99_ms']:.3f}]  "
            f"({label}; built in {built_s:.0f}s; verify: {len(problems)} problems)"
        )
        explain_lines.append(
            f"==== {key}: {label} — p50 {entry['p50_ms']:.3f} ms, p99 {entry['p99_ms']:.3f} ms"
        )
        for p in plans:
            explain_lines.append(f"-- {p['ms']:.3f} ms: {p['query'][:200]}")
            explain_lines.extend(
                "   " + line for line in p["plan"].splitlines() if not PLAN_NOISE.match(line)
            )
        explain_lines.append("")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{mode}-w5-explain.txt").write_text("\n".join(explain_lines) + "\n")
    print("\n".join(explain_lines), flush=True)
    return results
