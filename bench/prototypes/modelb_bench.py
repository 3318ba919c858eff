#!/usr/bin/env python3
"""Model B prototype (issue 37) beside the peers, one cluster, interleaved rounds.

Systems, each in a database of its own on the cluster at PGHOST/PGPORT:
  b2     this checkout's lonnymq (2.0, the prototype)      bench/pgbench/lonnymq_*.sql
  b112   lonnymq 1.12 as released                           bench/pgbench/lonnymq_*.sql
  bfloor the bare SKIP LOCKED floor (bench/floor.sql)       bench/pgbench/floor_*.sql
  bpgmq  PGMQ (../shared/peers/pgmq.sql)                     bench/pgbench/pgmq_*.sql
  borig  the original LonnyMQ (../shared/peers/...)          bench/pgbench/lonnymq_original_*.sql

Regimes (--regimes, comma-separated):
  empty      the queue starts empty; 4 producer + 4 consumer clients, 100 channels
  lifecycle  one client: create, dequeue, complete in turn (lifecycles/s)
  backlog    workload 1: 2,000 seeded, 4 + 4 clients, 100 channels
  hot        workload 2: as backlog, one channel
Each (regime, system, synchronous_commit) runs once per round, from a truncated
(and seeded) queue, VACUUM ANALYZE, a CHECKPOINT per round; the order of the systems is
reversed every other round. Throughput = min(created, completed) / seconds, completed =
seed + created - left. Prints medians and ratios; writes JSON (--out).

  python3 bench/prototypes/modelb_bench.py --setup            # (re)create the five databases
  python3 bench/prototypes/modelb_bench.py --rounds 5 --seconds 15 --regimes empty,lifecycle
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PEERS = Path(os.environ.get("LONNYMQ_PEERS_DIR", ROOT.parent / "shared" / "peers"))
PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))
PAYLOAD = "\\x" + "ab" * 128
JSON_PAYLOAD = '{"content": "' + __import__("base64").b64encode(bytes.fromhex("ab" * 128)).decode() + '"}'

SYSTEMS = {
    # name: (database, script prefix)
    "floor": ("bfloor", "floor"),
    "pgmq": ("bpgmq", "pgmq"),
    "original": ("borig", "lonnymq_original"),
    "lonnymq_1.12": ("b112", "lonnymq"),
    "model_b": ("b2", "lonnymq"),
}


def psql(db: str, sql: str, sync: str = "on") -> str:
    env = dict(os.environ, PGOPTIONS=f"-c synchronous_commit={sync}")
    out = subprocess.run([str(PGBIN / "psql"), "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{db}: {sql[:200]}\n{out.stderr}")
    return out.stdout.strip()


def psql_file(db: str, path: Path) -> None:
    out = subprocess.run([str(PGBIN / "psql"), "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{db}: {path}\n{out.stderr}")


def setup() -> None:
    for system, (db, _) in SYSTEMS.items():
        psql("postgres", f"DROP DATABASE IF EXISTS {db}")
        psql("postgres", f"CREATE DATABASE {db}")
        psql(db, "CREATE EXTENSION pg_stat_statements")
        if system == "floor":
            psql_file(db, BENCH / "floor.sql")
        elif system == "pgmq":
            psql(db, "CREATE SCHEMA pgmq")
            psql_file(db, PEERS / "pgmq.sql")
            psql(db, "SELECT pgmq.create('bench')")
        elif system == "original":
            psql(db, "CREATE SCHEMA lonny_up")
            psql_file(db, PEERS / "lonnymq-original.sql")
        elif system == "lonnymq_1.12":
            psql(db, "CREATE EXTENSION lonnymq VERSION '1.12'")
        else:
            psql(db, "CREATE EXTENSION lonnymq")
        print(f"set up {system} in {db}", flush=True)


def reset(system: str, channels: int, seed: int) -> None:
    db = SYSTEMS[system][0]
    names = [f"c{i}" for i in range(1, channels + 1)]
    if system == "floor":
        psql(db, "TRUNCATE floor.message")
        if seed:
            psql(db, f"INSERT INTO floor.message (channel, content) SELECT 'c' || (1 + g % {channels}), "
                     f"'{PAYLOAD}'::bytea FROM generate_series(1, {seed}) g")
        tables = ["floor.message"]
    elif system == "pgmq":
        psql(db, "TRUNCATE pgmq.q_bench, pgmq.a_bench")
        if seed:
            psql(db, f"SELECT count(*) FROM pgmq.send_batch('bench', array_fill('{JSON_PAYLOAD}'::jsonb, ARRAY[{seed}]))")
        tables = ["pgmq.q_bench"]
    elif system == "original":
        psql(db, "TRUNCATE lonny_up.message, lonny_up.channel")
        psql(db, "SELECT lonny_up.channel_set(c, 2147483647, 2147483647, 0) FROM unnest(ARRAY["
                 + ",".join(f"'{n}'" for n in names) + "]) c")
        if seed:
            psql(db, f"SELECT count(*) FROM generate_series(1, {seed}) g, "
                     f"LATERAL lonny_up.message_create('c' || (1 + g % {channels}), '{PAYLOAD}'::bytea, NULL)")
        tables = ["lonny_up.message", "lonny_up.channel"]
    else:
        tables_ = ["message", "channel", "queue", "channel_hint", "channel_admission", "batch", "message_archive"]
        if system == "model_b":
            tables_.append("channel_turn")
        psql(db, "TRUNCATE " + ", ".join(f"lonnymq.{t}" for t in tables_))
        if seed:
            psql(db, f"SELECT count(*) FROM lonnymq.message_create_batch('bench', "
                     f"(SELECT array_agg('c' || (1 + g % {channels})) FROM generate_series(1, {seed}) g), "
                     f"array_fill('{PAYLOAD}'::bytea, ARRAY[{seed}]))")
            # (a few dequeues rolled back would absorb 1.12's seed hints; the bench does it
            # with consumes: the first second of the run does the same here)
        tables = [f"lonnymq.{t}" for t in ("message", "channel")]
        if system == "model_b":
            tables.append("lonnymq.channel_turn")
    for t in tables:
        psql(db, f"VACUUM ANALYZE {t}")


def live(system: str) -> int:
    db = SYSTEMS[system][0]
    table = {"floor": "floor.message", "pgmq": "pgmq.q_bench", "original": "lonny_up.message"}.get(
        system, "lonnymq.message")
    return int(psql(db, f"SELECT count(*) FROM {table}"))


def pgbench(db: str, script: Path, clients: int, seconds: int, sync: str, channels: int) -> subprocess.Popen:
    args = [str(PGBIN / "pgbench"), "-n", "-M", "prepared", "-c", str(clients), "-j", "1", "-T", str(seconds),
            "-f", str(script), "-D", f"nchannels={channels}", "-D", f"payload={PAYLOAD}",
            "-D", f"json_payload={JSON_PAYLOAD}", db]
    env = dict(os.environ, PGOPTIONS=f"-c synchronous_commit={sync}")
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def transactions(proc: subprocess.Popen) -> int:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed:\n{(out + err)[-2000:]}")
    m = re.search(r"number of transactions actually processed: (\d+)", out + err)
    return int(m.group(1)) if m else 0


def lifecycle_script(prefix: str) -> Path:
    """The system's create script followed by its consume script: one lifecycle per run."""
    text = (BENCH / "pgbench" / f"{prefix}_create.sql").read_text() + "\n" + \
        (BENCH / "pgbench" / f"{prefix}_consume.sql").read_text()
    path = Path(tempfile.gettempdir()) / f"modelb_lifecycle_{prefix}.sql"
    path.write_text(text)
    return path


def run(regime: str, system: str, sync: str, seconds: int) -> dict:
    db, prefix = SYSTEMS[system]
    channels = 1 if regime == "hot" else 100
    seed = 2000 if regime in ("backlog", "hot") else 0
    reset(system, channels, seed)
    if regime == "lifecycle":
        n = transactions(pgbench(db, lifecycle_script(prefix), 1, seconds, sync, channels))
        left = live(system)
        # every lifecycle consumed what it created (the queue starts empty): left is the
        # few a dequeue could not yet see, or 0
        return {"created": n, "completed": n - left, "left": left, "rate": (n - left) / seconds}
    prod = pgbench(db, BENCH / "pgbench" / f"{prefix}_create.sql", 4, seconds, sync, channels)
    cons = pgbench(db, BENCH / "pgbench" / f"{prefix}_consume.sql", 4, seconds, sync, channels)
    created = transactions(prod)
    transactions(cons)
    left = live(system)
    completed = seed + created - left
    return {"created": created, "completed": completed, "left": left, "rate": min(created, completed) / seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--setup", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--regimes", default="empty,lifecycle")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--syncs", default="on,off")
    ap.add_argument("--out", default=str(BENCH / "results" / "modelb.json"))
    a = ap.parse_args()
    if a.setup:
        setup()
        return
    systems = a.systems.split(",")
    runs = []
    for rnd in range(a.rounds):
        order = systems if rnd % 2 == 0 else list(reversed(systems))
        # (one CHECKPOINT per round, not per run: on a shared 2-core machine a
        # checkpoint per run cost more time than the runs)
        psql("postgres", "CHECKPOINT")
        for regime in a.regimes.split(","):
            for sync in a.syncs.split(","):
                for system in order:
                    if regime == "hot" and system in ("pgmq",):
                        continue
                    r = run(regime, system, sync, a.seconds)
                    r.update(round=rnd, regime=regime, system=system, sync=sync)
                    runs.append(r)
                    print(f"round {rnd} {regime:9s} sync={sync:3s} {system:13s} {r['rate']:8.1f}/s "
                          f"(created {r['created']}, left {r['left']})", flush=True)
        Path(a.out).write_text(json.dumps({"runs": runs, "seconds": a.seconds}, indent=1))
    summary = {}
    for regime in a.regimes.split(","):
        for sync in a.syncs.split(","):
            cell = {}
            for system in systems:
                rates = [r["rate"] for r in runs if (r["regime"], r["sync"], r["system"]) == (regime, sync, system)]
                if rates:
                    cell[system] = statistics.median(rates)
            # ratio of model_b to each other system, median of per-round ratios
            ratios = {}
            for system in systems:
                per = []
                for rnd in range(a.rounds):
                    mb = [r["rate"] for r in runs if (r["regime"], r["sync"], r["system"], r["round"]) == (regime, sync, "model_b", rnd)]
                    ot = [r["rate"] for r in runs if (r["regime"], r["sync"], r["system"], r["round"]) == (regime, sync, system, rnd)]
                    if mb and ot and ot[0] > 0:
                        per.append(mb[0] / ot[0])
                if per:
                    ratios[system] = statistics.median(per)
            summary[f"{regime}/sync={sync}"] = {"median_rate": cell, "model_b_over": ratios}
            print(f"\n{regime} sync={sync}")
            for system, rate in cell.items():
                print(f"  {system:13s} {rate:8.1f}/s   model_b / this = {ratios.get(system, float('nan')):.2f}")
    Path(a.out).write_text(json.dumps({"runs": runs, "seconds": a.seconds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
