"""Workload 9: plans made on an empty queue.

A backend keeps the plan of every statement a PL/pgSQL function runs, made the first time it
runs it, until the table's statistics change (the next autovacuum or ANALYZE of the table).
A plan made while the table looked empty (after a vacuum emptied it, on a new connection to an
idle queue) may read the table sequentially, and keeps doing so as the table fills. Two tests
per system, in the same run:

- burst: the consumer's connection runs one dequeue on the empty queue (its plans made then),
  then N messages arrive in one batch and it drains them, dequeue + complete one at a time.
  The same with the consumer connecting after the burst arrived (plans made on a full table).
  Autovacuum is off for the queue's tables while the burst drains, so that neither case is
  re-planned midway (in production the cold plans last until the table's next autovacuum, up
  to autovacuum_naptime, a minute by default). Reported: server CPU per message, cold / warm.
- trickle: one client, create -> dequeue -> complete in a loop on a fresh queue for S seconds
  (a queue that keeps up with its load: near empty all the time), autovacuum as configured.
  Reported: server CPU per message.

lonnymq, PGMQ and the original LonnyMQ (when their install files are present).
Writes results/<name>-burst.json.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from common import (
    PAYLOAD,
    PGMQ_PAYLOAD,
    PGMQ_QUEUE,
    connect,
    cpu_s,
    log,
    reset_lonnymq,
    reset_lonnymq_original,
    reset_pgmq,
    scalar,
)

CHANNELS = 100
LOCK_MS = 30000
Conn = psycopg.Connection[Any]


@dataclass
class System:
    name: str
    tables: list[str]
    reset: Callable[[Conn], None]
    create_burst: Callable[[Conn, int], object]
    create_one: Callable[[Conn, int], object]
    consume_one: Callable[[Conn], bool]  # False when nothing was there


def _lonnymq_consume(conn: Conn) -> bool:
    row = conn.execute(
        "SELECT id, num_attempts FROM lonnymq.message_dequeue('burst', %s)", (LOCK_MS,)
    ).fetchone()
    if row is None:
        return False
    conn.execute("SELECT lonnymq.message_complete(%s, %s)", row)
    return True


def _pgmq_consume(conn: Conn) -> bool:
    row = conn.execute("SELECT msg_id FROM pgmq.read(%s, 30, 1)", (PGMQ_QUEUE,)).fetchone()
    if row is None:
        return False
    conn.execute("SELECT pgmq.delete(%s, %s::bigint)", (PGMQ_QUEUE, row[0]))
    return True


def _original_consume(conn: Conn) -> bool:
    row = conn.execute(
        "SELECT (metadata->>'id')::bigint, (metadata->>'num_attempts')::bigint "
        "FROM lonny_up.message_dequeue(%s) WHERE result_code = 3",
        (LOCK_MS,),
    ).fetchone()
    if row is None:
        return False
    conn.execute("SELECT lonny_up.message_complete(%s, %s)", row)
    return True


LONNYMQ = System(
    "lonnymq",
    ["lonnymq.message", "lonnymq.channel", "lonnymq.channel_hint", "lonnymq.queue"],
    reset_lonnymq,
    lambda conn, n: conn.execute(
        "SELECT count(*) FROM lonnymq.message_create_batch('burst', "
        "(SELECT array_agg('c' || (i %% %s)) FROM generate_series(1, %s) i), "
        "array_fill(%s::bytea, ARRAY[%s]))",
        (CHANNELS, n, PAYLOAD, n),
    ),
    lambda conn, i: conn.execute(
        "SELECT lonnymq.message_create('burst', %s, %s::bytea)", (f"c{i % CHANNELS}", PAYLOAD)
    ),
    _lonnymq_consume,
)
PGMQ = System(
    "pgmq",
    [f"pgmq.q_{PGMQ_QUEUE}", f"pgmq.a_{PGMQ_QUEUE}"],
    reset_pgmq,
    lambda conn, n: conn.execute(
        "SELECT count(*) FROM pgmq.send_batch(%s, array_fill(%s::jsonb, ARRAY[%s]))",
        (PGMQ_QUEUE, PGMQ_PAYLOAD, n),
    ),
    lambda conn, i: conn.execute("SELECT pgmq.send(%s, %s::jsonb)", (PGMQ_QUEUE, PGMQ_PAYLOAD)),
    _pgmq_consume,
)
ORIGINAL = System(
    "lonnymq_original",
    ["lonny_up.message", "lonny_up.channel"],
    lambda conn: reset_lonnymq_original(conn, [f"c{i}" for i in range(CHANNELS)]),
    # It has no batch create: one message_create per message, in one transaction.
    lambda conn, n: conn.execute(
        "SELECT count(*) FROM generate_series(1, %s) i, "
        "LATERAL lonny_up.message_create('c' || (i %% %s), %s::bytea, NULL)",
        (n, CHANNELS, PAYLOAD),
    ),
    lambda conn, i: conn.execute(
        "SELECT lonny_up.message_create(%s, %s::bytea, NULL)", (f"c{i % CHANNELS}", PAYLOAD)
    ),
    _original_consume,
)


def _autovacuum(conn: Conn, system: System, enabled: bool) -> None:
    for table in system.tables:
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = {str(enabled).lower()})")


def _fresh(admin: Conn, system: System) -> None:
    """The system's queue emptied, its tables vacuumed (and so planned as empty)."""
    system.reset(admin)
    for table in system.tables:
        admin.execute(f"VACUUM ANALYZE {table}")


def _burst(system: System, messages: int, cold: bool, limit_s: float) -> dict[str, Any]:
    """Drains a burst of `messages`, with plans made before it (cold) or after it (warm)."""
    with connect() as admin:
        _autovacuum(admin, system, False)
        _fresh(admin, system)
        try:
            with connect() as consumer:
                pid = int(scalar(consumer, "SELECT pg_backend_pid()"))
                if cold:
                    system.consume_one(consumer)  # on the empty queue: its plans are made now
                system.create_burst(admin, messages)
                if not cold:
                    for table in system.tables:
                        admin.execute(f"ANALYZE {table}")
                cpu0, t0, done = cpu_s(pid), time.perf_counter(), 0
                while time.perf_counter() - t0 < limit_s and system.consume_one(consumer):
                    done += 1
                cpu, wall = cpu_s(pid) - cpu0, time.perf_counter() - t0
        finally:
            _autovacuum(admin, system, True)
    return {
        "messages": done,
        "cpu_us_per_message": round(cpu / max(done, 1) * 1e6, 1),
        "wall_us_per_message": round(wall / max(done, 1) * 1e6, 1),
    }


def _trickle(system: System, seconds: float) -> dict[str, Any]:
    """create -> dequeue -> complete in a loop on one connection: a queue that keeps up."""
    with connect() as admin:
        _fresh(admin, system)
    with connect() as conn:
        pid = int(scalar(conn, "SELECT pg_backend_pid()"))
        cpu0, t0, done = cpu_s(pid), time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            system.create_one(conn, done)
            if not system.consume_one(conn):
                raise RuntimeError(f"{system.name}: the message just created was not delivered")
            done += 1
        cpu, wall = cpu_s(pid) - cpu0, time.perf_counter() - t0
    return {
        "messages": done,
        "cpu_us_per_message": round(cpu / done * 1e6, 1),
        "wall_us_per_message": round(wall / done * 1e6, 1),
    }


def run(
    peers: list[str], rounds: int = 2, messages: int = 5000, seconds: float = 10.0
) -> dict[str, Any]:
    systems = [LONNYMQ] + [s for s in (PGMQ, ORIGINAL) if s.name in peers]
    out: dict[str, Any] = {"messages": messages, "rounds": rounds, "trickle_seconds": seconds}
    for system in systems:
        cold, warm = [], []
        for r in range(rounds):
            warm.append(_burst(system, messages, False, 60.0))
            cold.append(_burst(system, messages, True, 60.0))
            log(
                f"workload 9 {system.name} round {r + 1}: burst of {messages}, cold "
                f"{cold[-1]['cpu_us_per_message']} us, warm {warm[-1]['cpu_us_per_message']} us "
                "server CPU per message"
            )
        trickle = _trickle(system, seconds)
        log(f"workload 9 {system.name} trickle: {trickle['cpu_us_per_message']} us per message")
        cold_us = statistics.median(c["cpu_us_per_message"] for c in cold)
        warm_us = statistics.median(w["cpu_us_per_message"] for w in warm)
        out[system.name] = {
            "burst_cold": cold,
            "burst_warm": warm,
            "cold_us": cold_us,
            "warm_us": warm_us,
            "cold_over_warm": round(cold_us / warm_us, 2),
            "trickle": trickle,
        }
    return out
