"""``conn=``: queue calls join the caller's transaction, commit and rollback included."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from lonnymq import Queue


@pytest.fixture
def business(db: psycopg.Connection[Any]) -> str:
    db.execute("CREATE TABLE IF NOT EXISTS pytest_orders (id int PRIMARY KEY)")
    db.execute("TRUNCATE pytest_orders")
    return "pytest_orders"


def test_create_is_visible_only_after_commit(dsn: str, queue: Queue) -> None:
    with psycopg.connect(dsn) as conn:
        queue.create("inside", conn=conn)
        assert queue.dequeue(lock_ms=10_000) == []  # another session cannot see it yet
        conn.rollback()
        queue.create("kept", conn=conn)
        conn.commit()
    [m] = queue.dequeue(lock_ms=10_000)
    assert m.content == b"kept"


def test_complete_with_business_write_commits_together(
    dsn: str, queue: Queue, db: psycopg.Connection[Any], business: str
) -> None:
    queue.create({"order": 7})
    with psycopg.connect(dsn) as conn, conn.transaction():
        [m] = queue.dequeue(lock_ms=10_000, conn=conn)
        conn.execute("INSERT INTO pytest_orders VALUES (%s)", (m.json()["order"],))
        assert m.complete(conn=conn) == "completed"
    assert db.execute("SELECT id FROM pytest_orders").fetchall() == [(7,)]
    assert queue.queue_stats().ready == 0 and queue.queue_stats().locked == 0


def test_rollback_undoes_dequeue_and_complete(
    dsn: str, queue: Queue, db: psycopg.Connection[Any], business: str
) -> None:
    created = queue.create("job")
    with psycopg.connect(dsn) as conn:
        [m] = queue.dequeue(lock_ms=10_000, conn=conn)
        conn.execute("INSERT INTO pytest_orders VALUES (1)")
        assert m.complete(conn=conn) == "completed"
        conn.rollback()
    assert db.execute("SELECT count(*) FROM pytest_orders").fetchone() == (0,)
    # The dequeue was rolled back too: the message is ready again, attempt 1 again.
    [again] = queue.dequeue(lock_ms=10_000)
    assert (again.id, again.num_attempts) == (created.id, 1)


def test_every_action_accepts_conn(dsn: str, queue: Queue) -> None:
    with psycopg.connect(dsn) as conn, conn.transaction():
        queue.channel_set("c", max_concurrency=5, conn=conn)
        queue.create_batch(["a", "b", "c", "d"], channel="c", conn=conn)
        a, b, c, d = queue.dequeue(lock_ms=10_000, max_messages=4, conn=conn)
        assert a.heartbeat(20_000, conn=conn) == "extended"
        assert a.complete(conn=conn) == "completed"
        assert b.defer(delay_ms=60_000, conn=conn) == "deferred"
        assert c.fail("x", conn=conn) == "failed"
        assert [r.status for r in queue.complete_batch([d], conn=conn)] == ["completed"]
        assert queue.wait_hint_ms(conn=conn) is not None
        assert queue.queue_stats(conn=conn).scheduled == 1
        assert len(queue.channel_stats(conn=conn)) == 1
        [archived] = queue.message_archive(conn=conn)
        assert queue.archive_requeue(archived.id, conn=conn).status == "created"
        assert queue.verify(conn=conn) == []
        assert b.id is not None and queue.cancel(b.id, conn=conn) == "cancelled"


def notified(listener: psycopg.Connection[Any], queue: Queue) -> list[str]:
    """The 'lonnymq' events for ``queue`` the listener has received so far (no waiting)."""
    listener.execute("SELECT 1")  # any round trip delivers what arrived
    return [n.payload for n in listener.notifies(timeout=0.2) if queue.name in n.payload]


def test_producers_notify_only_while_a_consumer_waits(dsn: str, queue: Queue) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN lonnymq")
        queue.create("nobody waits")
        assert notified(listener, queue) == []
        with queue.waiting() as hint:
            assert hint == 0  # the message above is ready
            queue.create("someone waits")
            assert notified(listener, queue) == [
                f'{{"queue" : "{queue.name}", "event" : "created"}}'
            ]
        queue.create("nobody waits again")
        assert notified(listener, queue) == []


def test_waiting_sees_a_message_whose_producer_skipped_the_notify(dsn: str, queue: Queue) -> None:
    """No lost wake-up: a producer that decided not to notify (nobody waited yet) and is still
    open when a consumer starts waiting. Committed quickly, the consumer's hint sees the message
    (0); still open after wait_begin's patience, the hint is short (<= 100 ms), so the consumer
    looks again soon and finds it, although no NOTIFY will ever come."""
    with psycopg.connect(dsn) as producer:
        queue.create("in flight", conn=producer)
        with queue.waiting() as hint:
            assert hint is not None and 0 < hint <= 100
        producer.commit()
    with queue.waiting() as hint:
        assert hint == 0
    assert [m.content for m in queue.dequeue(lock_ms=10_000)] == [b"in flight"]
