"""Security from a client's point of view (docs/privileges.md), beyond
test/pgtap/03_security.sql, which tries every function and relation as every recipe role in SQL.
This file is the one home of roles through real clients.

Here the roles are LOGIN roles that use the real Python client, worker, CLI and dashboard:

- a role with no grants gets SQLSTATE 42501 from every ``Queue`` method and the CLI, and
  the queue's tables are byte-for-byte unchanged afterwards; what it can still observe
  (NOTIFY payloads) carries no message data;
- each recipe of docs/grants.sql, created from its own section of the file (so its text is
  what is tested), gives exactly what it says: a producer creates and nothing else; a
  consumer runs a real ``Worker`` (LISTEN, dequeue, heartbeat, complete, defer, fail, and
  through idle periods wait_begin and wait_end) and nothing else; a monitor reads stats,
  archive and ``verify()``, follows ``lonnymq status`` and ``lonnymq tail`` and reads the
  dashboard, and changes nothing. (Recipes without wait_begin and wait_end stopped the
  Worker at its first idle sleep and ``tail`` at its start.)
- hostile look-alikes earlier on the caller's search_path do not change what the Python
  client's own statements do.

Dump and restore are in test_dump_restore.py.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from starlette.testclient import TestClient

from lonnymq import Backoff, Message, Queue, Retry, Worker
from lonnymq.web import create_app

from .conftest import (
    ADMIN_DSN,
    ROOT,
    cli,
    drop_database,
    dsn_for,
    recreate_database,
    scalar,
    verify,
    wait_for,
)

DENIED = psycopg.errors.InsufficientPrivilege
RECIPES = ROOT / "docs" / "grants.sql"
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


def ensure_role(admin: psycopg.Connection[Any], name: str, login: bool) -> bool:
    """Creates the role unless it exists; returns whether it did (so the caller drops it)."""
    exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
    if not exists:
        admin.execute(
            sql.SQL("CREATE ROLE {} " + ("LOGIN" if login else "NOLOGIN")).format(
                sql.Identifier(name)
            )
        )
    return not exists


def drop_roles(roles: list[str]) -> None:
    """Drops roles this suite created; one still in use elsewhere is left alone."""
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        for role in roles:
            with contextlib.suppress(psycopg.errors.DependentObjectsStillExist):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def security_db() -> Iterator[dict[str, str]]:
    """A database where each recipe of docs/grants.sql was run from its own section, for a
    group role of this module's own (the recipe's role renamed), and one LOGIN role per
    recipe plus two with nothing. Yields DSNs by role: owner, producer, consumer, monitor,
    nobody, hostile."""
    found = recipes(RECIPES.read_text())
    assert set(found) == {"producer", "consumer", "monitor"}, set(found)
    suffix = uuid.uuid4().hex[:6]
    name = "lonnymq_rel_security"
    owner_dsn = recreate_database(ADMIN_DSN, name)
    logins = {kind: f"rel_{kind}_{suffix}" for kind in (*found, "nobody", "hostile")}
    groups = {kind: f"{role}_{suffix}" for kind, (role, _) in found.items()}
    with psycopg.connect(owner_dsn, autocommit=True) as owner:
        for kind, (role, text) in found.items():
            owner.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(groups[kind])))
            owner.execute(re.sub(rf"\b{role}\b", groups[kind], text).encode())
        for kind, login in logins.items():
            owner.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
            if kind in groups:
                owner.execute(
                    sql.SQL("GRANT {} TO {}").format(
                        sql.Identifier(groups[kind]), sql.Identifier(login)
                    )
                )
    dsns = {"owner": owner_dsn, **{k: dsn_for(owner_dsn, name, user=r) for k, r in logins.items()}}
    try:
        yield dsns
    finally:
        drop_database(ADMIN_DSN, name)
        drop_roles([*logins.values(), *groups.values()])


def fingerprint(owner_dsn: str) -> dict[str, str]:
    """Every lonnymq table and sequence, as text, read by the owner."""
    result = {}
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        rels = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c "
            "WHERE c.relnamespace = 'lonnymq'::regnamespace "
            "AND c.relkind IN ('r', 'S') ORDER BY 1"
        ).fetchall()
        for rel, kind in rels:
            query = (
                f"SELECT last_value::text || is_called::text FROM lonnymq.{rel}"
                if kind == "S"
                else "SELECT coalesce(string_agg(t::text, '|' ORDER BY t::text), '') "
                f"FROM lonnymq.{rel} t"
            )
            result[rel] = conn.execute(query).fetchone()[0]  # type: ignore[index]
    return result


def seed(owner_dsn: str, queue: str) -> tuple[int, int]:
    """A channel with a policy, two messages and one failed archive row; returns
    (pending id, archive id)."""
    with Queue(owner_dsn, queue, pool_size=1) as q:
        q.channel_set("acme", max_concurrency=3)
        q.create("secret one", channel="acme")
        pending = q.create("secret two", channel="acme").id
        [m] = q.dequeue(lock_ms=60_000)
        assert m.fail("seeded failure") == "failed"
        archive_id = q.message_archive()[0].id
    assert pending is not None
    return pending, archive_id


def every_call(q: Queue, pending: int, archive_id: int) -> dict[str, Callable[[], object]]:
    """Every Queue method, with arguments that would work for a privileged role."""
    return {
        "channel_set": lambda: q.channel_set("acme", max_concurrency=100),
        "channel_delete": lambda: q.channel_delete("acme"),
        "create": lambda: q.create("x", channel="acme"),
        "create_batch": lambda: q.create_batch(["x"], channel="acme"),
        "dequeue": lambda: q.dequeue(lock_ms=1000),
        "complete": lambda: q.complete(pending, 1),
        "complete_batch": lambda: q.complete_batch([]),
        "defer": lambda: q.defer(pending, 1),
        "heartbeat": lambda: q.heartbeat(pending, 1, 1000),
        "fail": lambda: q.fail(pending, 1),
        "cancel": lambda: q.cancel(pending),
        "message_archive": lambda: q.message_archive(),
        "archive_requeue": lambda: q.archive_requeue(archive_id),
        "archive_prune": lambda: q.archive_prune(timedelta(0)),
        "wait_hint_ms": lambda: q.wait_hint_ms(),
        "queue_stats": lambda: q.queue_stats(),
        "channel_stats": lambda: q.channel_stats(),
        "verify": lambda: q.verify(),
    }


def allowed_calls(dsn: str, queue: str, pending: int, archive_id: int, skip: set[str]) -> set[str]:
    """Names of the Queue methods that did not fail with 42501 for this DSN's role."""
    allowed = set()
    with Queue(dsn, queue, pool_size=1) as q:
        for name, fn in every_call(q, pending, archive_id).items():
            if name in skip:
                continue
            try:
                fn()
                allowed.add(name)
            except DENIED:
                pass
    return allowed


def test_a_role_without_grants_can_do_nothing(security_db: dict[str, str], queue_name: str) -> None:
    pending, archive_id = seed(security_db["owner"], queue_name)
    before = fingerprint(security_db["owner"])
    nobody = security_db["nobody"]
    assert allowed_calls(nobody, queue_name, pending, archive_id, skip=set()) == set()
    with psycopg.connect(nobody, autocommit=True) as conn:
        for statement in (
            "SELECT * FROM lonnymq.message",
            "SELECT * FROM lonnymq.messages",
            "UPDATE lonnymq.message SET locked_until_ms = NULL",
            "DELETE FROM lonnymq.message_archive",
            "SELECT nextval('lonnymq.message_id_seq')",
            "SELECT lonnymq._settle_locked(NULL, 'completed', NULL)",
            "CREATE TABLE lonnymq.intruder (x int)",
        ):
            with pytest.raises(DENIED):
                conn.execute(statement)
    # The CLI says so too, and exits non-zero.
    for args in (("status",), ("send", queue_name, "x")):
        result = cli(nobody, *args)
        assert result.returncode != 0 and "permission denied" in result.stderr, (args, result)
    assert fingerprint(security_db["owner"]) == before
    assert verify(security_db["owner"]) == []


def test_what_a_role_without_grants_can_observe_is_no_message_data(
    security_db: dict[str, str], queue_name: str
) -> None:
    """LISTEN needs no privilege (PostgreSQL has none for it): a role without grants hears
    that a queue got work. The payload names the queue and the event, nothing else: no
    ids, no channels, no content."""
    with psycopg.connect(security_db["nobody"], autocommit=True) as listener:
        listener.execute("LISTEN lonnymq")
        listener.execute("LISTEN lonnymq_dead")
        with Queue(security_db["owner"], queue_name, pool_size=1) as q:
            q.create("top secret", channel="tenant-42")
            [m] = q.dequeue(lock_ms=60_000)
            m.fail("boom: top secret")
        payloads = [n.payload for n in listener.notifies(timeout=2, stop_after=2)]
    assert payloads and all(set(json.loads(p)) == {"queue", "event"} for p in payloads), payloads
    assert not any("secret" in p or "tenant" in p for p in payloads)


def take_every_advisory_lock(attacker: psycopg.Connection[Any], channels: list[str]) -> None:
    """What a role without grants can do to a channel's coordination: take, exclusively and
    for the whole session, every advisory lock it can compute (both lonnymq classes, queue
    ids 1-49) or read from pg_locks. Tried, so the attacker never queues behind anyone."""
    for queue_id in range(1, 50):
        for channel in channels:
            for lock_class in (1819176557, 1819176552):  # 'lonm' (1.0's channel lock), 'lonh'
                attacker.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(%s || '/' || %s))",
                    (lock_class, str(queue_id), channel),
                )
    attacker.execute(
        "SELECT pg_try_advisory_lock(classid::int, objid::int) FROM pg_locks "
        "WHERE locktype = 'advisory' AND objsubid = 2"
    )


def test_a_role_without_grants_cannot_stall_producers_settles_or_policy(
    security_db: dict[str, str], queue_name: str
) -> None:
    """The 1.0 finding: channel locks were advisory locks with a computable key, so any role
    could freeze a channel's producers and settles. Channels are now coordinated through
    their rows, which a role without UPDATE on lonnymq.channel cannot lock; the one advisory
    lock left (the head lock) is only ever tried."""
    with Queue(security_db["owner"], queue_name, pool_size=1) as q:
        q.create("first", channel="victim")
        [held] = q.dequeue(lock_ms=60_000)
    with (
        psycopg.connect(security_db["nobody"], autocommit=True) as attacker,
        psycopg.connect(security_db["owner"], autocommit=True) as owner,
    ):
        take_every_advisory_lock(attacker, ["victim"])
        for statement in (
            "SELECT 1 FROM lonnymq.channel FOR KEY SHARE",
            "LOCK TABLE lonnymq.channel IN ROW SHARE MODE",
        ):
            with pytest.raises(DENIED), attacker.transaction():
                attacker.execute(statement)
        owner.execute("SET statement_timeout = '5s'")
        # Producers, settles, a policy change and a dequeue all go through at once.
        assert owner.execute(
            "SELECT status FROM lonnymq.message_create(%s, 'victim', 'second')", (queue_name,)
        ).fetchone() == ("created",)
        assert owner.execute(
            "SELECT lonnymq.message_complete(%s, %s)", (held.id, held.num_attempts)
        ).fetchone() == ("completed",)
        owner.execute(
            "SELECT lonnymq.channel_set(%s, 'victim', max_concurrency => 1)", (queue_name,)
        )
        got = owner.execute(
            "SELECT convert_from(content, 'UTF8') FROM lonnymq.message_dequeue(%s, 60000)",
            (queue_name,),
        ).fetchall()
        assert got == [("second",)]
        owner.execute("SELECT lonnymq.channel_delete(%s, 'victim')", (queue_name,))


def test_a_pg_locks_reader_cannot_freeze_busy_channels(
    security_db: dict[str, str], queue_name: str
) -> None:
    """The trial's attack, run for real: producers keep 10 channels busy while a role without
    grants keeps reading pg_locks and taking every advisory lock it sees, exclusively, for
    its session. In 1.0 it froze most channels within seconds. Every producer must keep
    going: none may wait out its statement_timeout, and every channel gets its messages."""
    channels = [f"busy-{i}" for i in range(10)]
    errors: list[BaseException] = []
    created = dict.fromkeys(channels, 0)
    stop = threading.Event()

    def produce(channel: str) -> None:
        try:
            with psycopg.connect(security_db["owner"], autocommit=True) as conn:
                conn.execute("SET statement_timeout = '3s'")
                while not stop.is_set():
                    conn.execute(
                        "SELECT lonnymq.message_create(%s, %s, 'x')", (queue_name, channel)
                    )
                    created[channel] += 1
        except BaseException as e:
            errors.append(e)

    def attack() -> None:
        with psycopg.connect(security_db["nobody"], autocommit=True) as attacker:
            while not stop.is_set():
                take_every_advisory_lock(attacker, channels)

    threads = [threading.Thread(target=produce, args=(c,)) for c in channels]
    threads.append(threading.Thread(target=attack))
    for t in threads:
        t.start()
    time.sleep(4)  # the attack's duration, not a synchronisation: progress is asserted below
    before = dict(created)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    stalled = [c for c in channels if created[c] == before[c]]
    assert not stalled, f"channels that made no progress in the attack's last 2 s: {stalled}"
    with psycopg.connect(security_db["owner"], autocommit=True) as owner:
        counts: dict[str, int] = dict(
            owner.execute(
                "SELECT channel, count(*) FROM lonnymq.messages WHERE queue = %s GROUP BY channel",
                (queue_name,),
            ).fetchall()
        )
    assert counts == created


def test_producer_recipe(security_db: dict[str, str], queue_name: str) -> None:
    pending, archive_id = seed(security_db["owner"], queue_name)
    allowed = allowed_calls(security_db["producer"], queue_name, pending, archive_id, skip=set())
    assert allowed == {"create", "create_batch"}
    with Queue(security_db["producer"], queue_name, pool_size=1) as q:
        # It joins the caller's own transaction like any producer.
        with psycopg.connect(security_db["producer"]) as conn:
            q.create("in my transaction", channel="acme", conn=conn)
            conn.rollback()
        assert q.create("from producer", channel="acme", dedup_key="k").status == "created"
        assert q.create("again", channel="acme", dedup_key="k").status == "deduplicated"
        batch = q.create_batch(["batch one", "batch two"], channel="b")
        assert [r.status for r in batch] == ["created"] * 2
    assert cli(security_db["producer"], "send", queue_name, "via cli").returncode == 0
    with psycopg.connect(security_db["owner"], autocommit=True) as owner:
        contents = {
            bytes(r[0])
            for r in owner.execute(
                "SELECT content FROM lonnymq.messages WHERE queue = %s", (queue_name,)
            )
        }
    assert contents == {
        b"secret two",  # the seed's
        b"x",  # allowed_calls' create and create_batch
        b"from producer",
        b"batch one",
        b"batch two",
        b"via cli",
    }


def announced_by(owner_dsn: str, login_dsn: str, queue: str) -> bool:
    """Whether a backend of the login holds the waiting announcement of the queue's slot
    (what wait_begin takes and wait_end gives back)."""
    user = psycopg.conninfo.conninfo_to_dict(login_dsn)["user"]
    return bool(
        scalar(
            owner_dsn,
            "SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
            " AND l.classid = lonnymq._waiting_lock_class()::oid"
            " AND l.objid = lonnymq._wait_slot(%s)::oid AND a.usename = %s",
            (queue, user),
        )
    )


def test_consumer_recipe_runs_a_real_worker(security_db: dict[str, str], queue_name: str) -> None:
    """A Worker as the consumer settles work of every outcome, then idles twice, each time
    asleep and announced as a waiter by its role, and handles what comes next."""
    owner_dsn, consumer = security_db["owner"], security_db["consumer"]
    pending, archive_id = seed(owner_dsn, queue_name)
    # Everything but consuming is denied (the consuming calls are exercised by the worker below).
    consuming = {
        "dequeue",
        "complete",
        "complete_batch",
        "defer",
        "heartbeat",
        "fail",
        "wait_hint_ms",
    }
    assert allowed_calls(consumer, queue_name, pending, archive_id, skip=consuming) == set()

    def handler(message: Message) -> None:
        kind = json.loads(message.content)["kind"]
        if kind == "retry" and message.num_attempts == 1:
            raise Retry(delay_ms=10, state="checkpoint")
        if kind == "broken":
            raise ValueError("always broken")
        if kind == "slow":
            time.sleep(2.0)  # outlives its lock: kept alive by heartbeats

    def remaining() -> int:
        query = "SELECT count(*) FROM lonnymq.messages WHERE queue = %s"
        return int(scalar(owner_dsn, query, (queue_name,)))

    with (
        Queue(owner_dsn, queue_name, pool_size=1) as owner_q,
        Queue(consumer, queue_name, pool_size=6) as q,
    ):
        owner_q.channel_set("work", max_concurrency=2)
        jobs = (
            [{"kind": "ok"}] * 20
            + [{"kind": "retry"}] * 3
            + [{"kind": "broken"}] * 2
            + [{"kind": "slow"}]
        )
        ids = {r.id for r in owner_q.create_batch([json.dumps(j) for j in jobs], channel="work")}
        worker = Worker(
            q,
            handler,
            concurrency=3,
            lock_ms=1500,
            max_attempts=2,
            max_sleep_ms=100,
            backoff=Backoff(base_ms=10),
            handle_signals=False,
        )
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()

        def settled() -> bool:
            return not runner.is_alive() or remaining() == 0

        # Asleep and announced, read in one check: a sleep may end between two separate waits.
        def idle_or_stopped() -> bool:
            if not runner.is_alive():
                return True
            return worker.sleeping.is_set() and announced_by(owner_dsn, consumer, queue_name)

        try:
            wait_for(settled, 30, "the consumer to settle everything")
            assert runner.is_alive(), "the worker stopped"
            for _ in range(2):
                # Nothing to do: it sleeps, announced (wait_begin) by its role, and wakes up.
                wait_for(idle_or_stopped, 30, "the worker to sleep announced")
                assert runner.is_alive(), "the worker stopped"
                ids.add(owner_q.create(json.dumps({"kind": "ok"}), channel="work").id)
                wait_for(settled, 30, "the consumer to handle what came after an idle period")
                assert runner.is_alive(), "the worker stopped"
        finally:
            worker.stop()
            runner.join(15)
        assert not runner.is_alive()
    # The seed's pending message ("acme") is not JSON: deferred once, then failed like "broken".
    # (Deferred and refused are exact too unless a starved heartbeat let a lock expire.)
    assert (worker.counts["completed"], worker.counts["failed"]) == (20 + 3 + 1 + 2, 2 + 1), (
        worker.counts
    )
    assert worker.counts["deferred"] >= 1
    with psycopg.connect(owner_dsn, autocommit=True) as owner:
        left = owner.execute(
            "SELECT count(*) FROM lonnymq.messages WHERE id = ANY(%s)", (list(ids),)
        ).fetchone()
        failed = owner.execute(
            "SELECT count(*) FROM lonnymq.message_archive "
            "WHERE message_id = ANY(%s) AND outcome = 'failed'",
            (list(ids),),
        ).fetchone()
    assert left == (0,) and failed == (2,)
    assert verify(owner_dsn) == []


def test_monitor_recipe(security_db: dict[str, str], queue_name: str) -> None:
    pending, archive_id = seed(security_db["owner"], queue_name)
    before = fingerprint(security_db["owner"])
    allowed = allowed_calls(security_db["monitor"], queue_name, pending, archive_id, skip=set())
    assert allowed == {"message_archive", "wait_hint_ms", "queue_stats", "channel_stats", "verify"}
    with Queue(security_db["monitor"], queue_name, pool_size=1) as q:
        assert q.queue_stats().ready == 1 and q.queue_stats().archived == 1
        assert [(c.channel, c.max_concurrency) for c in q.channel_stats()] == [("acme", 3)]
        assert [a.outcome for a in q.message_archive()] == ["failed"]
        assert q.verify() == []
    status = cli(security_db["monitor"], "status", "--queue", queue_name)
    assert status.returncode == 0 and "acme" in status.stdout, status
    assert fingerprint(security_db["owner"]) == before


def test_monitor_recipe_follows_tail(security_db: dict[str, str], queue_name: str) -> None:
    command = ["tail", "--queue", queue_name, "--count", "1", "--timeout", "30"]
    tail = subprocess.Popen(
        [sys.executable, "-m", "lonnymq", "--dsn", security_db["monitor"], *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert tail.stdout is not None
        # It says so once it listens and has announced itself as a waiter (wait_begin).
        assert tail.stdout.readline().startswith("listening"), tail.communicate(timeout=30)
        assert announced_by(security_db["owner"], security_db["monitor"], queue_name)
        with Queue(security_db["owner"], queue_name, pool_size=1) as owner:
            owner.create("x")
        out, err = tail.communicate(timeout=30)
    finally:
        tail.kill()
        tail.wait()
    assert tail.returncode == 0, err
    assert "created" in out and f"queue={queue_name}" in out, out


def test_monitor_recipe_reads_the_dashboard(security_db: dict[str, str], queue_name: str) -> None:
    seed(security_db["owner"], queue_name)
    before = fingerprint(security_db["owner"])
    with TestClient(create_app(security_db["monitor"]), base_url="http://localhost") as c:
        overview = c.get("/")
        assert overview.status_code == 200 and queue_name in overview.text
        channels = c.get("/channels", params={"queue": queue_name})
        assert channels.status_code == 200 and 'data-channel="acme"' in channels.text
        messages = c.get("/messages", params={"queue": queue_name})
        assert messages.status_code == 200
        archive = c.get("/archive", params={"queue": queue_name})
        assert archive.status_code == 200 and "seeded failure" in archive.text
        for page in ("/verify", "/schedules", "/metrics"):
            assert c.get(page).status_code == 200, page
    assert fingerprint(security_db["owner"]) == before


# -- a hostile search_path --------------------------------------------------------------------

HOSTILE_OBJECTS = """
CREATE SCHEMA hostile;
CREATE FUNCTION hostile.hijacked() RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'hijacked: a hostile look-alike was called'; END $$;
CREATE FUNCTION hostile.text_eq(text, text) RETURNS boolean LANGUAGE sql
  AS $$ SELECT hostile.hijacked() $$;
CREATE OPERATOR hostile.= (FUNCTION = hostile.text_eq, LEFTARG = text, RIGHTARG = text);
CREATE FUNCTION hostile.bigint_eq(bigint, bigint) RETURNS boolean LANGUAGE sql
  AS $$ SELECT hostile.hijacked() $$;
CREATE OPERATOR hostile.= (FUNCTION = hostile.bigint_eq, LEFTARG = bigint, RIGHTARG = bigint);
CREATE FUNCTION hostile.now() RETURNS timestamptz LANGUAGE sql
  AS $$ SELECT NULL::timestamptz WHERE hostile.hijacked() $$;
CREATE FUNCTION hostile.count(anyelement) RETURNS bigint LANGUAGE sql
  AS $$ SELECT 0::bigint WHERE hostile.hijacked() $$;
CREATE VIEW hostile.queue_stats AS SELECT 'decoy'::text AS queue WHERE hostile.hijacked();
"""


@pytest.fixture(scope="module")
def hostile_dsn(security_db: dict[str, str]) -> str:
    """The owner, with a schema of look-alikes first on its search_path (as a connection
    option, so every pooled and LISTEN connection of the client gets it)."""
    with psycopg.connect(security_db["owner"], autocommit=True) as owner:
        owner.execute(HOSTILE_OBJECTS)
    return psycopg.conninfo.make_conninfo(
        security_db["owner"], options="-c search_path=hostile,pg_catalog,public"
    )


def test_hostile_search_path_cannot_change_the_sql_api_from_python(
    hostile_dsn: str, queue_name: str
) -> None:
    """The API functions (pinned search_path) through the client, with look-alikes in force."""
    with Queue(hostile_dsn, queue_name, pool_size=2) as q:
        with q.pool.connection() as conn:
            assert str(scalar(conn, "SHOW search_path")).startswith("hostile")
        q.channel_set("c", max_concurrency=2)
        created = [r.id for r in q.create_batch(["a", "b", "c"], channel="c") if r.id is not None]
        assert len(created) == 3
        [m1, m2] = q.dequeue(lock_ms=60_000, max_messages=5)
        assert (m1.id, m2.id) == tuple(created[:2])
        assert m1.heartbeat(60_000) == "extended" and m1.complete() == "completed"
        assert m2.defer(delay_ms=0) == "deferred" and q.cancel(created[2]) == "cancelled"
        assert q.wait_hint_ms() == 0


def test_hostile_search_path_cannot_change_the_client_queries(
    hostile_dsn: str, queue_name: str
) -> None:
    with Queue(hostile_dsn, queue_name, pool_size=2) as q:
        q.create("a", channel="c")
        assert q.queue_stats().ready == 1
        assert [c.channel for c in q.channel_stats()] == ["c"]
        assert q.message_archive() == []
        assert q.verify() == []


def test_hostile_search_path_cannot_change_the_cli_status(
    hostile_dsn: str, queue_name: str
) -> None:
    """``lonnymq status`` reads through Queue, so the same qualified queries serve it."""
    with Queue(hostile_dsn, queue_name, pool_size=1) as q:
        q.create("a", channel="c")
    result = cli(hostile_dsn, "status")
    assert result.returncode == 0, result.stderr
    assert f"queue {queue_name}: 1 channels, 1 ready" in result.stdout
    assert "decoy" not in result.stdout and "hijacked" not in result.stderr
