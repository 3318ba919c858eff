"""Workload 7 (opt-in, ~10 minutes per system): sustained load while a snapshot is held.

Producers and consumers each run at half of workload 1's measured capacity
(pgbench -R) for the whole run; an idle-in-transaction session holds the xmin
horizon (REPEATABLE READ with an xid) for the middle half. Every 10 s the
monitor records completions (pg_stat_user_tables.n_tup_del on the system's
message table), backlog, dead tuples and table/index sizes. pgbench logs every
transaction, whose latency (from its scheduled start: time spent behind the
offered rate counts) gives each phase's p50 and p99. Goal: the held phase
keeps >= 50% of the clean phase's throughput, its consumers' p99 stays within
10x the clean phase's, and it recovers afterwards.
`run_all` runs lonnymq, then the floor and the loaded peers the same way, one
after the other in the same run: each at half of its own capacity, each
against its own clean phase.
"""

from __future__ import annotations

import itertools
import math
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    PAYLOAD,
    connect,
    log,
    median,
    percentile,
    pgbench,
    pgbench_result,
    transaction_log,
)
from throughput import BY_NAME, CONSUMERS, PRODUCERS, run_once, seed


def _watched(system: str) -> tuple[str, ...]:
    """The system's tables (schema.table), as throughput.SYSTEMS lists them: the first holds
    its live messages, whose deletes are the completions."""
    return BY_NAME[system].tables


def _sample(conn: Any, system: str) -> dict[str, Any]:
    row: dict[str, Any] = {"t": time.monotonic()}
    for qualified in _watched(system):
        schema, table = qualified.split(".")
        stats = conn.execute(
            "SELECT n_tup_del, n_dead_tup, n_live_tup, "
            "pg_relation_size(relid), pg_indexes_size(relid) "
            "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
            (schema, table),
        ).fetchone()
        row[table] = {
            "deleted": stats[0],
            "dead": stats[1],
            "live": stats[2],
            "heap_bytes": stats[3],
            "index_bytes": stats[4],
        }
    row["backlog"] = conn.execute(f"SELECT count(*) FROM {_watched(system)[0]}").fetchone()[0]
    row["xmin_age"] = conn.execute(
        "SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL"
    ).fetchone()[0]
    return row


def _hold(start_after: float, hold_for: float, stop: threading.Event) -> None:
    if stop.wait(start_after):
        return
    with connect(autocommit=False) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT txid_current()").fetchone()
        log("  w7 snapshot held")
        stop.wait(hold_for)
        conn.rollback()
        log("  w7 snapshot released")


def run(minutes: float, synchronous_commit: str = "on", system: str = "lonnymq") -> dict[str, Any]:
    """Workload 7 on one system (any of throughput.SYSTEMS that runs workload 1)."""
    seconds = minutes * 60
    log(f"w7 {system}: measuring workload-1 capacity (3 x 10 s)")
    capacity = median(
        [
            run_once(system, "w1_lifecycle", synchronous_commit, 10)["messages_per_s"]
            for _ in range(3)
        ]
    )
    rate = capacity / 2
    log(
        f"w7 {system}: capacity {capacity:.0f} msg/s; running {minutes:g} min at {rate:.0f} msg/s, "
        f"snapshot held from {seconds / 4:.0f}s to {3 * seconds / 4:.0f}s"
    )
    defines = {"nchannels": 100, "payload": PAYLOAD, "batch": 1}
    with tempfile.TemporaryDirectory(prefix="lonnymq-w7-") as tmp, connect() as conn:
        logs = Path(tmp)
        seed(conn, system, 100)  # (which vacuums the system's tables)
        stop = threading.Event()
        holder = threading.Thread(target=_hold, args=(seconds / 4, seconds / 2, stop))
        producers = pgbench(
            f"{system}_create.sql",
            PRODUCERS,
            seconds,
            defines,
            synchronous_commit,
            rate=rate,
            progress=10,
            log_prefix=logs / "create",
        )
        consumers = pgbench(
            f"{system}_consume.sql",
            CONSUMERS,
            seconds,
            defines,
            synchronous_commit,
            rate=rate,
            progress=10,
            log_prefix=logs / "consume",
        )
        holder.start()
        t0 = time.monotonic()
        t0_epoch = time.time()
        samples = []
        while producers.poll() is None or consumers.poll() is None:
            samples.append(_sample(conn, system))
            time.sleep(10 - (time.monotonic() - t0) % 10)
        stop.set()
        holder.join()
        samples.append(_sample(conn, system))
        produced, consumed = pgbench_result(producers), pgbench_result(consumers)
        latency = {kind: _latency(logs / kind, t0_epoch, seconds) for kind in ("consume", "create")}
    tables = [q.split(".")[1] for q in _watched(system)]
    live = tables[0]
    series = []
    for a, b in itertools.pairwise(samples):
        dt = b["t"] - a["t"]
        series.append(
            {
                "t": round(b["t"] - t0, 1),
                "completed_per_s": (b[live]["deleted"] - a[live]["deleted"]) / dt,
                "backlog": b["backlog"],
                "xmin_age": b["xmin_age"],
                **{
                    f"{tab}_{k}": b[tab][k]
                    for tab in tables
                    for k in ("dead", "heap_bytes", "index_bytes")
                },
            }
        )

    rates = {
        name: median([s["completed_per_s"] for s in series if lo < s["t"] <= hi])
        for name, (lo, hi) in _phases(seconds).items()
    }
    clean, held, after = rates["clean"], rates["held"], rates["after"]
    consume = latency["consume"]
    p99_ratio = _ratio(consume["held"]["p99"], consume["clean"]["p99"])
    result = {
        "system": system,
        "minutes": minutes,
        "synchronous_commit": synchronous_commit,
        "capacity_msg_s": capacity,
        "target_msg_s": rate,
        "clean_msg_s": clean,
        "held_msg_s": held,
        "after_msg_s": after,
        "held_ratio": held / clean if clean else None,
        "after_ratio": after / clean if clean else None,
        # Per phase, transactions ending in it: p50 / p99 latency in ms, and their count.
        "latency_ms": latency,
        "held_p99_ratio": p99_ratio,
        "producer_progress": produced["progress"],
        "consumer_progress": consumed["progress"],
        "series": series,
    }
    log(
        f"w7 {system}: clean {clean:.0f} msg/s, held {held:.0f} ({result['held_ratio']:.2f}x), "
        f"after {after:.0f} ({result['after_ratio']:.2f}x); consumers' p99 "
        f"{consume['clean']['p99']:.1f} ms clean, {consume['held']['p99']:.1f} ms held "
        f"({'-' if p99_ratio is None else f'{p99_ratio:.1f}'}x)"
    )
    return result


def _ratio(a: float, b: float) -> float | None:
    """a / b, or None when either is NaN (a phase with no transaction) or b is 0."""
    return a / b if b and not math.isnan(a) and not math.isnan(b) else None


def _phases(seconds: float) -> dict[str, tuple[float, float]]:
    """Each phase of a run of `seconds` as (lo, hi] seconds from its start: before, during and
    after the hold (the middle half), the first 10 s of each left out."""
    return {
        "clean": (10, seconds / 4),
        "held": (seconds / 4 + 10, 3 * seconds / 4),
        "after": (3 * seconds / 4 + 10, seconds),
    }


def _latency(prefix: Path, t0_epoch: float, seconds: float) -> dict[str, dict[str, float]]:
    """p50 and p99 latency (ms) of the transactions logged under `prefix` that ended in each
    phase (_phases, as the throughput is counted)."""
    rows = transaction_log(prefix)
    phases = {}
    for name, (lo, hi) in _phases(seconds).items():
        ended = [ms for end, ms in rows if lo < end - t0_epoch <= hi]
        values = [ms for ms in ended if ms is not None]
        phases[name] = {
            "p50": percentile(values, 50),
            "p99": percentile(values, 99),
            "transactions": len(values),
            "failed": len(ended) - len(values),
        }
    return phases


def run_all(minutes: float, systems: list[str]) -> dict[str, dict[str, Any]]:
    """Workload 7 on each of `systems`, in that order: {system: result}. lonnymq has the goal;
    the floor and the peers show how much of the fall any PostgreSQL queue table shares."""
    unknown = [s for s in systems if s not in BY_NAME or "w1_lifecycle" not in BY_NAME[s].workloads]
    if unknown:
        raise ValueError(f"held-snapshot: unknown systems {unknown}; known: {sorted(BY_NAME)}")
    return {system: run(minutes, system=system) for system in systems}
