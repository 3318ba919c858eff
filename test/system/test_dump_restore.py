"""pg_dump and pg_restore of a database that uses lonnymq round-trip the queue state exactly.

The source holds every kind of state: channels with each policy and live counters
(locked_count, removed_count, admission), an implicit channel, ready, scheduled, priority,
locked and channel-less messages, saved state, a live dedup key, hints not yet folded in,
an idempotency key, and failed, dead and retained completed archive rows; a monitor role
has its recipe GRANTs. After ``pg_dump -Fc`` and ``pg_restore`` into a new database:

- every lonnymq table and sequence is identical, row for row (also for a plain-SQL dump
  replayed with psql);
- the restored queue keeps working and keeps its promises: a create gets a fresh id, a
  reused dedup key / idempotency key is still recognised, max_size and max_concurrency
  still hold with the restored counters, the locked message is still locked and is
  redelivered with the next attempt when its lock expires, everything can be dequeued
  and completed, and ``verify()`` is empty;
- the recipe GRANTs on extension objects survive (a monitor can read the restored views).

A database whose extension a non-superuser owns keeps that owner through the restore
procedure docs/upgrades.md documents (``pg_restore --role=OWNER``, also with ``--no-owner``):
a superuser restoring without it would own every SECURITY DEFINER function, so the
install script refuses (the schema, restored first, is the owner's) with a hint.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from lonnymq import Queue

from .conftest import ADMIN_DSN, PGBIN, drop_database, dsn_for, recreate_database, verify
from .test_security import drop_roles, ensure_role, fingerprint

# The in-flight pair's lock: long enough to outlast building the state on a loaded machine.
LOCK_MS = 5000


def run_tool(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    info = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    base = [
        "-h",
        str(info.get("host", "127.0.0.1")),
        "-p",
        str(info.get("port", 5432)),
        "-U",
        str(info.get("user", "postgres")),
    ]
    return subprocess.run(
        [str(PGBIN / tool), *base, *args], capture_output=True, text=True, timeout=120
    )


def pg_tool(tool: str, *args: str) -> None:
    result = run_tool(tool, *args)
    assert result.returncode == 0, f"{tool} failed: {result.stderr}"


def build_state(dsn: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    with Queue(dsn, "dumped", pool_size=2) as q:
        q.channel_set("limited", max_concurrency=2, max_attempts=3)
        q.channel_set("capped", max_size=3, release_interval_ms=1, retain_completed=True)
        q.channel_set("dead_end", max_attempts=1)
        q.create_batch(["l1", "l2", "l3", "l4"], channel="limited")
        q.create_batch(["s1", "s2"], channel="capped")
        q.create("x", channel="dead_end")
        q.create("later", channel="implicit", delay_ms=3_600_000, state=b"\x00saved\xff")
        q.create("vip", channel="implicit", priority=7)
        q.create("plain", dedup_key="order-42")
        q.create_batch(["b1", "b2"], channel="implicit", idempotency_key="batch-1")
        # Deliveries: "l1" and "l2" stay in flight (their locks expire soon after the dump);
        # "s1" is completed (retained), "vip" failed; "x" is deferred after its only attempt
        # and dead-lettered by the next dequeue that reaches "dead_end".
        taken = q.dequeue(lock_ms=LOCK_MS, max_messages=20)
        facts["locked_at"] = time.monotonic()
        by_content = {m.content: m for m in taken}
        assert {b"l1", b"l2", b"s1", b"x", b"vip", b"plain"} <= set(by_content)
        assert by_content[b"s1"].complete() == "completed"
        assert by_content[b"vip"].fail("gave up") == "failed"
        for m in taken:
            if m.content not in (b"s1", b"vip", b"l1", b"l2"):
                assert m.defer(delay_ms=0) == "deferred"
        with q.pool.connection() as conn:
            for _ in range(20):
                if conn.execute(
                    "SELECT 1 FROM lonnymq.message_archive WHERE outcome = 'dead'"
                ).fetchone():
                    break
                for m in q.dequeue(lock_ms=60_000, max_messages=20):
                    assert m.defer(delay_ms=0) == "deferred"
            facts["locked"] = {by_content[b"l1"].id: 1, by_content[b"l2"].id: 1}
            # Hints that no dequeue has folded in yet.
            q.create("fresh", channel="implicit")
            facts["max_id"] = conn.execute(
                "SELECT greatest((SELECT max(id) FROM lonnymq.message), "
                "(SELECT max(message_id) FROM lonnymq.message_archive))"
            ).fetchone()[0]  # type: ignore[index]
            outcomes = {r[0] for r in conn.execute("SELECT outcome FROM lonnymq.message_archive")}
        assert outcomes == {"completed", "failed", "dead"}
    return facts


def test_dump_and_restore_round_trip(tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    source, target = f"lonnymq_rel_dump_src_{suffix}", f"lonnymq_rel_dump_dst_{suffix}"
    monitor = f"rel_dump_monitor_{suffix}"
    src = recreate_database(ADMIN_DSN, source)
    created_roles = [monitor]
    try:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            if ensure_role(admin, "lonnymq_monitor", login=False):
                created_roles.append("lonnymq_monitor")
            ensure_role(admin, monitor, login=True)
            admin.execute(sql.SQL("GRANT lonnymq_monitor TO {}").format(sql.Identifier(monitor)))
        with psycopg.connect(src, autocommit=True) as conn:
            conn.execute(
                "GRANT USAGE ON SCHEMA lonnymq TO lonnymq_monitor; "
                "GRANT SELECT ON lonnymq.channel_stats, lonnymq.message_archive TO lonnymq_monitor"
            )
        facts = build_state(src)
        assert verify(src) == []
        before = fingerprint(src)
        assert before["channel_hint"] and before["batch"] and before["channel_admission"]

        dump = tmp_path / "lonnymq.dump"
        pg_tool("pg_dump", "-Fc", "-d", source, "-f", str(dump))
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(target)))
        pg_tool("pg_restore", "--exit-on-error", "-d", target, str(dump))
        dst = dsn_for(src, target)

        # Row for row, sequence for sequence; a plain-SQL dump replayed with psql as well.
        assert fingerprint(dst) == before
        plain = tmp_path / "lonnymq.sql"
        pg_tool("pg_dump", "-Fp", "-d", source, "-f", str(plain))
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(target + "_plain")))
        pg_tool(
            "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target + "_plain", "-f", str(plain)
        )
        assert fingerprint(dsn_for(src, target + "_plain")) == before
        assert verify(dst) == []
        # Grants on extension objects survived.
        with psycopg.connect(dsn_for(src, target, user=monitor), autocommit=True) as mon:
            row = mon.execute(
                "SELECT count(*) FROM lonnymq.channel_stats WHERE queue = 'dumped'"
            ).fetchone()
            assert row is not None and row[0] > 0

        with Queue(dst, "dumped", pool_size=2) as q:
            fresh = q.create("after restore", channel="implicit")
            assert fresh.status == "created" and fresh.id is not None and fresh.id > facts["max_id"]
            assert q.create("dup", dedup_key="order-42").status == "deduplicated"
            assert {
                r.status
                for r in q.create_batch(["b1", "b2"], channel="implicit", idempotency_key="batch-1")
            } == {"duplicate_batch"}
            # capped: max_size 3 with "s2" live and "s1" completed: two more fit, not three.
            assert [q.create(f"c{n}", channel="capped").status for n in range(3)] == [
                "created",
                "created",
                "dropped",
            ]
            # Drain: limits hold on the restored counters, the in-flight pair is redelivered.
            time.sleep(max(0.0, facts["locked_at"] + LOCK_MS / 1000 + 0.2 - time.monotonic()))
            seen_recovered: dict[int, int] = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batch = q.dequeue(lock_ms=60_000, max_messages=10)
                if not batch:
                    if not [s for s in q.channel_stats() if s.ready]:
                        break
                    time.sleep(0.02)
                    continue
                limited_locked = [s.locked for s in q.channel_stats() if s.channel == "limited"]
                assert limited_locked and limited_locked[0] <= 2
                for m in batch:
                    if m.recovered:
                        seen_recovered[m.id] = m.num_attempts
                    assert m.complete() == "completed"
            assert seen_recovered == {mid: n + 1 for mid, n in facts["locked"].items()}
            stats = q.queue_stats()
            assert (stats.ready, stats.locked) == (0, 0) and stats.scheduled == 1  # "later"
        assert verify(dst) == []
    finally:
        drop_database(ADMIN_DSN, source)
        drop_database(ADMIN_DSN, target)
        drop_database(ADMIN_DSN, target + "_plain")
        drop_roles(created_roles)


def owners(dsn: str) -> set[str]:
    """The owners of the extension, its schema and every object in it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT pg_get_userbyid(extowner) FROM pg_extension WHERE extname = 'lonnymq'
            UNION SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'lonnymq'
            UNION SELECT pg_get_userbyid(proowner) FROM pg_proc
                   WHERE pronamespace = 'lonnymq'::regnamespace
            UNION SELECT pg_get_userbyid(relowner) FROM pg_class
                   WHERE relnamespace = 'lonnymq'::regnamespace
            """
        ).fetchall()
    return {r[0] for r in rows}


def test_restore_keeps_a_non_superuser_owner(tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    owner = f"rel_dump_owner_{suffix}"
    source = f"lonnymq_rel_own_src_{suffix}"
    targets = [f"lonnymq_rel_own_{kind}_{suffix}" for kind in ("naive", "role", "noowner")]
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        ensure_role(admin, owner, login=True)
        for db in (source, *targets):
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(db), sql.Identifier(owner)
                )
            )
    try:
        # The owner installs the extension itself (superuser = false) and uses it.
        src = dsn_for(ADMIN_DSN, source, user=owner)
        with psycopg.connect(src, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION lonnymq")
            # The guard (docs/upgrades.md) against DROP EXTENSION travels with the dump.
            conn.execute(
                "CREATE VIEW public.lonnymq_drop_guard AS "
                "SELECT m.id FROM lonnymq.message m WHERE false"
            )
        with Queue(src, "owned", pool_size=1) as q:
            q.create_batch(["a", "b"], channel="acme")
        assert owners(src) == {owner}
        dump = tmp_path / "owned.dump"
        pg_tool("pg_dump", "-Fc", "-d", source, "-f", str(dump))

        # A superuser restoring as itself would own the SECURITY DEFINER functions: refused.
        naive = run_tool("pg_restore", "--exit-on-error", "-d", targets[0], str(dump))
        assert naive.returncode != 0
        assert f"owned by role {owner}" in naive.stderr and "--role" in naive.stderr, naive.stderr
        assert owners(dsn_for(ADMIN_DSN, targets[0])) <= {
            owner
        }  # nothing of lonnymq but the schema

        # The documented procedures: the owner stays the owner of everything.
        pg_tool("pg_restore", "--exit-on-error", f"--role={owner}", "-d", targets[1], str(dump))
        pg_tool(
            "pg_restore",
            "--exit-on-error",
            "--no-owner",
            f"--role={owner}",
            "-d",
            targets[2],
            str(dump),
        )
        for target in targets[1:]:
            dst = dsn_for(ADMIN_DSN, target, user=owner)
            assert owners(dst) == {owner}
            with Queue(dst, "owned", pool_size=1) as q:
                assert q.queue_stats().ready == 2
                assert len(q.dequeue(lock_ms=60_000, max_messages=5)) == 2
            assert verify(dst) == []
            with (
                psycopg.connect(dst, autocommit=True) as conn,
                pytest.raises(psycopg.errors.DependentObjectsStillExist),
            ):
                conn.execute("DROP EXTENSION lonnymq")
    finally:
        for db in (source, *targets):
            drop_database(ADMIN_DSN, db)
        drop_roles([owner])
