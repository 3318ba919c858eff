"""Fixtures for the system suite: databases on the shared test cluster, a private
throwaway cluster for crash tests, worker processes, and a limit sampler.

The shared cluster (scripts/cluster, 127.0.0.1:25429) is reached through LONNYMQ_TEST_DSN.
Tests that crash or restart PostgreSQL never touch it: they start their own cluster in
.pgdata-reliability on port 25449 (LONNYMQ_RELIABILITY_PORT) and remove it afterwards.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

ROOT = Path(__file__).resolve().parents[2]
# Hypothesis keeps caches in ./.hypothesis unless told otherwise: keep the checkout clean.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", "/tmp/lonnymq-hypothesis")
PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))
ADMIN_DSN = os.environ.get("LONNYMQ_TEST_DSN", "postgresql://postgres@127.0.0.1:25429/postgres")
OWN_PGDATA = ROOT / ".pgdata-reliability"
OWN_PORT = int(os.environ.get("LONNYMQ_RELIABILITY_PORT", "25449"))


# -- small helpers ----------------------------------------------------------------------------


def wait_for(
    condition: Callable[[], object], timeout: float, what: str, every: float = 0.1
) -> None:
    """Poll ``condition`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def dsn_for(base: str, database: str, **extra: Any) -> str:
    return conninfo.make_conninfo(base, dbname=database, **extra)


def recreate_database(admin_dsn: str, name: str, extension: bool = True) -> str:
    """An empty database (with the extension unless told otherwise); returns its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = dsn_for(admin_dsn, name)
    if extension:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION lonnymq")
    return url


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def scalar(
    dsn_or_conn: str | psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()
) -> Any:
    if isinstance(dsn_or_conn, str):
        with psycopg.connect(dsn_or_conn, autocommit=True) as conn:
            return scalar(conn, query, params)
    row = dsn_or_conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def verify(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT * FROM lonnymq.verify()").fetchall()]


def archive_outcomes(dsn: str, queue: str) -> dict[int, list[tuple[str, int]]]:
    """message_id -> [(outcome, num_attempts), ...] from the archive of a queue."""
    result: dict[int, list[tuple[str, int]]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for message_id, outcome, attempts in conn.execute(
            "SELECT message_id, outcome, num_attempts FROM lonnymq.message_archive "
            "WHERE queue = %s",
            (queue,),
        ):
            result.setdefault(message_id, []).append((outcome, attempts))
    return result


def archived_count(dsn: str, queue: str) -> int:
    """Rows of the queue in the archive (cheap enough to poll)."""
    return int(
        scalar(dsn, "SELECT count(*) FROM lonnymq.message_archive WHERE queue = %s", (queue,))
    )


def live_ids(dsn: str, queue: str) -> set[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            r[0] for r in conn.execute("SELECT id FROM lonnymq.messages WHERE queue = %s", (queue,))
        }


@pytest.fixture
def queue_name() -> str:
    return "rel_" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def shared_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database with the extension on the shared cluster, one per test module."""
    name = "lonnymq_rel_" + request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    url = recreate_database(ADMIN_DSN, name)
    yield url
    drop_database(ADMIN_DSN, name)


# -- worker processes -------------------------------------------------------------------------


class WorkerProcess:
    """One ``python -m system.worker_main`` process; stderr goes to a log file."""

    def __init__(
        self,
        dsn: str,
        queue: str,
        concurrency: int,
        lock_ms: int,
        log_dir: Path,
        mode: str = "sync",
    ) -> None:
        self.mode = mode
        self.args = [
            sys.executable,
            "-m",
            "system.worker_main",
            dsn,
            queue,
            str(concurrency),
            str(lock_ms),
            mode,
        ]
        self.log_dir = log_dir
        self.starts = 0
        self.started_at = 0.0
        self.output = ""
        self.process: subprocess.Popen[str] | None = None
        self.start()

    def start(self) -> None:
        self.starts += 1
        self.started_at = time.monotonic()
        log = open(self.log_dir / f"worker-{id(self)}-{self.starts}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            self.args,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "test")},
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self, timeout: float = 30) -> int | None:
        """SIGTERM (graceful stop); returns the exit code."""
        if self.process is None:
            return None
        if self.alive():
            # Give a process started a moment ago time to get past interpreter start-up.
            time.sleep(max(0.0, self.started_at + 1.0 - time.monotonic()))
            self.process.send_signal(signal.SIGTERM)
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        self.output = out or ""
        return self.process.returncode

    def counts(self) -> dict[str, int]:
        """The worker's ``counts``, printed as JSON when it stops gracefully."""
        import json

        lines = [line for line in self.output.splitlines() if line.startswith("{")]
        return dict(json.loads(lines[-1])) if lines else {}

    def log_text(self) -> str:
        return "\n".join(
            p.read_text() for p in sorted(self.log_dir.glob(f"worker-{id(self)}-*.log"))
        )


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts worker processes; whatever is still running at the end is killed."""
    started: list[WorkerProcess] = []

    def start(
        dsn: str, queue: str, concurrency: int = 4, lock_ms: int = 2000, mode: str = "sync"
    ) -> WorkerProcess:
        """A worker process: ``mode`` "sync" runs ``Worker``, "async" runs ``AsyncWorker``."""
        w = WorkerProcess(dsn, queue, concurrency, lock_ms, tmp_path, mode)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


# -- the limit sampler ------------------------------------------------------------------------


class LimitSampler(threading.Thread):
    """Reads lonnymq.channel_stats in a loop: every sample of every channel with a
    max_concurrency must have locked <= max_concurrency. Records violations and the
    highest locked count seen per channel (so a test can show the limit was reached)."""

    def __init__(self, dsn: str, queue: str, period: float = 0.03) -> None:
        super().__init__(daemon=True, name="limit-sampler")
        self.dsn, self.queue, self.period = dsn, queue, period
        self.samples = 0
        self.errors = 0
        self.violations: list[tuple[str, int, int]] = []
        self.max_locked: dict[str, int] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop_event.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3)
                rows = conn.execute(
                    "SELECT channel, locked, max_concurrency FROM lonnymq.channel_stats "
                    "WHERE queue = %s AND max_concurrency IS NOT NULL",
                    (self.queue,),
                ).fetchall()
                self.samples += 1
                for channel, locked, limit in rows:
                    if locked > self.max_locked.get(channel, -1):
                        self.max_locked[channel] = locked
                    if locked > limit:
                        self.violations.append((channel, locked, limit))
            except psycopg.Error:
                # The server may be down on purpose (crash tests): sample again later.
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                self._stop_event.wait(0.2)
            self._stop_event.wait(self.period)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


# -- a private cluster for crash and restart tests ---------------------------------------------


def as_postgres(
    *args: str | Path, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    cmd = [str(a) for a in args]
    if os.getuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout)


class OwnCluster:
    """A throwaway PostgreSQL 15 cluster in .pgdata-reliability that tests may crash."""

    def __init__(self, pgdata: Path, port: int) -> None:
        self.pgdata, self.port = pgdata, port
        self.admin_dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def create(self) -> None:
        self.destroy()
        self.pgdata.mkdir(mode=0o700)
        if os.getuid() == 0:
            shutil.chown(self.pgdata, "postgres", "postgres")
        as_postgres(
            PGBIN / "initdb",
            "-D",
            self.pgdata,
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        with open(self.pgdata / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                "unix_socket_directories = ''\n"
                "max_connections = 100\nshared_buffers = 128MB\nlog_min_messages = warning\n"
                # Crash recovery must be quick: checkpoints are frequent and small.
                "checkpoint_timeout = 30s\nmax_wal_size = 256MB\n"
            )

    def start(self) -> None:
        as_postgres(
            PGBIN / "pg_ctl",
            "-D",
            self.pgdata,
            "-l",
            self.pgdata / "server.log",
            "-w",
            "-t",
            "60",
            "start",
        )

    def crash(self) -> None:
        """Immediate shutdown: no checkpoint, clients cut off; the restart replays WAL."""
        as_postgres(PGBIN / "pg_ctl", "-D", self.pgdata, "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            as_postgres(
                PGBIN / "pg_ctl", "-D", self.pgdata, "-m", "fast", "-w", "stop", check=False
            )

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.pgdata, ignore_errors=True)


@pytest.fixture(scope="session")
def own_cluster() -> Iterator[OwnCluster]:
    cluster = OwnCluster(OWN_PGDATA, OWN_PORT)
    cluster.create()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


def jitter(low: float, high: float) -> float:
    return random.uniform(low, high)


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs the lonnymq command line as a user would, against ``dsn``."""
    return subprocess.run(
        [sys.executable, "-m", "lonnymq", "--dsn", dsn, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
