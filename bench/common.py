"""Shared plumbing for the benchmark: connections, pgbench, statistics, results."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))
HOST = "127.0.0.1"
PORT = int(os.environ.get("BENCH_PGPORT", "25439"))
DATABASE = "bench"
DSN = f"host={HOST} port={PORT} user=postgres dbname={DATABASE}"
PAYLOAD = "\\x" + "ab" * 128  # 128-byte message body, as bytea hex input
# PGMQ's bodies are jsonb: the same 128 bytes, base64 in a JSON string, as a client would send them.
PGMQ_PAYLOAD = json.dumps({"content": base64.b64encode(bytes.fromhex(PAYLOAD[2:])).decode()})
PGMQ_QUEUE = "bench"

# The peer queues lonnymq is compared with: their install SQL stays outside the repository
# (never copied in), in LONNYMQ_PEERS_DIR, relative to the repository root unless absolute.
PEERS_DIR = ROOT / os.environ.get("LONNYMQ_PEERS_DIR", "../shared/peers")
# peer -> (schema it is loaded into, its install file in PEERS_DIR)
PEERS: dict[str, tuple[str, str]] = {
    "pgmq": ("pgmq", "pgmq.sql"),
    "lonnymq_original": ("lonny_up", "lonnymq-original.sql"),
}

# Every lonnymq table: truncated between runs so each run starts from the same state.
LONNYMQ_TABLES = (
    "message",
    "channel",
    "channel_hint",
    "channel_admission",
    "batch",
    "message_archive",
    "queue",
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def connect(autocommit: bool = True, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(DSN, autocommit=autocommit, **kwargs)


def scalar(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    """The first column of the one row a query returns."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row[0]


def prepare_database() -> dict[str, Any]:
    """Installs lonnymq (the files `make install` just put in place), the floor and the peers,
    afresh."""
    with connect() as conn:
        conn.execute("DROP EXTENSION IF EXISTS lonnymq CASCADE")
        conn.execute("CREATE EXTENSION lonnymq")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute((BENCH_DIR / "floor.sql").read_text())
        peers = load_peers(conn)
        version = scalar(conn, "SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'")
        script_md5 = scalar(
            conn,
            "SELECT md5(string_agg(p.prosrc, '' ORDER BY p.oid)) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'lonnymq'",
        )
    # With BENCH_NO_INSTALL the measured lonnymq is whatever was installed, not this checkout.
    return {
        "extversion": version,
        "functions_md5": script_md5,
        "installed_from_checkout": not os.environ.get("BENCH_NO_INSTALL"),
        "peers": peers,
        "peers_dir": str(PEERS_DIR.resolve()),
    }


def load_peers(conn: psycopg.Connection[Any]) -> list[str]:
    """Loads every peer whose install file is present into its own schema, afresh; returns
    their names."""
    present = [peer for peer, (_, file) in PEERS.items() if (PEERS_DIR / file).is_file()]
    if len(present) < len(PEERS):
        missing = ", ".join(file for peer, (_, file) in PEERS.items() if peer not in present)
        log(
            f"peers: {missing} not found in {PEERS_DIR.resolve()} (LONNYMQ_PEERS_DIR): "
            f"skipping {', '.join(p for p in PEERS if p not in present)}"
        )
    for peer in present:
        load_peer(conn, peer)
    if "pgmq" in present:
        conn.execute("SELECT pgmq.create(%s)", (PGMQ_QUEUE,))
    return present


def load_peer(conn: psycopg.Connection[Any], peer: str) -> None:
    """Loads one peer from its install file into its own schema, afresh."""
    schema, file = PEERS[peer]
    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    # Both files expect their schema to exist (PGMQ's creates it only outside an extension).
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute((PEERS_DIR / file).read_text())


def reset_lonnymq(conn: psycopg.Connection[Any]) -> None:
    tables = ", ".join(f"lonnymq.{t}" for t in LONNYMQ_TABLES)
    conn.execute(f"TRUNCATE {tables}")


def reset_floor(conn: psycopg.Connection[Any]) -> None:
    conn.execute("TRUNCATE floor.message")


def reset_pgmq(conn: psycopg.Connection[Any]) -> None:
    conn.execute(f"TRUNCATE pgmq.q_{PGMQ_QUEUE}, pgmq.a_{PGMQ_QUEUE}")


def reset_lonnymq_original(conn: psycopg.Connection[Any], channels: list[str]) -> None:
    """Empties the original LonnyMQ and declares `channels` afresh (their counters and heads
    start at zero): unlimited concurrency and size, no release interval, as lonnymq's defaults."""
    conn.execute("TRUNCATE lonny_up.message, lonny_up.channel")
    conn.execute(
        "SELECT lonny_up.channel_set(c, 2147483647, 2147483647, 0) FROM unnest(%s::text[]) c",
        (channels,),
    )


def settle_server(conn: psycopg.Connection[Any], tables: list[str]) -> None:
    """Same starting line for every run: fresh statistics, no dirty pages, no checkpoint due."""
    for table in tables:
        conn.execute(f"VACUUM ANALYZE {table}")
    conn.execute("CHECKPOINT")


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    with contextlib.suppress(OSError):
        found = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        if found is not None:
            mem_kb = int(found.group(1))
    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "sql"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    with connect() as conn:
        server = scalar(conn, "SELECT version()")
        settings = dict(
            conn.execute(
                "SELECT name, current_setting(name) FROM pg_settings WHERE name IN "
                "('shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'wal_buffers', 'fsync', "
                "'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'autovacuum_naptime')"
            ).fetchall()
        )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "server": server,
        "settings": settings,
        "git_head": git,
        "sql_dirty": bool(dirty),
        "load_at_start": os.getloadavg(),
    }


def pgbench(
    script: str,
    clients: int,
    seconds: float,
    defines: dict[str, Any],
    synchronous_commit: str,
    rate: float | None = None,
    progress: int | None = None,
    settings: str = "",
    transactions: int | None = None,
    log_prefix: Path | None = None,
) -> subprocess.Popen[str]:
    """Starts pgbench on one script of bench/pgbench (prepared statements, no vacuum).

    It runs for `seconds`, or, given `transactions`, that many times per client. Given
    `log_prefix`, it logs every transaction to `<log_prefix>.<pid>` (see `transaction_log`).
    """
    args = [
        str(PGBIN / "pgbench"),
        "-n",
        "-M",
        "prepared",
        "-h",
        HOST,
        "-p",
        str(PORT),
        "-U",
        "postgres",
        "-c",
        str(clients),
        "-j",
        "1",
        *(["-t", str(transactions)] if transactions is not None else ["-T", str(int(seconds))]),
        "-f",
        str(BENCH_DIR / "pgbench" / script),
    ]
    for name, value in defines.items():
        args += ["-D", f"{name}={value}"]
    if rate is not None:
        args += ["-R", f"{rate:.1f}"]
    if progress is not None:
        args += ["-P", str(progress)]
    if log_prefix is not None:
        args += ["-l", f"--log-prefix={log_prefix}"]
    args.append(DATABASE)
    env = dict(
        os.environ, PGOPTIONS=f"-c synchronous_commit={synchronous_commit} {settings}".strip()
    )
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def pgbench_result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate()
    text = out + err
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed ({proc.returncode}):\n{text[-3000:]}")
    processed = re.search(r"number of transactions actually processed: (\d+)", text)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
    latency = re.search(r"latency average = ([\d.]+) ms", text)
    progress = [
        {"t": float(m.group(1)), "tps": float(m.group(2))}
        for m in re.finditer(r"progress: ([\d.]+) s, ([\d.]+) tps", text)
    ]
    return {
        "transactions": int(processed.group(1)) if processed else 0,
        "tps": float(tps.group(1)) if tps else 0.0,
        "latency_ms": float(latency.group(1)) if latency else None,
        "progress": progress,
    }


def transaction_log(prefix: Path) -> list[tuple[float, float | None]]:
    """Every transaction pgbench logged under `prefix` (pgbench(log_prefix=...)): (when it
    ended, epoch seconds; its latency in ms, or None for one that failed or was skipped).
    With a rate (-R), pgbench counts latency from the transaction's scheduled start, so time
    spent behind schedule is in it."""
    rows: list[tuple[float, float | None]] = []
    for path in prefix.parent.glob(f"{prefix.name}.*"):
        for line in path.read_text().splitlines():
            # client_id transaction_no time_us script_no epoch_s epoch_us [schedule_lag_us];
            # time_us is a word ("failed", "skipped", ...) for a transaction that did not end.
            fields = line.split()
            ended = int(fields[4]) + int(fields[5]) / 1e6
            rows.append((ended, int(fields[2]) / 1000 if fields[2].isdigit() else None))
    return rows


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """utime + stime of each local process still alive, in clock ticks (from /proc)."""
    ticks = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[pid] = int(fields[11]) + int(fields[12])
    return ticks


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one local process (a backend), from /proc."""
    return cpu_ticks([pid])[pid] / CLK_TCK


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def write_json(name: str, data: Any) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    return path
