"""Workloads 1-4: message lifecycle throughput, lonnymq against the floor and the peer queues.

Each run: reset the queue, seed a small backlog, VACUUM + CHECKPOINT, then 4
producer clients and 4 consumer clients (two pgbench processes) for a fixed
time. Messages per second = min(created, completed) / time, where completed =
seed + created - left: whichever side is slower bounds the full lifecycle.
Rounds interleave systems, workloads and synchronous_commit settings so
background load on the machine hits all of them alike; medians are reported.
The peers (PGMQ, the original LonnyMQ) run when prepare_database() loaded them.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    BENCH_DIR,
    PAYLOAD,
    PEERS,
    PGMQ_PAYLOAD,
    PGMQ_QUEUE,
    connect,
    log,
    median,
    percentile,
    pgbench,
    pgbench_result,
    reset_floor,
    reset_lonnymq,
    reset_lonnymq_original,
    reset_pgmq,
    settle_server,
)

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
# A diagnostic variant, run for workload 1 only: lonnymq while a consumer waits
# on the queue throughout (a session inside lonnymq.wait_begin), so that every
# create sends its NOTIFY. The default run has no waiter (pgbench consumers
# never sleep), and producers notify only while one waits. In PostgreSQL 15
# every notifying commit holds a cluster-wide lock through its WAL flush, so
# this row shows what the events cost when they are on. The floor sends none.
WAITED = "lonnymq_waited"
WAITED_WORKLOADS = ("w1_lifecycle",)


def _seed_floor(conn: Any, channels: list[str | None]) -> None:
    reset_floor(conn)
    if not channels:
        return
    conn.execute(
        "INSERT INTO floor.message (channel, content) "
        "SELECT c, %s::bytea FROM unnest(%s::text[]) c",
        (PAYLOAD, channels),
    )


def _seed_lonnymq(conn: Any, channels: list[str | None]) -> None:
    reset_lonnymq(conn)
    if not channels:
        return
    conn.execute(
        "SELECT count(*) FROM lonnymq.message_create_batch('bench', %s::text[], "
        "array_fill(%s::bytea, ARRAY[%s]))",
        (channels, PAYLOAD, len(channels)),
    )


def _seed_pgmq(conn: Any, channels: list[str | None]) -> None:
    # PGMQ has no channels: the same number of messages, all in its one queue.
    reset_pgmq(conn)
    if not channels:
        return
    conn.execute(
        "SELECT count(*) FROM pgmq.send_batch(%s, array_fill(%s::jsonb, ARRAY[%s]))",
        (PGMQ_QUEUE, PGMQ_PAYLOAD, len(channels)),
    )


def _seed_lonnymq_original(conn: Any, channels: list[str | None]) -> None:
    # It has no batch create: one message_create per message, on channels declared first.
    reset_lonnymq_original(conn, sorted({c for c in channels if c is not None}))
    created = conn.execute(
        "SELECT count(*) FROM unnest(%s::text[]) c, lonny_up.message_create(c, %s::bytea, NULL) r "
        "WHERE r.result_code = 0",
        (channels, PAYLOAD),
    ).fetchone()[0]
    if created != len(channels):
        raise RuntimeError(f"original LonnyMQ refused {len(channels) - created} seed messages")


@dataclass(frozen=True)
class System:
    """One queue the benchmark drives with the same pgbench driver."""

    name: str
    scripts: str  # bench/pgbench/<scripts>[_batch]_{create,consume}.sql
    seed: Callable[[Any, list[str | None]], None]  # empties it and creates the given messages
    tables: tuple[str, ...]  # vacuumed before a run; the first holds its not-yet-completed messages
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    settings: str = ""  # extra PGOPTIONS for its pgbench sessions
    waited: bool = False  # a consumer waits on the queue throughout (every create notifies)

    @property
    def live_table(self) -> str:
        return self.tables[0]


# lonnymq's tables the seed leaves rows in (the first holds the messages).
LONNYMQ_VACUUMED = tuple(f"lonnymq.{t}" for t in ("message", "channel", "channel_hint", "queue"))
# In run order (reversed every other round). lonnymq's waited variant sits next to it.
SYSTEMS: tuple[System, ...] = (
    System("floor", "floor", _seed_floor, ("floor.message",)),
    System("pgmq", "pgmq", _seed_pgmq, (f"pgmq.q_{PGMQ_QUEUE}",)),
    # No channel-less messages (workload 3) and no batch calls (workload 4).
    System(
        "lonnymq_original",
        "lonnymq_original",
        _seed_lonnymq_original,
        ("lonny_up.message", "lonny_up.channel"),
        workloads=("w1_lifecycle", "w2_hot_channel"),
    ),
    System("lonnymq", "lonnymq", _seed_lonnymq, LONNYMQ_VACUUMED),
    System(
        WAITED, "lonnymq", _seed_lonnymq, LONNYMQ_VACUUMED, workloads=WAITED_WORKLOADS, waited=True
    ),
)
BY_NAME = {system.name: system for system in SYSTEMS}


def _scripts(system: System, batch: int) -> tuple[str, str]:
    kind = "_batch" if batch > 1 else ""
    return f"{system.scripts}{kind}_create.sql", f"{system.scripts}{kind}_consume.sql"


def _live(conn: Any, system: System) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {system.live_table}").fetchone()[0])


def seed(conn: Any, system: str, channels: int) -> None:
    """Empties the system's queue and puts SEED messages on `channels` channels (0: none)."""
    spec = BY_NAME[system]
    names = [f"c{1 + i % channels}" if channels > 0 else None for i in range(1, SEED + 1)]
    spec.seed(conn, names)
    settle_server(conn, list(spec.tables))


def systems_for(workload: str, peers: list[str]) -> tuple[str, ...]:
    """The systems that run `workload`: peers only when loaded, each only where it can."""
    return tuple(
        s.name
        for s in SYSTEMS
        if workload in s.workloads and (s.name not in PEERS or s.name in peers)
    )


def _defines(spec: dict[str, Any]) -> dict[str, Any]:
    """The pgbench variables of the bench/pgbench scripts for a workload."""
    return {
        "nchannels": spec["channels"],
        "payload": PAYLOAD,
        "json_payload": PGMQ_PAYLOAD,
        "batch": spec["batch"],
    }


def _tracking_all(settings: str) -> str:
    """A system's session settings with nested statements tracked too."""
    return f"{settings} -c pg_stat_statements.track=all".strip()


def run_once(
    system: str,
    workload: str,
    synchronous_commit: str,
    seconds: float,
    capture_statements: bool = False,
) -> dict[str, Any]:
    spec = WORKLOADS[workload]
    target = BY_NAME[system]
    create, consume = _scripts(target, spec["batch"])
    # Nested statements are tracked only in a capture run: tracking them costs
    # every statement inside a function (about 13% of lonnymq's CPU per
    # message, measured), so the counted runs keep PostgreSQL's default (top).
    settings = _tracking_all(target.settings) if capture_statements else target.settings
    defines = _defines(spec)
    with connect() as conn:
        seed(conn, system, spec["channels"])
        before = _live(conn, target)
        if capture_statements:
            conn.execute("SELECT pg_stat_statements_reset()")
        with connect() as waiter:
            if target.waited:
                waiter.execute("BEGIN")
                waiter.execute("SELECT lonnymq.wait_begin('bench')")
            producers = pgbench(
                create, PRODUCERS, seconds, defines, synchronous_commit, settings=settings
            )
            consumers = pgbench(
                consume, CONSUMERS, seconds, defines, synchronous_commit, settings=settings
            )
            produced = pgbench_result(producers)
            consumed = pgbench_result(consumers)
        after = _live(conn, target)
        statements = _top_statements(conn) if capture_statements else None
    created = produced["transactions"] * spec["batch"]
    completed = before + created - after
    # A message's whole life (create, dequeue, complete) happened as often as the
    # slower side allowed: the seed drained by fast consumers is not throughput.
    lifecycle = min(created, completed)
    result = {
        "system": system,
        "workload": workload,
        "synchronous_commit": synchronous_commit,
        "seconds": seconds,
        "created": created,
        "completed": completed,
        "messages_per_s": lifecycle / seconds,
        "created_per_s": created / seconds,
        "completed_per_s": completed / seconds,
        "backlog_start": before,
        "backlog_end": after,
        "backlog_growth_per_s": (after - before) / seconds,
        "consumer_transactions": consumed["transactions"],
        # Consumer passes that found nothing although the backlog never ran dry here.
        "empty_dequeue_fraction": (
            max(0.0, 1 - (completed / spec["batch"]) / consumed["transactions"])
            if consumed["transactions"]
            else None
        ),
        "producer_latency_ms": produced["latency_ms"],
        "consumer_latency_ms": consumed["latency_ms"],
    }
    if statements is not None:
        result["top_statements"] = statements
    log(
        f"  {workload:16s} {system:18s} sync={synchronous_commit:3s} "
        f"{result['messages_per_s']:8.0f} msg/s  created {result['created_per_s']:8.0f}/s  "
        f"completed {result['completed_per_s']:8.0f}/s  "
        f"backlog {before}->{after}"
    )
    return result


def _top_statements(conn: Any) -> list[dict[str, Any]]:
    """Where the server spent its time (pg_stat_statements, nested statements included)."""
    rows = conn.execute(
        "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 4), "
        "       shared_blks_hit + shared_blks_read, rows, "
        "       left(regexp_replace(query, '\\s+', ' ', 'g'), 300) "
        "FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "ORDER BY total_exec_time DESC LIMIT 25"
    ).fetchall()
    return [
        {
            "calls": r[0],
            "total_ms": float(r[1]),
            "mean_ms": float(r[2]),
            "blocks": r[3],
            "rows": r[4],
            "query": r[5],
        }
        for r in rows
    ]


# Messages each system creates and then consumes in a statement count.
COUNTED_MESSAGES = 300


def _statement_calls(conn: Any) -> tuple[int, int]:
    """Statements run in this database since the last reset: (sent by clients, nested).

    Transaction control and the reset itself are left out; PL/pgSQL expressions
    that run no query (assignments, IF conditions) are not statements to
    pg_stat_statements and are not counted.
    """
    row = conn.execute(
        "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0), "
        "       coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0) "
        "FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "  AND query !~* '^\\s*(begin|commit|end|rollback|start)\\M' "
        "  AND query !~ 'pg_stat_statements_reset'"
    ).fetchone()
    return int(row[0]), int(row[1])


def count_statements(system: str, workload: str) -> dict[str, Any]:
    """Statements per message of a whole lifecycle, the common case: one client
    creates COUNTED_MESSAGES messages, then consumes them (dequeue, complete),
    nothing else running, every statement tracked, nested ones included."""
    spec = WORKLOADS[workload]
    target = BY_NAME[system]
    create, consume = _scripts(target, spec["batch"])
    defines = _defines(spec)
    settings = _tracking_all(target.settings)
    transactions = max(1, COUNTED_MESSAGES // spec["batch"])
    messages = transactions * spec["batch"]
    result: dict[str, Any] = {"system": system, "workload": workload, "messages": messages}
    with connect() as conn:
        seed(conn, system, spec["channels"])
        # A few consumes first: the seed is one batch create, which leaves a
        # hint per channel for the first dequeues to absorb (3 statements per
        # channel), once, not per message.
        warm_up = max(1, 100 // spec["batch"])
        pgbench_result(
            pgbench(consume, 1, 0, defines, "on", settings=target.settings, transactions=warm_up)
        )
        before = _live(conn, target)
        for side, script in (("create", create), ("consume", consume)):
            conn.execute("SELECT pg_stat_statements_reset()")
            pgbench_result(
                pgbench(script, 1, 0, defines, "on", settings=settings, transactions=transactions)
            )
            client, nested = _statement_calls(conn)
            result[f"{side}_client_per_message"] = client / messages
            result[f"{side}_nested_per_message"] = nested / messages
        after = _live(conn, target)
    if after != before:  # every message created was consumed, none of the seed more
        raise RuntimeError(f"{system} {workload}: {before} live messages before, {after} after")
    result["per_message"] = sum(v for k, v in result.items() if k.endswith("_per_message"))
    return result


def statement_counts(workloads: list[str], peers: list[str]) -> list[dict[str, Any]]:
    """count_statements for every system of every workload (lonnymq's waiting
    variant runs lonnymq's statements plus a NOTIFY: left out)."""
    return [
        count_statements(system, workload)
        for workload in workloads
        for system in systems_for(workload, peers)
        if system != WAITED
    ]


def run(rounds: int, seconds: float, workloads: list[str], peers: list[str]) -> dict[str, Any]:
    """`peers`: the peer queues prepare_database() loaded (the others are skipped)."""
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        log(f"throughput round {r + 1}/{rounds}")
        for workload in workloads:
            for sync in ("on", "off"):
                # Alternate which system goes first, so none always inherits another's wake.
                systems = systems_for(workload, peers)
                order = systems if (r % 2 == 0) else tuple(reversed(systems))
                for system in order:
                    result = run_once(system, workload, sync, seconds)
                    result["round"] = r + 1
                    runs.append(result)
    # Where the server's time went: one more run per system and workload with
    # nested statements tracked, kept out of the summary (tracking slows them).
    profiles: list[dict[str, Any]] = []
    for workload in workloads:
        for system in systems_for(workload, peers):
            profiles.append(run_once(system, workload, "on", seconds, capture_statements=True))
    return {
        "runs": runs,
        "profiles": profiles,
        "summary": summarize(runs),
        "rounds": rounds,
        "seconds": seconds,
        "producers": PRODUCERS,
        "consumers": CONSUMERS,
        "seed": SEED,
        "peers": peers,
    }


def _system_summary(sel: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "messages_per_s": median([r["messages_per_s"] for r in sel]),
        "all_messages_per_s": [round(r["messages_per_s"], 1) for r in sel],
        "backlog_growth_per_s": median([r["backlog_growth_per_s"] for r in sel]),
        "empty_dequeue_fraction": median([r["empty_dequeue_fraction"] or 0 for r in sel]),
    }


def _add_ratio(entry: dict[str, Any], cell: list[dict[str, Any]], other: str, key: str) -> None:
    """lonnymq / `other` as `key` (ratio of medians), `key`_per_round and `key`_median_of_rounds:
    the same ratio within each round, robust to load drifting between rounds."""
    if not entry[other]["messages_per_s"]:
        return
    entry[key] = entry["lonnymq"]["messages_per_s"] / entry[other]["messages_per_s"]
    per_round = []
    for rnd in sorted({r["round"] for r in cell}):
        mine = [r["messages_per_s"] for r in cell if r["round"] == rnd and r["system"] == "lonnymq"]
        theirs = [r["messages_per_s"] for r in cell if r["round"] == rnd and r["system"] == other]
        if mine and theirs and theirs[0]:
            per_round.append(mine[0] / theirs[0])
    entry[f"{key}_per_round"] = [round(x, 3) for x in per_round]
    entry[f"{key}_median_of_rounds"] = median(per_round)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (workload, sync): median messages/s of every system that ran and its ratio to the
    floor; lonnymq's ratio to the floor (`ratio`) and to the fastest peer (`best_peer`,
    `ratio_best_peer`)."""
    summary: dict[str, Any] = {}
    keys = sorted({(r["workload"], r["synchronous_commit"]) for r in runs})
    for workload, sync in keys:
        cell = [r for r in runs if r["workload"] == workload and r["synchronous_commit"] == sync]
        entry: dict[str, Any] = {}
        for system in SYSTEMS:
            sel = [r for r in cell if r["system"] == system.name]
            if sel:
                entry[system.name] = _system_summary(sel)
        floor = entry.get("floor", {}).get("messages_per_s")
        if floor:
            for name, stats in entry.items():
                if name != "floor":
                    stats["ratio_to_floor"] = stats["messages_per_s"] / floor
        if "lonnymq" in entry and floor:
            _add_ratio(entry, cell, "floor", "ratio")
        if WAITED in entry and floor:
            entry["ratio_waited"] = entry[WAITED]["messages_per_s"] / floor
        peers = [p for p in PEERS if p in entry]
        if peers and "lonnymq" in entry:
            best = max(peers, key=lambda p: entry[p]["messages_per_s"])
            entry["best_peer"] = {"name": best, "messages_per_s": entry[best]["messages_per_s"]}
            _add_ratio(entry, cell, best, "ratio_best_peer")
        summary[f"{workload}/sync_{sync}"] = entry
    return summary


# The near-empty regime (issue 37): the queue starts empty and consumers keep up, the usual
# state in production. Workload 1's shape (4 producers, 4 consumers, 100 channels) with the
# producers held to an offered rate (pgbench -R); consumers run flat out, so near empty most
# of their dequeues find nothing. A run "keeps up" when its producers create at least KEPT_UP
# of the offered rate (pgbench's arrivals are random: a few percent short is chance, more is
# producers starved of CPU) and the queue holds at most NEAR_EMPTY_DEPTH messages on average
# and at its end. Each system's number is its completions per second in the fastest run that
# kept up, the offered rate found by search; the single-client shape runs create, dequeue and
# complete in turn.
NEAR_EMPTY = "near_empty"
ONE_CLIENT = "near_empty_one_client"
NEAR_EMPTY_DEPTH = 100  # one message per channel
KEPT_UP = 0.9
PROBES = 4  # search steps after the unthrottled run
DEPTH_EVERY_S = 0.1


def empty(conn: Any, system: str) -> None:
    """Empties the system's queue (the original with its 100 channels declared), vacuumed."""
    spec = BY_NAME[system]
    if system == "lonnymq_original":
        reset_lonnymq_original(conn, [f"c{i}" for i in range(1, 101)])
    else:
        spec.seed(conn, [])
    settle_server(conn, list(spec.tables))


def _watch_depth(target: System, stop: threading.Event, depths: list[int]) -> None:
    """Samples the queue's depth (messages not yet completed) until `stop`."""
    with connect() as conn:
        while not stop.wait(DEPTH_EVERY_S):
            depths.append(_live(conn, target))


def near_empty_once(system: str, sync: str, seconds: float, rate: float | None) -> dict[str, Any]:
    """One run of shape (a) from an empty queue, producers offered `rate` messages/s in all
    (None: unthrottled)."""
    target = BY_NAME[system]
    create, consume = _scripts(target, 1)
    defines = _defines(WORKLOADS["w1_lifecycle"])
    depths: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_depth, args=(target, stop, depths))
    with connect() as conn:
        empty(conn, system)
        producers = pgbench(
            create, PRODUCERS, seconds, defines, sync, rate=rate, settings=target.settings
        )
        consumers = pgbench(consume, CONSUMERS, seconds, defines, sync, settings=target.settings)
        watcher.start()
        produced, consumed = pgbench_result(producers), pgbench_result(consumers)
        stop.set()
        watcher.join()
        left = _live(conn, target)
    created = produced["transactions"]
    completed = created - left
    completed_per_s = completed / seconds
    offered = rate if rate is not None else created / seconds
    mean_depth = sum(depths) / len(depths) if depths else float("nan")
    return {
        "offered_per_s": offered,
        "throttled": rate is not None,
        "created_per_s": created / seconds,
        "completed_per_s": completed_per_s,
        "depth_end": left,
        "depth_mean": mean_depth,
        "depth_p99": percentile([float(d) for d in depths], 99),
        "depth_max": max(depths, default=0),
        # Little's law: the mean time a message spends between create and complete.
        "time_in_queue_ms": 1000 * mean_depth / completed_per_s if completed_per_s else None,
        # Pollers' passes that found nothing (each consumer pass is one dequeue).
        "empty_dequeue_fraction": (
            max(0.0, 1 - completed / consumed["transactions"]) if consumed["transactions"] else None
        ),
        "producer_latency_ms": produced["latency_ms"],
        "consumer_latency_ms": consumed["latency_ms"],
        "kept_up": created / seconds >= KEPT_UP * offered
        and max(left, mean_depth) <= NEAR_EMPTY_DEPTH,
    }


def sustained(system: str, sync: str, seconds: float, probes: int) -> dict[str, Any]:
    """Shape (a): the highest offered rate the system keeps near empty. A system whose
    consumers keep up even with unthrottled producers is bounded by its producers, and that
    rate is its number. Otherwise the search starts at the unthrottled run's completions,
    which are no bound (producers flooding the queue take CPU from the consumers): it goes
    up by half while runs keep up, then halves the interval."""
    runs = [near_empty_once(system, sync, seconds, None)]
    best = runs[0] if runs[0]["kept_up"] else None
    lo, hi = 0.0, None
    rate = max(runs[0]["completed_per_s"], 1.0)
    for _ in range(probes if best is None else 0):
        runs.append(near_empty_once(system, sync, seconds, rate))
        if runs[-1]["kept_up"]:
            lo, best = rate, runs[-1]
        else:
            hi = rate
        rate = 1.5 * lo if hi is None else (lo + hi) / 2
    at = best or min(runs, key=lambda r: r["offered_per_s"])
    result = {
        "system": system,
        "workload": NEAR_EMPTY,
        "synchronous_commit": sync,
        "seconds": seconds,
        # The summary's key: completions per second at the best rate kept up (0: none was).
        "messages_per_s": at["completed_per_s"] if best else 0.0,
        "at_best": at,
        "backlog_growth_per_s": at["depth_end"] / seconds,
        "empty_dequeue_fraction": at["empty_dequeue_fraction"],
        "unthrottled_completed_per_s": runs[0]["completed_per_s"],
        "unthrottled_depth_end": runs[0]["depth_end"],
        "probes": runs,
    }
    log(
        f"  near-empty       {system:18s} sync={sync:3s} {result['messages_per_s']:8.0f} msg/s "
        f"kept up (unthrottled {runs[0]['completed_per_s']:.0f}/s, depth "
        f"{runs[0]['depth_end']} at its end); at best: mean depth {at['depth_mean']:.1f}, "
        f"end {at['depth_end']}, ~{at['time_in_queue_ms'] or 0:.1f} ms in queue"
    )
    return result


def one_client(system: str, sync: str, seconds: float) -> dict[str, Any]:
    """Shape (b): one client runs the system's create script, then its consume script, in
    turn (three commits), from an empty queue: lifecycles per second."""
    target = BY_NAME[system]
    defines = _defines(WORKLOADS["w1_lifecycle"])
    with tempfile.TemporaryDirectory(prefix="lonnymq-near-empty-") as tmp, connect() as conn:
        script = Path(tmp) / f"{system}_lifecycle.sql"
        script.write_text(
            "\n".join((BENCH_DIR / "pgbench" / name).read_text() for name in _scripts(target, 1))
        )
        empty(conn, system)
        done = pgbench_result(
            pgbench(str(script), 1, seconds, defines, sync, settings=target.settings)
        )
        left = _live(conn, target)
    if left:  # every message one client creates, it consumes next
        raise RuntimeError(f"{system} one client: {left} messages left")
    result = {
        "system": system,
        "workload": ONE_CLIENT,
        "synchronous_commit": sync,
        "seconds": seconds,
        "messages_per_s": done["transactions"] / seconds,
        "lifecycle_latency_ms": done["latency_ms"],
        "backlog_growth_per_s": 0.0,
        "empty_dequeue_fraction": 0.0,
    }
    log(
        f"  one client       {system:18s} sync={sync:3s} "
        f"{result['messages_per_s']:8.0f} lifecycles/s"
    )
    return result


def near_empty(
    rounds: int, seconds: float, peers: list[str], probes: int | None = None
) -> dict[str, Any]:
    """Both shapes for every system that runs workload 1 (not the waiting variant), sync on and
    off, in interleaved rounds; medians and ratios as for workloads 1-4."""
    probes = PROBES if probes is None else probes
    systems = tuple(s for s in systems_for("w1_lifecycle", peers) if s != WAITED)
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        log(f"near-empty round {r + 1}/{rounds}")
        order = systems if r % 2 == 0 else tuple(reversed(systems))
        for sync in ("on", "off"):
            for system in order:
                for result in (
                    one_client(system, sync, seconds),
                    sustained(system, sync, seconds, probes),
                ):
                    result["round"] = r + 1
                    runs.append(result)
    return {
        "runs": runs,
        "summary": summarize(runs),
        "rounds": rounds,
        "seconds": seconds,
        "probes": probes,
        "producers": PRODUCERS,
        "consumers": CONSUMERS,
        "kept_up": {"created_of_offered": KEPT_UP, "depth_end_at_most": NEAR_EMPTY_DEPTH},
        "peers": peers,
    }
