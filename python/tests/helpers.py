"""Small helpers shared by the tests: waiting for a condition with a deadline, reading the
queue, holding a queue's announcements and the monitor's GRANT recipe."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
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


def block_announcements(dsn: str, queue: str) -> psycopg.Connection[Any]:
    """A session holding exclusively the locks that ``wait_begin(queue)`` takes, so that a
    ``wait_begin`` meanwhile cannot announce its caller (as at the instant a producer looks
    for waiters, or while another role holds such a lock). The locks are found by calling
    it once, so this follows however they are keyed. Close the session to release them."""
    with psycopg.connect(dsn, autocommit=True) as probe:
        probe.execute("SELECT lonnymq.wait_begin(%s)", (queue,))
        locks = probe.execute(
            "SELECT classid::int8, objid::int8, objsubid FROM pg_locks"
            " WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted"
        ).fetchall()
    assert locks, "wait_begin took no advisory lock"
    blocker = psycopg.connect(dsn, autocommit=True)
    for classid, objid, objsubid in locks:
        if objsubid == 1:  # one bigint key
            blocker.execute("SELECT pg_advisory_lock(%s::int8)", ((classid << 32) | objid,))
        else:  # two int4 keys, stored as oids
            keys = [k - 2**32 if k >= 2**31 else k for k in (classid, objid)]
            blocker.execute("SELECT pg_advisory_lock(%s::int4, %s::int4)", keys)
    return blocker


GRANTS = Path(__file__).resolve().parents[2] / "docs" / "grants.sql"


def monitor_grants(role: str) -> str:
    """docs/grants.sql's monitor recipe (its section, up to the next recipe's heading) with
    ``role`` in place of ``lonnymq_monitor``: the grants a read-only dashboard is documented
    to need, read from their one home."""
    sections = re.split(r"(?m)^(?=-- [A-Z]\w* \(lonnymq_\w+\):)", GRANTS.read_text())
    [monitor] = [s for s in sections if s.startswith("-- Monitor (lonnymq_monitor):")]
    return re.sub(r"\blonnymq_monitor\b", role, monitor)
