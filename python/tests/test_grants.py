"""The GRANT recipes of docs/grants.sql, each given to a real login role from its own section
of the file, run for what the role is for: the producer creates; the consumer runs a Worker
through idle periods, announcing itself (wait_begin) each time it sleeps; the monitor follows
``lonnymq tail`` and reads the dashboard. (The README's recipes, which lacked wait_begin and
wait_end, crashed the Worker at its first sleep and ``tail`` at its start.)"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql
from starlette.testclient import TestClient

from lonnymq import Message, Queue, Worker
from lonnymq.web import create_app

from .helpers import wait_for

RECIPES = Path(__file__).resolve().parents[2] / "docs" / "grants.sql"
# Each recipe starts with "-- <Name> (<group role>): what it is for".
HEADING = re.compile(r"^-- (?P<name>[A-Z]\w*) \((?P<role>lonnymq_\w+)\):", re.MULTILINE)


def recipes(text: str) -> dict[str, tuple[str, str]]:
    """The recipes of the file by name (lower case): their group role and their SQL, from
    their heading to the next one."""
    heads = list(HEADING.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return {
        h.group("name").lower(): (h.group("role"), text[h.start() : end])
        for h, end in zip(heads, ends, strict=True)
    }


@pytest.fixture(scope="module")
def logins(dsn: str) -> Iterator[dict[str, str]]:
    """One login role per recipe, member of a group role created and granted by the recipe's
    own text (its role renamed, so that the test's roles are its own); DSNs by recipe."""
    found = recipes(RECIPES.read_text())
    assert set(found) == {"producer", "consumer", "monitor"}, set(found)
    suffix = uuid.uuid4().hex[:8]
    created: list[str] = []
    dsns = {}
    with psycopg.connect(dsn, autocommit=True) as owner:
        try:
            for name, (role, text) in found.items():
                group, login = f"{role}_{suffix}", f"{name}_login_{suffix}"
                owner.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(group)))
                created.append(group)
                owner.execute(re.sub(rf"\b{role}\b", group, text).encode())
                owner.execute(
                    sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                        sql.Identifier(login), sql.Identifier(group)
                    )
                )
                created.append(login)
                dsns[name] = conninfo.make_conninfo(dsn, user=login)
            yield dsns
        finally:
            for role in reversed(created):
                owner.execute(
                    sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role))
                )


def announced_by(owner_dsn: str, login_dsn: str, queue: str) -> bool:
    """Whether a backend of the login holds the waiting announcement of the queue's slot."""
    user = conninfo.conninfo_to_dict(login_dsn)["user"]
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
            " AND l.classid = lonnymq._waiting_lock_class()::oid"
            " AND l.objid = lonnymq._wait_slot(%s)::oid AND a.usename = %s",
            (queue, user),
        ).fetchone()
    return row is not None and row[0] > 0


def test_the_producer_creates(logins: dict[str, str], dsn: str, queue_name: str) -> None:
    with Queue(logins["producer"], queue_name, pool_size=1) as q:
        assert q.create("one", channel="a").status == "created"
        assert [r.status for r in q.create_batch(["two", "three"], channel="b")] == ["created"] * 2
    send = subprocess.run(
        [sys.executable, "-m", "lonnymq", "--dsn", logins["producer"], "send", queue_name, "four"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert send.returncode == 0, send.stderr
    with psycopg.connect(dsn, autocommit=True) as owner:
        rows = owner.execute(
            "SELECT content FROM lonnymq.messages WHERE queue = %s", (queue_name,)
        ).fetchall()
    assert sorted(bytes(r[0]) for r in rows) == [b"four", b"one", b"three", b"two"]


def test_the_consumer_runs_a_worker_through_idle_periods(
    logins: dict[str, str],
    dsn: str,
    queue_name: str,
    start_worker: Callable[[Worker], threading.Thread],
) -> None:
    handled: list[bytes] = []

    def handler(message: Message) -> None:
        handled.append(bytes(message.content))

    with (
        Queue(logins["consumer"], queue_name, pool_size=4) as q,
        Queue(dsn, queue_name, pool_size=1) as owner,
    ):
        worker = Worker(q, handler, concurrency=1, handle_signals=False)
        thread = start_worker(worker)
        for content in (b"first", b"second"):
            # Nothing to do: the worker sleeps, announced as a waiter (wait_begin) by its role.
            # Checked together: a slot freeing up wakes the worker between the two reads.
            def idle_and_announced() -> bool:
                return worker.sleeping.is_set() and announced_by(
                    dsn, logins["consumer"], queue_name
                )

            wait_for(
                lambda: not thread.is_alive() or idle_and_announced(), 30, "the worker to idle"
            )
            assert thread.is_alive(), "the worker stopped"
            owner.create(content)

            def done(c: bytes = content) -> bool:
                return not thread.is_alive() or c in handled

            wait_for(done, 30, "the worker to handle")
            assert thread.is_alive(), "the worker stopped"
    assert handled == [b"first", b"second"]


def test_the_monitor_follows_tail(logins: dict[str, str], dsn: str, queue_name: str) -> None:
    command = ["tail", "--queue", queue_name, "--count", "1", "--timeout", "30"]
    tail = subprocess.Popen(
        [sys.executable, "-m", "lonnymq", "--dsn", logins["monitor"], *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tail.stdout is not None
        # It says so once it listens and has announced itself as a waiter (wait_begin).
        assert tail.stdout.readline().startswith("listening"), tail.communicate(timeout=30)
        assert announced_by(dsn, logins["monitor"], queue_name)
        with Queue(dsn, queue_name, pool_size=1) as owner:
            owner.create("x")
        out, err = tail.communicate(timeout=30)
    finally:
        tail.kill()
        tail.wait()
    assert tail.returncode == 0, err
    assert "created" in out and f"queue={queue_name}" in out, out


def test_the_monitor_reads_the_dashboard(logins: dict[str, str], dsn: str, queue_name: str) -> None:
    with Queue(dsn, queue_name, pool_size=1) as owner:
        [created] = owner.create_batch(["x"], channel="acme")
        [message] = owner.dequeue(lock_ms=60000)
        message.fail("boom")
        owner.create("y", channel="acme")

    def fingerprint() -> list[Any]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(
                "SELECT (SELECT array_agg(m ORDER BY id) FROM lonnymq.message m),"
                " (SELECT array_agg(a ORDER BY id) FROM lonnymq.message_archive a),"
                " (SELECT array_agg(c ORDER BY id) FROM lonnymq.channel c)"
            ).fetchall()

    before = fingerprint()
    with TestClient(create_app(logins["monitor"]), base_url="http://localhost") as c:
        overview = c.get("/")
        assert overview.status_code == 200 and queue_name in overview.text
        channels = c.get("/channels", params={"queue": queue_name})
        assert channels.status_code == 200 and 'data-channel="acme"' in channels.text
        messages = c.get("/messages", params={"queue": queue_name})
        assert messages.status_code == 200
        archive = c.get("/archive", params={"queue": queue_name})
        assert archive.status_code == 200 and "boom" in archive.text
        for page in ("/verify", "/schedules", "/metrics"):
            assert c.get(page).status_code == 200, page
    assert created.status == "created"
    assert fingerprint() == before
