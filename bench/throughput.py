"""Workloads 1-4: message lifecycle throughput, lonnymq against the floor.

Each run: reset the queue, seed a small backlog, VACUUM + CHECKPOINT, then 4
producer clients and 4 consumer clients (two pgbench processes) for a fixed
time. Messages per second = min(created, completed) / time, where completed =
seed + created - left: whichever side is slower bounds the full lifecycle.
Rounds interleave systems, workloads and synchronous_commit settings so
background load on the machine hits all of them alike; medians are reported.
"""

from __future__ import annotations

from typing import Any

from common import (PAYLOAD, connect, log, median, pgbench, pgbench_result, reset_floor,
                    reset_lonnymq, settle_server)

PRODUCERS = 4
CONSUMERS = 4
SEED = 2000

# name -> (channels: 0 = channel NULL, batch size); the goal is checked in report.py.
WORKLOADS: dict[str, dict[str, Any]] = {
    "w1_lifecycle": {"channels": 100, "batch": 1},
    "w2_hot_channel": {"channels": 1, "batch": 1},
    "w3_channel_less": {"channels": 0, "batch": 1},
    "w4_batches": {"channels": 100, "batch": 100},
}
SYSTEMS = ("floor", "lonnymq")
# A diagnostic variant, run for workload 1 only: lonnymq with its NOTIFY events
# off. The floor sends none; in PostgreSQL 15 every notifying commit holds a
# cluster-wide lock through its WAL flush, so this row shows what the events
# cost. The goals are judged on the default (events on).
NOTIFY_OFF = "lonnymq_notify_off"
NOTIFY_OFF_WORKLOADS = ("w1_lifecycle",)


def _scripts(system: str, batch: int) -> tuple[str, str]:
    kind = "_batch" if batch > 1 else ""
    return f"{system}{kind}_create.sql", f"{system}{kind}_consume.sql"


def _live(conn: Any, system: str) -> int:
    table = "floor.message" if system == "floor" else "lonnymq.message"
    return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def seed(conn: Any, system: str, channels: int) -> None:
    """Empties the system's queue and puts SEED messages on `channels` channels (0: none)."""
    if system == "floor":
        reset_floor(conn)
        conn.execute(
            "INSERT INTO floor.message (channel, content) "
            "SELECT CASE WHEN %s > 0 THEN 'c' || (1 + i %% %s) END, %s::bytea "
            "FROM generate_series(1, %s) i",
            (channels, max(channels, 1), PAYLOAD, SEED))
        settle_server(conn, ["floor.message"])
    else:
        reset_lonnymq(conn)
        conn.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch('bench', "
            "(SELECT array_agg(CASE WHEN %s > 0 THEN 'c' || (1 + i %% %s) END) "
            " FROM generate_series(1, %s) i), array_fill(%s::bytea, ARRAY[%s]))",
            (channels, max(channels, 1), SEED, PAYLOAD, SEED))
        settle_server(conn, [f"lonnymq.{t}" for t in ("message", "channel", "channel_hint", "queue")])


def run_once(system: str, workload: str, synchronous_commit: str, seconds: float,
             capture_statements: bool = False) -> dict[str, Any]:
    spec = WORKLOADS[workload]
    settings = "-c lonnymq.notify=off" if system == NOTIFY_OFF else ""
    base = "lonnymq" if system == NOTIFY_OFF else system
    create, consume = _scripts(base, spec["batch"])
    defines = {"nchannels": spec["channels"], "payload": PAYLOAD, "batch": spec["batch"]}
    with connect() as conn:
        seed(conn, base, spec["channels"])
        before = _live(conn, base)
        if capture_statements:
            conn.execute("SELECT pg_stat_statements_reset()")
        producers = pgbench(create, PRODUCERS, seconds, defines, synchronous_commit, settings=settings)
        consumers = pgbench(consume, CONSUMERS, seconds, defines, synchronous_commit, settings=settings)
        produced = pgbench_result(producers)
        consumed = pgbench_result(consumers)
        after = _live(conn, base)
        statements = _top_statements(conn) if capture_statements else None
    created = produced["transactions"] * spec["batch"]
    completed = before + created - after
    # A message's whole life (create, dequeue, complete) happened as often as the
    # slower side allowed: the seed drained by fast consumers is not throughput.
    lifecycle = min(created, completed)
    result = {
        "system": system, "workload": workload, "synchronous_commit": synchronous_commit,
        "seconds": seconds, "created": created, "completed": completed,
        "messages_per_s": lifecycle / seconds, "created_per_s": created / seconds,
        "completed_per_s": completed / seconds,
        "backlog_start": before, "backlog_end": after,
        "backlog_growth_per_s": (after - before) / seconds,
        "consumer_transactions": consumed["transactions"],
        # Consumer passes that found nothing although the backlog never ran dry here.
        "empty_dequeue_fraction": (
            max(0.0, 1 - (completed / spec["batch"]) / consumed["transactions"])
            if consumed["transactions"] else None),
        "producer_latency_ms": produced["latency_ms"],
        "consumer_latency_ms": consumed["latency_ms"],
    }
    if statements is not None:
        result["top_statements"] = statements
    log(f"  {workload:16s} {system:8s} sync={synchronous_commit:3s} "
        f"{result['messages_per_s']:8.0f} msg/s  created {result['created_per_s']:8.0f}/s  "
        f"completed {result['completed_per_s']:8.0f}/s  "
        f"backlog {before}->{after}")
    return result


def _top_statements(conn: Any) -> list[dict[str, Any]]:
    """Where the server spent its time (pg_stat_statements, nested statements included)."""
    rows = conn.execute(
        "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 4), "
        "       shared_blks_hit + shared_blks_read, left(regexp_replace(query, '\\s+', ' ', 'g'), 300) "
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "ORDER BY total_exec_time DESC LIMIT 25").fetchall()
    return [{"calls": r[0], "total_ms": float(r[1]), "mean_ms": float(r[2]), "blocks": r[3],
             "query": r[4]} for r in rows]


def run(rounds: int, seconds: float, workloads: list[str]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        log(f"throughput round {r + 1}/{rounds}")
        for workload in workloads:
            for sync in ("on", "off"):
                # Alternate which system goes first, so neither always inherits the other's wake.
                systems = SYSTEMS + ((NOTIFY_OFF,) if workload in NOTIFY_OFF_WORKLOADS else ())
                order = systems if (r % 2 == 0) else tuple(reversed(systems))
                for system in order:
                    capture = (r == rounds - 1 and sync == "on")
                    result = run_once(system, workload, sync, seconds, capture_statements=capture)
                    result["round"] = r + 1
                    runs.append(result)
    return {"runs": runs, "summary": summarize(runs), "rounds": rounds, "seconds": seconds,
            "producers": PRODUCERS, "consumers": CONSUMERS, "seed": SEED}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median messages/s per (workload, sync, system) and the lonnymq/floor ratio."""
    summary: dict[str, Any] = {}
    keys = sorted({(r["workload"], r["synchronous_commit"]) for r in runs})
    for workload, sync in keys:
        entry: dict[str, Any] = {}
        for system in SYSTEMS + (NOTIFY_OFF,):
            sel = [r for r in runs if r["workload"] == workload
                   and r["synchronous_commit"] == sync and r["system"] == system]
            if not sel:
                continue
            entry[system] = {
                "messages_per_s": median([r["messages_per_s"] for r in sel]),
                "all_messages_per_s": [round(r["messages_per_s"], 1) for r in sel],
                "backlog_growth_per_s": median([r["backlog_growth_per_s"] for r in sel]),
                "empty_dequeue_fraction": median([r["empty_dequeue_fraction"] or 0 for r in sel]),
            }
        if "floor" in entry and "lonnymq" in entry and entry["floor"]["messages_per_s"]:
            # Ratio of medians, and the median of per-round ratios (robust to drifting load).
            entry["ratio"] = entry["lonnymq"]["messages_per_s"] / entry["floor"]["messages_per_s"]
            per_round = []
            for rnd in sorted({r["round"] for r in runs}):
                a = [r for r in runs if r["round"] == rnd and r["workload"] == workload
                     and r["synchronous_commit"] == sync]
                f = [x["messages_per_s"] for x in a if x["system"] == "floor"]
                q = [x["messages_per_s"] for x in a if x["system"] == "lonnymq"]
                if f and q and f[0]:
                    per_round.append(q[0] / f[0])
            entry["ratio_per_round"] = [round(x, 3) for x in per_round]
            entry["ratio_median_of_rounds"] = median(per_round)
        if "floor" in entry and NOTIFY_OFF in entry and entry["floor"]["messages_per_s"]:
            entry["ratio_notify_off"] = entry[NOTIFY_OFF]["messages_per_s"] / entry["floor"]["messages_per_s"]
        summary[f"{workload}/sync_{sync}"] = entry
    return summary
