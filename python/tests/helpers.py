"""Small helpers shared by the worker tests: waiting for a condition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``condition`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.02)


def locked_count(db: psycopg.Connection[Any], queue: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM lonnymq.messages WHERE queue = %s AND locked_until IS NOT NULL",
        (queue,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def live_ids(db: psycopg.Connection[Any], queue: str) -> set[int]:
    rows = db.execute("SELECT id FROM lonnymq.messages WHERE queue = %s", (queue,)).fetchall()
    return {int(r[0]) for r in rows}
