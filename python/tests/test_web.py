"""The dashboard through Starlette's test client against the real database: every page,
the filters, each action and its safety rules (read-only by default, same-origin, basic
auth, the monitoring role), live events and /metrics."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql
from starlette.testclient import TestClient

from lonnymq import Message, Queue, Worker
from lonnymq.web import create_app

from .helpers import block_announcements, monitor_grants, wait_for

# The dashboard answers to the loopback names only unless told otherwise (DNS rebinding).
BASE = "http://localhost:8080"
ORIGIN = {"origin": BASE}


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def client(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, actions=True), base_url=BASE, follow_redirects=False) as c:
        yield c


def create(db: psycopg.Connection[Any], queue: str, channel: str | None, content: bytes) -> int:
    row = db.execute(
        "SELECT id FROM lonnymq.message_create(%s, %s, %s)", (queue, channel, content)
    ).fetchone()
    assert row is not None
    return int(row[0])


def paused(db: psycopg.Connection[Any], queue: str, channel: str) -> bool:
    row = db.execute(
        "SELECT paused FROM lonnymq.channel_stats WHERE queue = %s AND channel = %s",
        (queue, channel),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def served_channels(db: psycopg.Connection[Any], queue: str) -> list[str]:
    rows = db.execute(
        "SELECT channel FROM lonnymq.message_dequeue(%s, 60000, 100)", (queue,)
    ).fetchall()
    return sorted(r[0] for r in rows)


def test_overview_lists_queues_with_bounded_counts(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    for i in range(5):
        create(db, queue_name, f"tenant{i % 2}", b"x")
    with TestClient(create_app(dsn, count_limit=3), base_url=BASE) as c:
        page = c.get("/")
    assert page.status_code == 200
    row = re.search(rf'<tr class="" data-queue="{queue_name}">(.*?)</tr>', page.text, re.S)
    assert row is not None, page.text
    # 5 ready, counted up to the limit of 3 only, and shown as "3+".
    assert re.search(r'class="num ready">3\+</td>', row.group(1))
    assert "read-only" in page.text


def test_verify_page_reports_health(client: TestClient) -> None:
    page = client.get("/verify")
    assert page.status_code == 200
    assert 'id="healthy"' in page.text


def test_channels_saturated_first_and_pause_stops_serving(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    db.execute("SELECT lonnymq.channel_set(%s, 'busy', max_concurrency => 1)", (queue_name,))
    for channel in ("aaa", "busy", "busy", "zzz"):
        create(db, queue_name, channel, b"x")
    # Saturate 'busy': one delivery while it has max_concurrency 1 and one more waiting.
    db.execute("SELECT * FROM lonnymq.message_dequeue(%s, 60000, 3)", (queue_name,))
    page = client.get("/channels", params={"queue": queue_name})
    assert page.status_code == 200
    order = re.findall(r'data-channel="([^"]+)"', page.text)
    assert order[0] == "busy"
    assert set(order) == {"aaa", "busy", "zzz"}

    create(db, queue_name, "aaa", b"again")
    create(db, queue_name, "zzz", b"again")
    done = client.post(
        "/actions/channel-pause",
        data={"queue": queue_name, "channel": "aaa", "next": f"/channels?queue={queue_name}"},
        headers=ORIGIN,
    )
    assert done.status_code == 303
    assert done.headers["location"].startswith(f"/channels?queue={queue_name}&notice=")
    assert paused(db, queue_name, "aaa")
    assert served_channels(db, queue_name) == ["zzz"]
    page = client.get(done.headers["location"])
    assert "channel aaa: paused" in page.text
    assert re.search(r'<tr class="paused\s*" data-channel="aaa">', page.text)

    client.post(
        "/actions/channel-resume", data={"queue": queue_name, "channel": "aaa"}, headers=ORIGIN
    )
    assert served_channels(db, queue_name) == ["aaa"]


def test_policy_edit_and_invalid_input(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "t", b"x")
    form = {"queue": queue_name, "channel": "t", "max_concurrency": "2", "release_interval_ms": "5"}
    assert client.post("/actions/channel-policy", data=form, headers=ORIGIN).status_code == 303
    row = db.execute(
        "SELECT max_concurrency, release_interval_ms FROM lonnymq.channel_stats"
        " WHERE queue = %s AND channel = 't'",
        (queue_name,),
    ).fetchone()
    assert row == (2, 5)
    bad = client.post(
        "/actions/channel-policy", data={**form, "max_concurrency": "0"}, headers=ORIGIN
    )
    assert "refused" in bad.headers["location"]
    assert "max_concurrency" in client.get(bad.headers["location"]).text
    row = db.execute(
        "SELECT max_concurrency FROM lonnymq.channel_stats WHERE queue = %s AND channel = 't'",
        (queue_name,),
    ).fetchone()
    assert row == (2,)


def test_queue_pause_and_resume(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, None, b"x")
    client.post("/actions/queue-pause", data={"queue": queue_name}, headers=ORIGIN)
    assert served_channels(db, queue_name) == []
    assert 'class="tag warn">paused' in client.get("/").text
    client.post("/actions/queue-resume", data={"queue": queue_name}, headers=ORIGIN)
    assert len(served_channels(db, queue_name)) == 1


def test_actions_refused_cross_origin_or_read_only(
    dsn: str, client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "t", b"x")
    form = {"queue": queue_name, "channel": "t"}
    assert client.post("/actions/channel-pause", data=form).status_code == 403
    evil = {"origin": "http://evil.example"}
    assert client.post("/actions/channel-pause", data=form, headers=evil).status_code == 403
    referer = {"referer": "http://evil.example/"}
    assert client.post("/actions/channel-pause", data=form, headers=referer).status_code == 403
    assert not paused(db, queue_name, "t")
    with TestClient(create_app(dsn), base_url=BASE, follow_redirects=False) as read_only:
        page = read_only.get("/channels", params={"queue": queue_name})
        assert "/actions/channel-pause" not in page.text
        refused = read_only.post("/actions/channel-pause", data=form, headers=ORIGIN)
        assert refused.status_code == 403
    assert not paused(db, queue_name, "t")
    # An action may only send the browser back into the dashboard.
    away = client.post(
        "/actions/channel-resume", data={**form, "next": "//evil.example/"}, headers=ORIGIN
    )
    assert away.headers["location"].startswith("/?notice=")


def test_basic_auth(dsn: str) -> None:
    with TestClient(create_app(dsn, auth=("ops", "s3cret")), base_url=BASE) as c:
        assert c.get("/").status_code == 401
        assert c.get("/metrics").status_code == 401
        wrong = base64.b64encode(b"ops:nope").decode()
        assert c.get("/", headers={"authorization": f"Basic {wrong}"}).status_code == 401
        right = base64.b64encode(b"ops:s3cret").decode()
        assert c.get("/", headers={"authorization": f"Basic {right}"}).status_code == 200


def test_messages_filters_detail_and_cancel(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    payload = json.dumps({"order": 7}).encode()
    first = create(db, queue_name, "t", payload)
    second = create(db, queue_name, "t", b"\x00\xffbinary")
    db.execute(
        "SELECT * FROM lonnymq.message_create(%s, 't', 'later', delay_ms => 3600000,"
        " dedup_key => 'k1')",
        (queue_name,),
    )
    page = client.get("/messages", params={"queue": queue_name, "channel": "t", "state": "ready"})
    assert re.findall(r'<tr data-id="(\d+)">', page.text) == [str(first), str(second)]
    scheduled = client.get(
        "/messages", params={"queue": queue_name, "channel": "t", "state": "scheduled"}
    )
    assert len(re.findall(r'<tr data-id="(\d+)">', scheduled.text)) == 1
    by_key = client.get("/messages", params={"queue": queue_name, "dedup_key": "k1"})
    assert by_key.status_code == 303
    by_id = client.get("/messages", params={"id": str(first)})
    assert by_id.headers["location"].endswith(f"/messages/{first}")

    detail = client.get(f"/messages/{first}")
    assert "order" not in detail.text  # content hidden until asked for
    assert "&#34;order&#34;: 7" in client.get(f"/messages/{first}?show=json").text
    assert "00 ff 62 69" in client.get(f"/messages/{second}?show=hex").text

    done = client.post("/actions/message-cancel", data={"id": str(first)}, headers=ORIGIN)
    assert "cancelled" in done.headers["location"]
    assert client.get(f"/messages/{first}").status_code == 404


def test_archive_filter_requeue_and_prune(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    for i in range(3):
        create(db, queue_name, "t", f"m{i}".encode())
    db.execute(
        "SELECT lonnymq.message_fail(id, num_attempts, 'boom ' || id)"
        " FROM lonnymq.message_dequeue(%s, 60000, 10)",
        (queue_name,),
    )
    page = client.get("/archive", params={"queue": queue_name, "outcome": "failed"})
    archived = re.findall(r'<tr data-id="(\d+)" data-message-id="(\d+)">', page.text)
    assert len(archived) == 3
    assert "boom" in page.text
    assert (
        client.get("/archive", params={"queue": queue_name, "outcome": "dead"}).text.count(
            "<tr data-id"
        )
        == 0
    )

    archive_id = archived[0][0]
    done = client.post("/actions/archive-requeue", data={"id": archive_id}, headers=ORIGIN)
    assert "requeued+as+message" in done.headers["location"]
    live = db.execute(
        "SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (queue_name,)
    ).fetchone()
    assert live == (1,)

    everything = client.post(
        "/actions/archive-requeue-all",
        data={"queue": queue_name, "outcome": "failed"},
        headers=ORIGIN,
    )
    assert "requeued+2" in everything.headers["location"]
    live = db.execute(
        "SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (queue_name,)
    ).fetchone()
    assert live == (3,)

    db.execute(
        "SELECT lonnymq.message_fail(id, num_attempts) FROM lonnymq.message_dequeue(%s, 60000, 10)",
        (queue_name,),
    )
    kept = client.post(
        "/actions/archive-prune",
        data={"queue": queue_name, "older_than_days": "1"},
        headers=ORIGIN,
    )
    assert "pruned+0" in kept.headers["location"]
    gone = client.post(
        "/actions/archive-prune",
        data={"queue": queue_name, "older_than_days": "0"},
        headers=ORIGIN,
    )
    assert "pruned+3" in gone.headers["location"]


def test_metrics(dsn: str, db: psycopg.Connection[Any], queue_name: str) -> None:
    create(db, queue_name, "tenant-a", b"x")
    create(db, queue_name, "tenant-b", b"x")
    with TestClient(create_app(dsn, metrics_cache_s=0), base_url=BASE) as c:
        text = c.get("/metrics").text
    assert f'lonnymq_queue_messages{{queue="{queue_name}",state="ready"}} 2.0' in text
    assert f'lonnymq_queue_channels{{queue="{queue_name}"}} 2.0' in text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert names and all(n.startswith("lonnymq_") for n in names if n)
    assert "tenant-a" not in text  # no per-channel series unless asked for
    with TestClient(create_app(dsn, metrics_cache_s=0, metrics_channels=True), base_url=BASE) as c:
        text = c.get("/metrics").text
    assert f'lonnymq_channel_ready{{channel="tenant-a",queue="{queue_name}"}} 1.0' in text


def test_schedules_lists_the_workers_periodic_messages(
    dsn: str, db: psycopg.Connection[Any], queue: Queue, start_worker: Any
) -> None:
    runs: list[str] = []

    def flaky(message: Message) -> None:
        runs.append("flaky")
        raise RuntimeError("disk full")

    worker = Worker(queue, lambda m: None)
    worker.every(200, "tick", lambda m: runs.append("tick"))
    worker.every(3_600_000, "flaky", flaky)
    start_worker(worker)
    create(db, queue.name, "tenant-a", b"x")  # a tenant's channel is not a schedule
    wait_for(lambda: runs.count("tick") >= 2 and "flaky" in runs, what="periodic runs")
    with TestClient(create_app(dsn), base_url=BASE) as c:
        page = c.get("/schedules").text

    def row(name: str) -> str:
        found = re.search(rf'data-periodic="{queue.name}/{name}">(.*?)</tr>', page, re.S)
        assert found is not None, page
        return found.group(1)

    tick, hourly = row("tick"), row("flaky")
    assert 'class="num every">0.2s<' in tick  # the interval the worker recorded
    assert re.search(r'class="num runs">[1-9]\d*<', tick)
    assert "ok" in tick
    assert 'class="num every">1.0h<' in hourly
    assert "RuntimeError: disk full" in hourly  # how its last run ended
    assert f'data-periodic="{queue.name}/tenant-a"' not in page


def out_of_attempts(db: psycopg.Connection[Any], queue: str) -> None:
    """A message whose next dequeue dead-letters it: delivered once, deferred, max 1."""
    db.execute("SELECT lonnymq.channel_set(%s, 'c', max_attempts => 1)", (queue,))
    create(db, queue, "c", b"x")
    db.execute(
        "SELECT lonnymq.message_defer(id, num_attempts) FROM lonnymq.message_dequeue(%s, 60000)",
        (queue,),
    )


def dead_letters(client: TestClient, queue: str) -> float | None:
    found = re.search(
        rf'^lonnymq_dead_letters_total{{queue="{queue}"}} (\S+)$', client.get("/metrics").text, re.M
    )
    return None if found is None else float(found.group(1))


def test_dead_letter_counter_counts_out_of_order_commits(dsn: str, queue_name: str) -> None:
    first, second = queue_name + "_a", queue_name + "_b"
    with (
        psycopg.connect(dsn, autocommit=True) as db,
        psycopg.connect(dsn) as slow,
        TestClient(create_app(dsn, metrics_cache_s=0), base_url=BASE) as c,
    ):
        out_of_attempts(db, first)
        out_of_attempts(db, second)
        assert dead_letters(c, first) == 0  # counting starts with the app
        # The first dead letter draws the lower archive id but commits last.
        assert not slow.execute(
            "SELECT * FROM lonnymq.message_dequeue(%s, 60000)", (first,)
        ).fetchall()
        assert not db.execute(
            "SELECT * FROM lonnymq.message_dequeue(%s, 60000)", (second,)
        ).fetchall()
        assert (dead_letters(c, first), dead_letters(c, second)) == (0, 1)
        slow.commit()
        assert (dead_letters(c, first), dead_letters(c, second)) == (1, 1)
        # Counted once: later reads do not count them again.
        out_of_attempts(db, second)
        db.execute("SELECT * FROM lonnymq.message_dequeue(%s, 60000)", (second,))
        assert (dead_letters(c, first), dead_letters(c, second)) == (1, 2)
        # Failures are not dead letters.
        create(db, second, "c", b"y")
        db.execute(
            "SELECT lonnymq.message_fail(id, num_attempts) FROM lonnymq.message_dequeue(%s, 60000)",
            (second,),
        )
        assert dead_letters(c, second) == 2


def spark_totals(page: str, queue: str) -> tuple[int, int] | None:
    row = re.search(rf'data-queue="{queue}">(.*?)</tr>', page, re.S)
    assert row is not None, page
    found = re.search(r'data-completed="(\d+)"\s+data-failed="(\d+)"', row.group(1))
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def test_overview_throughput_per_queue_from_worker_reports(
    dsn: str, db: psycopg.Connection[Any], queue: Queue
) -> None:
    def handle(message: Message) -> None:
        if message.content == b"bad":
            raise RuntimeError("no")

    for i in range(30):
        create(db, queue.name, f"tenant-{i % 3}", b"bad" if i % 10 == 0 else b"ok")
    create(db, queue.name + "_idle", "t", b"x")
    with TestClient(create_app(dsn), base_url=BASE) as c:
        # The overview lists the queue (reports on others are ignored) and starts listening.
        c.get("/")
        wait_for(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN lonnymq_stats'"
                ).fetchone()
                == (1,)
            ),
            what="the overview listening for reports",
        )
        Worker(queue, handle, concurrency=4, max_attempts=1, stats_interval_ms=100).run(
            until_idle=True
        )
        # Every completion and failure counted once, per queue (completions leave no row).
        wait_for(
            lambda: spark_totals(c.get("/").text, queue.name) == (27, 3),
            what="27 completed and 3 failed on the overview",
        )
        # A queue no worker reported on has no chart.
        assert spark_totals(c.get("/").text, queue.name + "_idle") is None


def first_event(lines: Iterator[str], db: psycopg.Connection[Any], queue: str) -> dict[str, Any]:
    """Creates messages in ``queue`` until the event stream tells of one (the LISTEN starts
    with the first subscriber, and producers notify only once it is announced)."""
    deadline = time.monotonic() + 40
    while True:
        assert time.monotonic() < deadline, "no live event"
        # Any role may NOTIFY: JSON nested too deep to parse must not end the LISTEN.
        db.execute("SELECT pg_notify('lonnymq', %s)", ("[" * 3000 + "]" * 3000,))
        create(db, queue, "t", b"x")
        for line in lines:
            if line.startswith("data: "):
                data: dict[str, Any] = json.loads(line[6:])
                if data.get("queue") == queue:
                    return data
            if line.startswith(": keep-alive"):
                break


def test_live_events_arrive(dsn: str, db: psycopg.Connection[Any], queue_name: str) -> None:
    # Producers NOTIFY only while a consumer waits (wait_begin): no worker sleeps here, so
    # the events come because the open live page announces itself as one.
    create(db, queue_name, "t", b"first")
    with (
        TestClient(create_app(dsn), base_url=BASE) as c,
        c.stream("GET", "/events") as events,
    ):
        assert events.headers["content-type"].startswith("text/event-stream")
        lines = events.iter_lines()
        assert next(lines).startswith("retry:")
        heard = first_event(lines, db, queue_name)
    assert heard["event"] == "created"
    assert heard["listen"] == "lonnymq"


def test_live_page_announces_again_until_it_takes(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    # A wait_begin that did not get its lock did not announce the page: it tries again (it
    # used to count the queue as announced for good, and missed its events).
    create(db, queue_name, "t", b"first")
    blocker = block_announcements(dsn, queue_name)
    with (
        TestClient(create_app(dsn), base_url=BASE) as c,
        c.stream("GET", "/events") as events,
    ):
        lines = events.iter_lines()
        assert next(lines).startswith("retry:")
        wait_for(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s",
                    ("%lonnymq.wait_begin(q)%",),
                ).fetchone()
                != (0,)
            ),
            what="the page's first announcement",
        )
        blocker.close()
        assert first_event(lines, db, queue_name)["event"] == "created"


def test_role_applies_to_every_connection(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    # The DSN's user may only become the role (NOINHERIT), which has the monitor's grants.
    # The LISTEN, waiting and throughput connections used to run as the DSN's user.
    suffix = uuid.uuid4().hex[:8]
    login_name, role_name = "web_login_" + suffix, "web_role_" + suffix
    login, role = sql.Identifier(login_name), sql.Identifier(role_name)
    db.execute(
        sql.SQL("CREATE ROLE {l} LOGIN NOINHERIT; CREATE ROLE {r}; GRANT {r} TO {l};").format(
            l=login, r=role
        )
    )
    db.execute(monitor_grants(role_name).encode())
    try:
        create(db, queue_name, "t", b"first")
        app = create_app(conninfo.make_conninfo(dsn, user=login_name), role=role_name)
        dashboard = app.state.lonnymq
        users: list[str] = []
        connect = dashboard.db.connect

        async def recording() -> psycopg.AsyncConnection[Any]:
            conn: psycopg.AsyncConnection[Any] = await connect()
            cur = await conn.execute("SELECT current_user")
            row = await cur.fetchone()
            assert row is not None
            users.append(str(row[0]))
            return conn

        dashboard.db.connect = recording
        with TestClient(app, base_url=BASE) as c:
            assert queue_name in c.get("/").text  # the overview starts its throughput LISTEN
            with c.stream("GET", "/events") as events:  # the LISTEN and waiter connections
                lines = events.iter_lines()
                assert next(lines).startswith("retry:")
                # Events come only if the waiter may call wait_begin: as the role.
                assert first_event(lines, db, queue_name)["event"] == "created"
            wait_for(lambda: len(users) >= 3, what="three connections of the app's own")
        assert set(users) == {role_name}
    finally:
        db.execute(
            sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}; DROP ROLE {l}").format(r=role, l=login)
        )


def test_read_only_role_uses_the_monitor_grants(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    role = "monitor_" + uuid.uuid4().hex[:8]
    db.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        create(db, queue_name, "t", b"x")
        # Without the grants the monitoring role reads nothing.
        with TestClient(create_app(dsn, role=role), base_url=BASE) as c:
            refused = c.get("/")
            assert refused.status_code == 403 and "permission denied" in refused.text
        db.execute(monitor_grants(role).encode())
        with TestClient(create_app(dsn, role=role), base_url=BASE) as c:
            assert queue_name in c.get("/").text
            assert 'data-channel="t"' in c.get("/channels", params={"queue": queue_name}).text
            assert c.get("/verify").status_code == 200
            assert c.get("/schedules").status_code == 200
            assert "lonnymq_queue_messages" in c.get("/metrics").text
    finally:
        db.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role)))


REBOUND = "rebind.attacker.example:8080"


def test_only_the_hosts_it_serves_answer(
    dsn: str, client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    # DNS rebinding: a page of the attacker's name, resolved to this address, sends its own
    # name as Host and a matching Origin. Refused before any handler runs.
    message = create(db, queue_name, "t", b"secret payload")
    rebound = {"host": REBOUND, "origin": f"http://{REBOUND}"}
    refused = client.post("/actions/queue-pause", data={"queue": queue_name}, headers=rebound)
    assert refused.status_code == 400
    refused = client.post("/actions/archive-prune", data={"older_than_days": "0"}, headers=rebound)
    assert refused.status_code == 400
    assert served_channels(db, queue_name) == ["t"]  # not paused
    read = client.get(f"/messages/{message}?show=text", headers={"host": REBOUND})
    assert read.status_code == 400 and "secret" not in read.text
    # The origin check of actions still stands behind the host check.
    evil = {"origin": "http://evil.example"}
    assert (
        client.post("/actions/queue-pause", data={"queue": queue_name}, headers=evil).status_code
        == 403
    )
    # Loopback names answer on any port; others only when allowed, with their port if given.
    with TestClient(
        create_app(dsn, allowed_hosts=["ops.example", "127.0.0.1:9000"]), base_url=BASE
    ) as c:
        assert c.get("/", headers={"host": "ops.example:443"}).status_code == 200
        assert c.get("/", headers={"host": "127.0.0.1:9000"}).status_code == 200
        assert c.get("/", headers={"host": "127.0.0.1:9001"}).status_code == 400
        assert c.get("/", headers={"host": "localhost:8080"}).status_code == 400
        assert c.get("/", headers={"host": "ops.example.evil:443"}).status_code == 400


def test_cli_allows_the_bound_address_and_loopback_with_the_port() -> None:
    from lonnymq.cli.web import allowed_hosts

    assert allowed_hosts("0.0.0.0", 8081, ["ops.example"]) == [
        "0.0.0.0:8081",
        "localhost:8081",
        "127.0.0.1:8081",
        "[::1]:8081",
        "ops.example",
    ]
    assert allowed_hosts("::1", 80, [])[0] == "[::1]:80"


def test_a_host_without_port_is_the_schemes_default_port(dsn: str) -> None:
    from lonnymq.cli.web import allowed_hosts

    # `lonnymq web --port 80 --allowed-host ops.example:443`: browsers send Host without
    # the default port of the scheme they used.
    hosts = allowed_hosts("127.0.0.1", 80, ["ops.example:443"])
    with TestClient(create_app(dsn, allowed_hosts=hosts), base_url="http://localhost") as c:
        assert c.get("/", headers={"host": "localhost"}).status_code == 200
        assert c.get("/", headers={"host": "[::1]"}).status_code == 200
        assert c.get("/", headers={"host": "ops.example"}).status_code == 400  # http is 80
    with TestClient(create_app(dsn, allowed_hosts=hosts), base_url="https://ops.example") as c:
        assert c.get("/", headers={"host": "ops.example"}).status_code == 200
        assert c.get("/", headers={"host": "localhost"}).status_code == 400  # https is 443


def test_pages_link_relatively_and_forbid_framing_and_caching(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    message = create(db, queue_name, "t", b"x")
    for path in ("/", f"/channels?queue={queue_name}", f"/messages/{message}", "/archive"):
        page = client.get(path)
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["cache-control"] == "no-store"
        links = re.findall(r'(?:href|src|action|data-events|hx-get)="([^"]*)"', page.text)
        assert links and all(link.startswith(("/", "?")) for link in links), links
    by_id = client.get("/messages", params={"id": str(message)})
    assert by_id.headers["location"] == f"/messages/{message}"


def refused_notice(response: Any) -> str:
    assert response.status_code == 303, response.text
    location = str(response.headers["location"])
    assert "refused" in location, location
    return location


def test_bad_input_is_refused_never_500(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "t", b"x")
    deep = b"[" * 30_000 + b"]" * 30_000  # valid JSON, too deep to parse
    nested = create(db, queue_name, "t", deep)
    with TestClient(
        create_app(dsn, actions=True),
        base_url=BASE,
        follow_redirects=False,
        raise_server_exceptions=False,
    ) as c:
        policy = {"queue": queue_name, "channel": "t"}
        for form in (
            {"max_concurrency": "99999999999"},
            {"max_attempts": "-99999999999"},
            {"max_size": "9" * 30},
            {"release_interval_ms": "1e3"},
        ):
            refused_notice(
                c.post("/actions/channel-policy", data={**policy, **form}, headers=ORIGIN)
            )
        for days in ("1e10", "inf", "-inf", "nan", "9" * 400):
            refused_notice(
                c.post("/actions/archive-prune", data={"older_than_days": days}, headers=ORIGIN)
            )
        for id_ in ("99999999999999999999", "-99999999999999999999", "1" * 5000):
            refused_notice(c.post("/actions/message-cancel", data={"id": id_}, headers=ORIGIN))
            refused_notice(c.post("/actions/archive-requeue", data={"id": id_}, headers=ORIGIN))
        long = "q" * 257
        for path, params in (
            ("/archive", {"after": "garbage"}),
            ("/archive", {"before": "2026-13-01"}),
            ("/channels", {"queue": long}),
            ("/messages", {"queue": long}),
            ("/messages", {"queue": queue_name, "channel": long}),
        ):
            page = c.get(path, params=params)
            assert page.status_code == 400, (path, params, page.status_code)
        assert c.get("/messages/99999999999999999999").status_code == 404
        assert c.get("/archive/" + "1" * 5000).status_code == 404
        shown = c.get(f"/messages/{nested}?show=json")
        assert shown.status_code == 200 and "not valid JSON" in shown.text
        # A refusal from SQL shows its primary message only, not PL/pgSQL's CONTEXT lines.
        location = refused_notice(
            c.post(
                "/actions/channel-policy", data={**policy, "max_concurrency": "0"}, headers=ORIGIN
            )
        )
        notice = c.get(location).text
        assert "max_concurrency" in notice
        assert "CONTEXT" not in location and "PL/pgSQL" not in notice
    row = db.execute(
        "SELECT max_concurrency FROM lonnymq.channel_stats WHERE queue = %s AND channel = 't'",
        (queue_name,),
    ).fetchone()
    assert row == (None,)  # nothing refused changed anything


def test_content_is_cut_and_not_read_while_hidden(
    dsn: str, client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    big = json.dumps({"rows": ["x" * 100] * 55_000}).encode()  # 5.6 MB of JSON
    message = create(db, queue_name, "t", big)
    for show in ("json", "text", "hex"):
        page = client.get(f"/messages/{message}?show={show}")
        assert page.status_code == 200
        assert "cut at 64 KiB" in page.text
        assert len(page.text) < 300_000, (show, len(page.text))
    small = create(db, queue_name, "t", json.dumps([[1]] * 20_000).encode())  # 100 KB pretty
    page = client.get(f"/messages/{small}?show=json")
    assert "cut at 64 KiB" in page.text and len(page.text) < 100_000
    # A failure's error text is free too: the archive shows its start only.
    failing = queue_name + "_err"
    create(db, failing, "t", b"x")
    db.execute(
        "SELECT lonnymq.message_fail(id, num_attempts, repeat('e', 6000000))"
        " FROM lonnymq.message_dequeue(%s, 60000)",
        (failing,),
    )
    assert len(client.get("/archive", params={"queue": failing}).text) < 100_000
    [failed] = db.execute(
        "SELECT id FROM lonnymq.message_archive WHERE queue = %s", (failing,)
    ).fetchall()
    page = client.get(f"/archive/{failed[0]}")
    assert "cut at 65536 of 6000000 characters" in page.text and len(page.text) < 100_000
    # Hidden, content and state are not read at all: a role that may not read them can
    # still open the detail pages.
    db.execute(
        "SELECT lonnymq.message_fail(id, num_attempts) FROM lonnymq.message_dequeue(%s, 60000)",
        (queue_name,),
    )
    archived = db.execute(
        "SELECT id FROM lonnymq.message_archive WHERE queue = %s", (queue_name,)
    ).fetchone()
    assert archived is not None
    role = "nocontent_" + uuid.uuid4().hex[:8]
    db.execute(
        sql.SQL(
            "CREATE ROLE {r}; GRANT USAGE ON SCHEMA lonnymq TO {r};"
            " GRANT SELECT (id, queue, channel, num_attempts, dequeue_at, locked_until,"
            " created_at, priority, dedup_key) ON lonnymq.messages TO {r};"
            " GRANT SELECT (id, message_id, queue, channel, num_attempts, outcome, error,"
            " created_at, archived_at) ON lonnymq.message_archive TO {r}"
        ).format(r=sql.Identifier(role))
    )
    try:
        with TestClient(create_app(dsn, role=role), base_url=BASE) as c:
            live = c.get(f"/messages/{small}")
            assert live.status_code == 200 and "hidden" in live.text
            gone = c.get(f"/archive/{archived[0]}")
            assert gone.status_code == 200 and "hidden" in gone.text
    finally:
        db.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role)))


def test_forged_worker_reports_cannot_break_the_overview(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "t", b"x")
    with TestClient(create_app(dsn), base_url=BASE) as c:
        c.get("/")  # the overview starts listening, to the queues it listed
        wait_for(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN lonnymq_stats'"
                ).fetchone()
                == (1,)
            ),
            what="the overview listening for reports",
        )
        # 20,000 made-up queues in one statement, then a real queue's count of 400 digits.
        db.execute(
            "SELECT pg_notify('lonnymq_stats', json_build_object('queue', 'made-up-' || i,"
            " 'worker', 'w' || i, 'since', 1e12, 'completed', 1, 'failed', 0)::text)"
            " FROM generate_series(1, 20000) i"
        )
        forged = (
            json.dumps(
                {"queue": queue_name, "worker": "w", "since": time.time() + 60, "failed": 0}
            )[:-1]
            + ', "completed": '
            + "9" * 400
            + "}"
        )
        db.execute("SELECT pg_notify('lonnymq_stats', %s)", (forged,))
        wait_for(
            lambda: spark_totals(c.get("/").text, queue_name) is not None,
            what="the forged report heard",
        )
        dashboard = c.app.state.lonnymq  # type: ignore[attr-defined]
        # Made-up queues are not tracked at all.
        tracked = set(dashboard.throughput._buckets) | set(dashboard.throughput._workers)
        assert not any(q.startswith("made-up-") for q in tracked)


def test_schedules_tolerate_any_state_and_made_up_entries(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    from lonnymq import _periodic

    real = "zz" + queue_name  # sorts after the made-up queue
    fake = "aa" + queue_name
    # What a Worker's every(3600000, "nightly") leaves: one message keyed by its channel.
    channel = _periodic.channel_for("nightly")
    db.execute(
        "SELECT lonnymq.message_create(%s, %s, 'x', dedup_key => %s, state => %s)",
        (real, channel, _periodic.dedup_key_for("nightly"), _periodic.run_state(3_600_000, None)),
    )
    # A producer's forgeries: a state a Worker never writes, on every kind of record...
    for i, state in enumerate(
        (
            b'{"interval_ms": "soon"}',
            b'{"interval_ms": true, "ran_at": 5, "error": [1]}',
            b'{"ran_at": "not a time"}',
            b"[" * 3000 + b"]" * 3000,
            b"\xff",
            # Valid ISO times with a zone that fall outside datetime's range in UTC.
            b'{"interval_ms": 1000, "ran_at": "9999-12-31T23:59:59-14:00"}',
            b'{"interval_ms": 1000, "ran_at": "0001-01-01T00:00:00+14:00"}',
        )
    ):
        name = _periodic.channel_for(f"odd-{i}")
        db.execute(
            "SELECT lonnymq.message_create(%s, %s, 'x', dedup_key => %s, state => %s)",
            (fake, name, name, state),
        )
    # ... and more made-up entries than the page shows, all sorting before the real one.
    db.execute(
        "SELECT lonnymq.message_create_batch(%s, array_agg('lonnymq.every:x-' || i),"
        " array_agg('x'::bytea)) FROM generate_series(1, 600) i",
        (fake,),
    )
    with TestClient(create_app(dsn), base_url=BASE) as c:
        page = c.get("/schedules")
    assert page.status_code == 200
    assert f'data-periodic="{real}/nightly"' in page.text
    assert f'data-periodic="{fake}/odd-0"' in page.text
    assert len(re.findall(r"data-periodic=", page.text)) == 500
    shown = re.search(r"500 of (\d+) shown", page.text)
    assert shown is not None and int(shown.group(1)) >= 606  # other tests' entries too


def test_role_with_own_pool_is_refused(dsn: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    # SET ROLE would reach only the app's own connections, not the caller's pool.
    pool = AsyncConnectionPool(dsn, open=False)
    with pytest.raises(ValueError, match="role="):
        create_app(pool, role="lonnymq_monitor")
    create_app(pool)  # without role= the pool is accepted


def test_a_message_due_past_year_9999_shows_and_cancels(
    client: TestClient, db: psycopg.Connection[Any], queue_name: str
) -> None:
    row = db.execute(
        "SELECT id FROM lonnymq.message_create(%s, 't', 'x', dequeue_at => '20000-01-01 UTC')",
        (queue_name,),
    ).fetchone()
    assert row is not None
    page = client.get(f"/messages/{row[0]}")
    assert page.status_code == 200 and "20000-01-01" in page.text
    listed = client.get("/messages", params={"queue": queue_name, "channel": "t"})
    assert listed.status_code == 200 and "20000-01-01" in listed.text
    done = client.post("/actions/message-cancel", data={"id": str(row[0])}, headers=ORIGIN)
    assert done.status_code == 303
    assert db.execute("SELECT 1 FROM lonnymq.messages WHERE id = %s", row).fetchone() is None


def test_content_without_column_grant_is_forbidden(
    dsn: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    role = "nocontent_" + uuid.uuid4().hex[:8]
    db.execute(
        sql.SQL(
            "CREATE ROLE {r}; GRANT USAGE ON SCHEMA lonnymq TO {r};"
            " GRANT EXECUTE ON FUNCTION lonnymq.queue_summary TO {r};"
            " GRANT SELECT (id, queue, channel, num_attempts, dequeue_at, locked_until,"
            " created_at, priority, dedup_key) ON lonnymq.messages TO {r}"
        ).format(r=sql.Identifier(role))
    )
    try:
        message = create(db, queue_name, "t", b"secret")
        with TestClient(create_app(dsn, role=role), base_url=BASE) as c:
            assert c.get(f"/messages/{message}").status_code == 200
            shown = c.get(f"/messages/{message}?show=text")
            assert shown.status_code == 403 and "secret" not in shown.text
            assert "permission denied" in shown.text
    finally:
        db.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role)))
