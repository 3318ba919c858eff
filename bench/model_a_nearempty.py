"""Issue 37, model A: the near-empty regime (and workload 1's backlog) with the peers.

Every system lives in a database of its own on the benchmark cluster (BENCH_PGPORT):
  ne_floor  bench/floor.sql                     ne_pgmq  PGMQ (LONNYMQ_PEERS_DIR/pgmq.sql)
  ne_orig   the original LonnyMQ (peers dir)    ne_112   lonnymq 1.12 (CREATE EXTENSION ... '1.12')
  ne_a      this checkout's lonnymq (the prototype, default_version 2.0)
and is driven by the same bench/pgbench scripts. Shapes:
  near    the queue starts empty; 4 producer and 4 consumer clients, 100 channels
  one     one client: create, dequeue, complete in turn (lifecycles/s)
  backlog workload 1: as near, after a seed of 2,000 messages over the 100 channels
Rounds interleave every system and shape (the order reversed every other round); the
medians and the median of per-round ratios to the best peer are printed and written to
results/model-a-<name>.json. Messages/s = min(created, completed) / seconds, completed =
seed + created - left, as in throughput.py. `--statements` counts the statements per
lifecycle (pg_stat_statements.track = all, 300 lifecycles on one client).

    python3 bench/model_a_nearempty.py setup
    python3 bench/model_a_nearempty.py run --rounds 5 --seconds 15 --cells near/on,near/off,one/off --name s1
    python3 bench/model_a_nearempty.py statements
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PEERS = (BENCH.parent / os.environ.get("LONNYMQ_PEERS_DIR", "../shared/peers")).resolve()
PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))
PORT = os.environ.get("BENCH_PGPORT", "25439")
PAYLOAD = "\\x" + "ab" * 128
JSON_PAYLOAD = json.dumps({"content": base64.b64encode(bytes.fromhex(PAYLOAD[2:])).decode()})
CHANNELS = 100
SEED = 2000
LONNYMQ_TABLES = "lonnymq.message, lonnymq.channel, lonnymq.channel_hint, lonnymq.channel_admission, " \
                 "lonnymq.batch, lonnymq.message_archive, lonnymq.queue"

# name -> database, pgbench script prefix, setup SQL, reset SQL, live-count SQL, seed SQL
SYSTEMS = {
    "floor": ("ne_floor", "floor", (BENCH / "floor.sql").read_text(), "TRUNCATE floor.message",
              "SELECT count(*) FROM floor.message",
              "INSERT INTO floor.message (channel, content) SELECT 'c' || (1 + g % 100), "
              f"'{PAYLOAD}'::bytea FROM generate_series(1, {SEED}) g"),
    "pgmq": ("ne_pgmq", "pgmq", None, "TRUNCATE pgmq.q_bench, pgmq.a_bench",
             "SELECT count(*) FROM pgmq.q_bench",
             f"SELECT count(*) FROM pgmq.send_batch('bench', array_fill('{JSON_PAYLOAD}'::jsonb, ARRAY[{SEED}]))"),
    "original": ("ne_orig", "lonnymq_original", None,
                 "TRUNCATE lonny_up.message, lonny_up.channel; "
                 "SELECT count(*) FROM generate_series(1, 100) g, "
                 "lonny_up.channel_set('c' || g, 2147483647, 2147483647, 0)",
                 "SELECT count(*) FROM lonny_up.message",
                 "SELECT count(*) FROM generate_series(1, 2000) g, "
                 f"lonny_up.message_create('c' || (1 + g % 100), '{PAYLOAD}'::bytea, NULL) r "
                 "WHERE r.result_code = 0"),
    "lonnymq_1.12": ("ne_112", "lonnymq", None, f"TRUNCATE {LONNYMQ_TABLES}",
                     "SELECT count(*) FROM lonnymq.message",
                     "SELECT count(*) FROM lonnymq.message_create_batch('bench', "
                     "ARRAY(SELECT 'c' || (1 + g % 100) FROM generate_series(1, 2000) g), "
                     f"array_fill('{PAYLOAD}'::bytea, ARRAY[{SEED}]))"),
    "model_a": ("ne_a", "lonnymq", None, f"TRUNCATE {LONNYMQ_TABLES}",
                "SELECT count(*) FROM lonnymq.message",
                "SELECT count(*) FROM lonnymq.message_create_batch('bench', "
                "ARRAY(SELECT 'c' || (1 + g % 100) FROM generate_series(1, 2000) g), "
                f"array_fill('{PAYLOAD}'::bytea, ARRAY[{SEED}]))"),
}
VACUUMED = {
    "floor": ["floor.message"],
    "pgmq": ["pgmq.q_bench", "pgmq.a_bench"],
    "original": ["lonny_up.message", "lonny_up.channel"],
    "lonnymq_1.12": ["lonnymq.message", "lonnymq.channel", "lonnymq.channel_hint", "lonnymq.queue"],
    "model_a": ["lonnymq.message", "lonnymq.channel", "lonnymq.queue"],
}
PEER_NAMES = ("floor", "pgmq", "original")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def psql(db: str, sql: str, settings: str = "") -> str:
    env = dict(os.environ, PGOPTIONS=settings) if settings else None
    out = subprocess.run([str(PGBIN / "psql"), "-XAtq", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                          "-p", PORT, "-U", "postgres", "-d", db],
                         input=sql, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{db}: {out.stderr[-2000:]}")
    return out.stdout.strip()


def setup() -> None:
    for name, (db, *_rest) in SYSTEMS.items():
        psql("postgres", f"DROP DATABASE IF EXISTS {db}")
        psql("postgres", f"CREATE DATABASE {db}")
        psql(db, "CREATE EXTENSION pg_stat_statements")
        if name == "floor":
            psql(db, SYSTEMS[name][2])
        elif name == "pgmq":
            psql(db, "CREATE SCHEMA pgmq;\n" + (PEERS / "pgmq.sql").read_text()
                 + "\nSELECT pgmq.create('bench');")
        elif name == "original":
            psql(db, "CREATE SCHEMA lonny_up;\n" + (PEERS / "lonnymq-original.sql").read_text())
        elif name == "lonnymq_1.12":
            psql(db, "CREATE EXTENSION lonnymq VERSION '1.12'")
        else:
            psql(db, "CREATE EXTENSION lonnymq")
        log(f"{name}: {db} ready")
    log(psql("ne_a", "SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'") + " in ne_a, "
        + psql("ne_112", "SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'") + " in ne_112")


def pgbench(db: str, script: Path, clients: int, seconds: int | None, sync: str,
            transactions: int | None = None, extra: str = "") -> subprocess.Popen[str]:
    args = [str(PGBIN / "pgbench"), "-n", "-M", "prepared", "-h", "127.0.0.1", "-p", PORT, "-U", "postgres",
            "-c", str(clients), "-j", "1",
            *(["-t", str(transactions)] if transactions else ["-T", str(seconds)]),
            "-f", str(script), "-D", f"nchannels={CHANNELS}", "-D", f"payload={PAYLOAD}",
            "-D", f"json_payload={JSON_PAYLOAD}", "-D", "batch=1", db]
    env = dict(os.environ, PGOPTIONS=f"-c synchronous_commit={sync} {extra}".strip())
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def done(proc: subprocess.Popen[str]) -> int:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed: {(out + err)[-2000:]}")
    m = re.search(r"number of transactions actually processed: (\d+)", out + err)
    return int(m.group(1)) if m else 0


def lifecycle_script(prefix: str) -> Path:
    """The system's create script, then its consume script: one lifecycle per pgbench transaction."""
    path = Path(tempfile.gettempdir()) / f"model_a_{prefix}_lifecycle.sql"
    path.write_text((BENCH / "pgbench" / f"{prefix}_create.sql").read_text() + "\n"
                    + (BENCH / "pgbench" / f"{prefix}_consume.sql").read_text())
    return path


def prepare(system: str, seed: bool) -> int:
    db, _prefix, _setup, reset, live, seed_sql = SYSTEMS[system]
    psql(db, reset)
    if seed:
        psql(db, seed_sql)
    psql(db, "".join(f"VACUUM ANALYZE {t};\n" for t in VACUUMED[system]) + "CHECKPOINT;")
    return int(psql(db, live))


def run_once(system: str, shape: str, sync: str, seconds: int) -> float:
    db, prefix, _setup, _reset, live, _seed = SYSTEMS[system]
    before = prepare(system, shape == "backlog")
    if shape == "one":
        created = done(pgbench(db, lifecycle_script(prefix), 1, seconds, sync))
    else:
        producers = pgbench(db, BENCH / "pgbench" / f"{prefix}_create.sql", 4, seconds, sync)
        consumers = pgbench(db, BENCH / "pgbench" / f"{prefix}_consume.sql", 4, seconds, sync)
        created = done(producers)
        done(consumers)
    left = int(psql(db, live))
    completed = before + created - left
    return min(created, completed) / seconds


def run(rounds: int, seconds: int, cells: list[tuple[str, str]], systems: list[str], name: str) -> None:
    results: dict[str, list[dict[str, float]]] = {f"{sh}/{sy}": [] for sh, sy in cells}
    for r in range(rounds):
        order = systems if r % 2 == 0 else list(reversed(systems))
        for shape, sync in cells:
            row = {}
            for system in order:
                row[system] = run_once(system, shape, sync, seconds)
            results[f"{shape}/{sync}"].append(row)
            log(f"round {r + 1} {shape}/{sync}: " + ", ".join(f"{s} {v:.0f}" for s, v in row.items()))
    summary = {}
    for cell, rows in results.items():
        med = {s: statistics.median(r[s] for r in rows) for s in systems}
        peers = [s for s in systems if s in ("pgmq", "original")]
        entry = {"median": med}
        for s in ("lonnymq_1.12", "model_a"):
            if s in systems:
                entry[f"{s}/best_peer"] = statistics.median(
                    r[s] / max(r[p] for p in peers) for r in rows) if peers else None
                if "floor" in systems:
                    entry[f"{s}/floor"] = statistics.median(r[s] / r["floor"] for r in rows)
        if "lonnymq_1.12" in systems and "model_a" in systems:
            entry["model_a/1.12"] = statistics.median(r["model_a"] / r["lonnymq_1.12"] for r in rows)
        summary[cell] = entry
        log(f"{cell}: " + json.dumps(entry))
    out = BENCH / "results" / f"model-a-{name}.json"
    out.write_text(json.dumps({"rounds": rounds, "seconds": seconds, "runs": results, "summary": summary,
                               "load_at_end": os.getloadavg()}, indent=1))
    log(f"wrote {out}")


def statements(systems: list[str], n: int = 300) -> None:
    """Statements per lifecycle: one client, n lifecycles, every statement tracked (nested too)."""
    for system in systems:
        db, prefix, *_ = SYSTEMS[system]
        prepare(system, False)
        script = lifecycle_script(prefix)
        done(pgbench(db, script, 1, None, "off", transactions=1000))  # warm: queue, all channels, plans
        psql(db, "SELECT pg_stat_statements_reset()")
        done(pgbench(db, script, 1, None, "off", transactions=n, extra="-c pg_stat_statements.track=all"))
        rows = psql(db, "SELECT toplevel, sum(calls) FROM pg_stat_statements "
                        "WHERE query NOT LIKE '%pg_stat_statements_reset%' "
                        "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                        "GROUP BY toplevel ORDER BY toplevel")
        counts = {line.split("|")[0]: int(line.split("|")[1]) for line in rows.splitlines()}
        ms = float(psql(db, "SELECT sum(total_exec_time) FROM pg_stat_statements WHERE toplevel "
                            "AND query NOT LIKE '%pg_stat_statements%' "
                            "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"))
        top, nested = counts.get("t", 0) / n, counts.get("f", 0) / n
        log(f"{system}: {top:.2f} client + {nested:.2f} nested = {top + nested:.2f} statements per lifecycle; "
            f"{1000 * ms / n:.0f} us of server time per lifecycle (nested tracked)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["setup", "run", "statements"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--cells", default="near/on,near/off,one/off", help="shape/synchronous_commit, ...")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--name", default="run")
    args = parser.parse_args()
    systems = args.systems.split(",")
    if args.command == "setup":
        setup()
    elif args.command == "run":
        cells = [(c.split("/")[0], c.split("/")[1]) for c in args.cells.split(",")]
        run(args.rounds, args.seconds, cells, systems, args.name)
    else:
        statements(systems)


if __name__ == "__main__":
    sys.exit(main())
