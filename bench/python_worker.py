"""Workload 8: the Python Worker itself against a PGMQ consumer written the same way.

16 workers (PROCESSES consumer processes x SLOTS handler threads, bench/worker_consumer.py:
one process per core),
a no-op handler, the backlog held at BACKLOG by a producer that tops it up in batches every
20 ms. Per run: jobs completed per second (server side: created - growth of the live
messages), CPU per job (from /proc) of the whole server, of the consumers' own backends
and of the consumer processes. Systems, interleaved in every
round (reverse order every other round):

- ``lonnymq``: the Worker with its defaults, messages on 100 channels (BENCH_WORKER_CHANNELS=N,
  1-1000, spreads them over N instead: the goal row is for 100, any other count is context);
- ``lonnymq_channelless``: the same with channel-less messages;
- ``lonnymq_baseline`` (only with BENCH_WORKER_BASELINE=<git rev>): the Worker of that
  revision (its python/src, via PYTHONPATH), on the same channels, against today's SQL;
- ``pgmq``: the PGMQ consumer (when the peer is loaded).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import common

QUEUE = "bench_worker"
PROCESSES = 2
SLOTS = 8
BACKLOG = 2000
CHANNELS = int(os.environ.get("BENCH_WORKER_CHANNELS", "100"))
if not 1 <= CHANNELS <= 1000:
    raise SystemExit("BENCH_WORKER_CHANNELS must be 1-1000")
WARMUP_S = 2.0
TOP_UP_S = 0.02
APPLICATION = "bench-worker-consumer"  # PGAPPNAME of the consumers, to find their backends


class Producer(threading.Thread):
    """Holds the backlog: every 20 ms, creates (in one batch call) what the consumers took."""

    def __init__(self, system: str) -> None:
        super().__init__(daemon=True)
        self.system = system
        self.conn = common.connect()
        self.lock = threading.Lock()
        self.created = 0
        self.low = BACKLOG  # the smallest backlog seen while running
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def live(self) -> int:
        table = "pgmq.q_" + common.PGMQ_QUEUE if self.system == "pgmq" else "lonnymq.message"
        return int(common.scalar(self.conn, f"SELECT count(*) FROM {table}"))

    def create(self, n: int) -> None:
        if self.system == "pgmq":
            self.conn.execute(
                "SELECT count(*) FROM pgmq.send_batch(%s, array_fill(%s::jsonb, ARRAY[%s]))",
                (common.PGMQ_QUEUE, common.PGMQ_PAYLOAD, n),
            )
        else:
            channels = (
                None
                if self.system == "lonnymq_channelless"
                else [f"c{(self.created + i) % CHANNELS + 1}" for i in range(n)]
            )
            self.conn.execute(
                "SELECT count(*) FROM lonnymq.message_create_batch(queue => %s, "
                "channels => coalesce(%s::text[], array_fill(NULL::text, ARRAY[%s])), "
                "contents => array_fill(%s::bytea, ARRAY[%s]))",
                (QUEUE, channels, n, common.PAYLOAD, n),
            )
        self.created += n

    def top_up(self) -> None:
        with self.lock:
            live = self.live()
            self.low = min(self.low, live)
            if live < BACKLOG:
                self.create(min(BACKLOG - live, 1000))

    def snapshot(self) -> tuple[int, int]:
        """(created so far, live now), consistent with each other."""
        with self.lock:
            return self.created, self.live()

    def run(self) -> None:
        try:
            while not self.stopping.wait(TOP_UP_S):
                self.top_up()
        except BaseException as exc:  # reported by the driver, not lost in a thread
            self.error = exc


def _spent(before: dict[int, int], after: dict[int, int]) -> int:
    """Ticks spent between two readings; a process first seen after started in between."""
    return sum(t - before.get(pid, 0) for pid, t in after.items())


def _consumer_backends() -> list[int]:
    """The server processes serving the consumers (their connections carry APPLICATION)."""
    with common.connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def _server_pids() -> list[int]:
    pgdata = Path(os.environ.get("BENCH_PGDATA", common.BENCH_DIR / ".pgdata"))
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return [postmaster, *children]


def _baseline_src() -> Path | None:
    """python/src of BENCH_WORKER_BASELINE, exported from git into a scratch directory."""
    rev = os.environ.get("BENCH_WORKER_BASELINE")
    if not rev:
        return None
    target = Path(tempfile.mkdtemp(prefix="bench-worker-baseline-"))
    # File by file: `git archive` would leave python/ out (export-ignore in .gitattributes).
    git = ["git", "-C", str(common.ROOT)]
    names = subprocess.run(
        [*git, "ls-tree", "-r", "--name-only", rev, "python/src"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in names:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            subprocess.run([*git, "show", f"{rev}:{name}"], check=True, capture_output=True).stdout
        )
    return target / "python" / "src"


def _start_consumers(system: str, baseline: Path | None) -> list[subprocess.Popen[str]]:
    kind = "pgmq" if system == "pgmq" else "lonnymq"
    env = dict(os.environ, PGAPPNAME=APPLICATION)
    if system == "lonnymq_baseline" and baseline is not None:
        env["PYTHONPATH"] = str(baseline)
    name = common.PGMQ_QUEUE if kind == "pgmq" else QUEUE
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(common.BENCH_DIR / "worker_consumer.py"),
                kind,
                common.DSN,
                name,
                str(SLOTS),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().strip() if ready else ""
        if not line.startswith("ready "):
            raise RuntimeError(f"{system} consumer did not start: {line!r}")
        if system == "lonnymq_baseline" and not line.startswith(f"ready {baseline}"):
            raise RuntimeError(f"the baseline consumer loaded another client: {line!r}")
    return procs


def _stop_consumers(procs: list[subprocess.Popen[str]]) -> int:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    handled = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"consumer exited {proc.returncode}: {out[-2000:]}")
        handled += sum(
            int(line.split()[1]) for line in out.splitlines() if line.startswith("handled ")
        )
    return handled


def _reset(system: str) -> None:
    with common.connect() as conn:
        if system == "pgmq":
            common.reset_pgmq(conn)
            common.settle_server(conn, [f"pgmq.q_{common.PGMQ_QUEUE}"])
        else:
            common.reset_lonnymq(conn)
            common.settle_server(conn, ["lonnymq.message", "lonnymq.channel"])


def one_run(system: str, seconds: float, baseline: Path | None) -> dict[str, Any]:
    _reset(system)
    producer = Producer(system)
    producer.top_up()  # the backlog is there before the first consumer starts
    producer.start()
    procs = _start_consumers(system, baseline)
    try:
        time.sleep(WARMUP_S)
        server, clients = _server_pids(), [p.pid for p in procs]
        producer.low = BACKLOG
        created0, live0 = producer.snapshot()
        server0, client0 = common.cpu_ticks(server), common.cpu_ticks(clients)
        backends0, t0 = common.cpu_ticks(_consumer_backends()), time.monotonic()
        time.sleep(seconds)
        created1, live1 = producer.snapshot()
        server1, client1 = common.cpu_ticks(_server_pids()), common.cpu_ticks(clients)
        backends1, t1 = common.cpu_ticks(_consumer_backends()), time.monotonic()
        low = producer.low
    finally:
        handled = _stop_consumers(procs)
        producer.stopping.set()
        producer.join()
        producer.conn.close()
    if producer.error is not None:
        raise RuntimeError(f"producer failed: {producer.error!r}")
    jobs = (created1 - created0) - (live1 - live0)
    ms_per_tick = 1000 / common.CLK_TCK
    return {
        "jobs_per_s": jobs / (t1 - t0),
        "jobs": jobs,
        "seconds": t1 - t0,
        # The whole server (producer's creates, autovacuum and WAL writer included)...
        "server_cpu_ms_per_job": _spent(server0, server1) * ms_per_tick / max(jobs, 1),
        # ...and the backends of the consumers' own connections alone.
        "consumer_backends_cpu_ms_per_job": _spent(backends0, backends1)
        * ms_per_tick
        / max(jobs, 1),
        # The consumer processes (Python).
        "client_cpu_ms_per_job": _spent(client0, client1) * ms_per_tick / max(jobs, 1),
        "backlog_low": low,
        "handled_in_all": handled,
    }


def run(rounds: int, seconds: float, peers: list[str]) -> dict[str, Any]:
    baseline = _baseline_src()
    systems = ["lonnymq", "lonnymq_channelless"]
    if baseline is not None:
        systems.append("lonnymq_baseline")
    if "pgmq" in peers:
        systems.append("pgmq")
    else:
        common.log("workload 8: PGMQ not loaded: the Worker runs without its peer")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(rounds):
        for system in systems if r % 2 == 0 else list(reversed(systems)):
            result = one_run(system, seconds, baseline)
            runs[system].append(result)
            common.log(
                f"workload 8 round {r + 1}: {system:20s} {result['jobs_per_s']:8.0f} jobs/s, "
                f"server {result['server_cpu_ms_per_job']:.3f} ms/job "
                f"(consumers' backends {result['consumer_backends_cpu_ms_per_job']:.3f}), "
                f"workers {result['client_cpu_ms_per_job']:.3f} ms/job, "
                f"backlog >= {result['backlog_low']}"
            )
    summary: dict[str, Any] = {}
    for system, results in runs.items():
        summary[system] = {
            key: common.median([x[key] for x in results])
            for key in (
                "jobs_per_s",
                "server_cpu_ms_per_job",
                "consumer_backends_cpu_ms_per_job",
                "client_cpu_ms_per_job",
            )
        }
        summary[system]["backlog_low"] = min(x["backlog_low"] for x in results)
    if "pgmq" in runs:
        for system in systems:
            if system == "pgmq":
                continue
            per_round = [
                a["jobs_per_s"] / b["jobs_per_s"]
                for a, b in zip(runs[system], runs["pgmq"], strict=False)
            ]
            summary[system]["ratio_pgmq"] = (
                summary[system]["jobs_per_s"] / summary["pgmq"]["jobs_per_s"]
            )
            summary[system]["ratio_pgmq_per_round"] = per_round
            summary[system]["ratio_pgmq_median_of_rounds"] = common.median(per_round)
    return {
        "processes": PROCESSES,
        "slots": SLOTS,
        "backlog": BACKLOG,
        "channels": CHANNELS,
        "baseline": os.environ.get("BENCH_WORKER_BASELINE"),
        "rounds": rounds,
        "seconds": seconds,
        "runs": runs,
        "summary": summary,
    }
