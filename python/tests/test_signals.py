"""SIGTERM (or SIGINT) to a worker process: it stops taking work, finishes or defers what it holds,
exits 0, and leaves nothing locked and nothing lost."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lonnymq import Queue

from .helpers import live_ids, locked_count

PYTHON_DIR = Path(__file__).resolve().parent.parent


def start_process(
    dsn: str, queue: str, handler_ms: int, grace_ms: int, mode: str
) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        "-m",
        "tests.worker_process",
        dsn,
        queue,
        str(handler_ms),
        str(grace_ms),
    ]
    return subprocess.Popen(
        args + ([mode] if mode == "async" else []),
        cwd=PYTHON_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_until_started(process: subprocess.Popen[str], count: int) -> list[str]:
    lines: list[str] = []
    assert process.stdout is not None
    while sum(line.startswith("start") for line in lines) < count:
        line = process.stdout.readline()
        assert line, f"worker exited early: {lines}"
        lines.append(line.strip())
    return lines


def ids(lines: list[str], word: str) -> set[int]:
    return {int(line.split()[1]) for line in lines if line.startswith(word + " ")}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_finishes_in_hand_work(
    dsn: str, queue: Queue, db: psycopg.Connection[Any], mode: str
) -> None:
    created = {r.id for r in queue.create_batch([str(n) for n in range(6)])}
    process = start_process(dsn, queue.name, handler_ms=400, grace_ms=10_000, mode=mode)
    lines = read_until_started(process, 2)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    lines += out.split("\n")
    assert process.returncode == 0 and "exit" in lines
    assert ids(lines, "start") == ids(lines, "done")  # everything in hand was finished
    assert locked_count(db, queue.name) == 0
    # Nothing lost: every message is either done or still queued, never both.
    remaining = live_ids(db, queue.name)
    assert remaining | ids(lines, "done") == created
    assert not remaining & ids(lines, "done")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_signal_defers_work_past_the_grace_period(
    dsn: str, queue: Queue, db: psycopg.Connection[Any], mode: str, signum: signal.Signals
) -> None:
    created = {r.id for r in queue.create_batch([str(n) for n in range(4)])}
    process = start_process(dsn, queue.name, handler_ms=60_000, grace_ms=300, mode=mode)
    lines = read_until_started(process, 2)
    process.send_signal(signum)
    out, _ = process.communicate(timeout=20)
    lines += out.split("\n")
    assert process.returncode == 0 and "exit" in lines
    assert ids(lines, "done") == set()
    assert locked_count(db, queue.name) == 0
    assert live_ids(db, queue.name) == created  # deferred back, nothing lost
    ready = queue.dequeue(lock_ms=10_000, max_messages=4)
    assert len(ready) == 4  # and immediately available to another worker
