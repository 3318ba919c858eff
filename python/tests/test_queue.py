"""Queue: every SQL API call and every status it can return, against the real extension."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from lonnymq import Queue


def live_count(db: psycopg.Connection[Any], queue: Queue) -> int:
    row = db.execute(
        "SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (queue.name,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_create_dequeue_complete(queue: Queue) -> None:
    created = queue.create("hello", channel="tenant-a")
    assert created.status == "created" and created.id is not None
    [message] = queue.dequeue(lock_ms=10_000)
    assert (message.id, message.channel, message.content) == (created.id, "tenant-a", b"hello")
    assert message.num_attempts == 1 and message.recovered is False and message.state is None
    assert message.queue == queue.name and message.text() == "hello"
    assert message.complete() == "completed"
    assert message.complete() == "not_found"
    assert queue.dequeue(lock_ms=10_000) == []


def test_content_encodings(queue: Queue) -> None:
    queue.create(b"\x00\xff")
    queue.create({"n": 1, "tags": ["a"]}, state=[1, 2])
    queue.create(bytearray(b"ba"))
    first, second, third = queue.dequeue(lock_ms=10_000, max_messages=3)
    assert first.content == b"\x00\xff"
    assert second.json() == {"n": 1, "tags": ["a"]} and second.state == b"[1,2]"
    assert third.content == b"ba"
    with pytest.raises(TypeError):
        queue.create(42)  # type: ignore[arg-type]


def test_dedup_key_returns_live_duplicate(queue: Queue) -> None:
    first = queue.create("a", dedup_key="k")
    second = queue.create("b", dedup_key="k")
    assert (first.status, second.status) == ("created", "deduplicated")
    assert second.id == first.id


def test_channel_policy_and_max_size(queue: Queue) -> None:
    channel = queue.channel_set(
        "small",
        max_concurrency=2,
        release_interval_ms=5,
        max_size=1,
        max_attempts=3,
        retain_completed=True,
    )
    assert channel.queue == queue.name and channel.channel == "small"
    assert (
        channel.max_concurrency,
        channel.release_interval_ms,
        channel.max_size,
        channel.max_attempts,
        channel.retain_completed,
    ) == (2, 5, 1, 3, True)
    assert queue.create("1", channel="small").status == "created"
    dropped = queue.create("2", channel="small")
    assert dropped.status == "dropped" and dropped.id is None


def test_delete_channel_statuses(queue: Queue) -> None:
    queue.channel_set("empty", max_concurrency=1)
    queue.channel_set("busy", max_concurrency=1)
    queue.create("x", channel="busy")
    assert queue.channel_delete("empty") == "deleted"
    assert queue.channel_delete("empty") == "not_found"
    assert queue.channel_delete("busy") == "not_empty"


def test_priority_runs_first_and_delay_waits(queue: Queue) -> None:
    a = queue.create("a", channel="c")
    b = queue.create("b", channel="c")
    urgent = queue.create("urgent", channel="c", priority=5)
    later = queue.create("later", channel="c", delay_ms=60_000)
    at = queue.create("at", channel="c", dequeue_at=datetime.now(UTC) + timedelta(hours=1))
    got = [m.id for m in queue.dequeue(lock_ms=10_000, max_messages=10)]
    assert got == [urgent.id, a.id, b.id]
    assert later.id not in got and at.id not in got


def test_wait_hint_ms(queue: Queue) -> None:
    assert queue.wait_hint_ms() is None
    queue.create("later", delay_ms=30_000)
    hint = queue.wait_hint_ms()
    assert hint is not None and 20_000 < hint <= 30_000
    queue.create("now")
    assert queue.wait_hint_ms() == 0


def test_create_batch_and_idempotency(queue: Queue, db: psycopg.Connection[Any]) -> None:
    results = queue.create_batch(
        ["a", "b", {"c": 3}],
        channels=["x", "y", None],
        dedup_keys=[None, "kb", None],
        idempotency_key="batch-1",
    )
    assert [r.status for r in results] == ["created"] * 3
    ids = [r.id for r in results if r.id is not None]
    assert len(ids) == 3 and ids == sorted(ids)
    # A retry writes to the same channels: the same batch, nothing created.
    again = queue.create_batch(
        ["a", "b", "c"], channels=["x", "y", None], idempotency_key="batch-1"
    )
    assert [r.status for r in again] == ["duplicate_batch"] * 3
    assert [r.id for r in again] == ids
    assert live_count(db, queue) == 3
    dedup = queue.create_batch(["b2"], channel="y", dedup_keys=["kb"])
    assert dedup[0].status == "deduplicated" and dedup[0].id == ids[1]
    got = queue.dequeue(lock_ms=10_000, max_messages=3)
    assert sorted(m.id for m in got) == ids
    with pytest.raises(ValueError):
        queue.create_batch(["a"], channels=["x", "y"])


def test_complete_batch(queue: Queue) -> None:
    queue.create_batch(["a", "b"])
    first, second = queue.dequeue(lock_ms=10_000, max_messages=2)
    assert first.complete() == "completed"
    results = queue.complete_batch([first, second])
    assert {r.id: r.status for r in results} == {first.id: "not_found", second.id: "completed"}


def test_defer_keeps_attempts_and_state(queue: Queue) -> None:
    queue.create("job", state="s0")
    [m1] = queue.dequeue(lock_ms=10_000)
    assert m1.defer(state={"step": 1}) == "deferred"
    [m2] = queue.dequeue(lock_ms=10_000)
    assert (m2.id, m2.num_attempts, m2.content) == (m1.id, 2, b"job")
    assert m2.state == b'{"step":1}'
    assert m2.defer(delay_ms=60_000) == "deferred"  # state None keeps the saved state
    assert queue.dequeue(lock_ms=10_000) == []
    assert m2.defer() == "state_invalid"  # no longer locked by this delivery
    assert queue.defer(m1.id + 10_000_000, 1) == "not_found"


def test_defer_to_a_time(queue: Queue) -> None:
    queue.create("job")
    [m] = queue.dequeue(lock_ms=10_000)
    assert m.defer(dequeue_at=datetime.now(UTC) + timedelta(minutes=5)) == "deferred"
    hint = queue.wait_hint_ms()
    assert hint is not None and 240_000 < hint <= 300_000


def test_heartbeat_extends_only_the_current_attempt(
    queue: Queue, db: psycopg.Connection[Any]
) -> None:
    queue.create("job")
    [m] = queue.dequeue(lock_ms=1_000)
    before = db.execute(
        "SELECT locked_until FROM lonnymq.messages WHERE id = %s", (m.id,)
    ).fetchone()
    assert m.heartbeat(60_000) == "extended"
    after = db.execute(
        "SELECT locked_until FROM lonnymq.messages WHERE id = %s", (m.id,)
    ).fetchone()
    assert before is not None and after is not None and after[0] > before[0]
    assert queue.heartbeat(m.id, m.num_attempts + 1, 60_000) == "state_invalid"
    assert queue.heartbeat(m.id + 10_000_000, 1, 60_000) == "not_found"


def test_expired_lock_is_redelivered_and_fenced(queue: Queue) -> None:
    queue.create("job")
    [stale] = queue.dequeue(lock_ms=50)
    # Waiting out a 50 ms lock on the database clock: deterministic, not a race.
    time.sleep(0.3)
    [fresh] = queue.dequeue(lock_ms=10_000)
    assert fresh.id == stale.id and fresh.num_attempts == 2 and fresh.recovered is True
    assert stale.complete() == "state_invalid"
    assert stale.fail("late") == "state_invalid"
    assert stale.heartbeat(1000) == "state_invalid"
    assert fresh.complete() == "completed"


def test_fail_archives_and_requeue(queue: Queue) -> None:
    queue.create({"job": 1}, channel="c")
    [m] = queue.dequeue(lock_ms=10_000)
    assert m.fail("boom") == "failed"
    assert m.fail("again") == "not_found"
    [archived] = queue.message_archive(outcome="failed")
    assert (archived.message_id, archived.outcome, archived.error) == (m.id, "failed", "boom")
    assert archived.json() == {"job": 1} and archived.channel == "c"
    requeued = queue.archive_requeue(archived.id)
    assert requeued.status == "created" and requeued.id is not None
    [again] = queue.dequeue(lock_ms=10_000)
    assert again.id == requeued.id and again.json() == {"job": 1}


def test_max_attempts_dead_letters(queue: Queue) -> None:
    queue.channel_set("strict", max_attempts=1)
    queue.create("poison", channel="strict")
    [m] = queue.dequeue(lock_ms=10_000)
    assert m.defer() == "deferred"
    assert queue.dequeue(lock_ms=10_000) == []
    [dead] = queue.message_archive(outcome="dead")
    assert dead.message_id == m.id and dead.num_attempts == 1


def test_retain_completed(queue: Queue) -> None:
    queue.channel_set("kept", retain_completed=True)
    queue.create("done", channel="kept")
    [m] = queue.dequeue(lock_ms=10_000)
    assert m.complete() == "completed"
    [archived] = queue.message_archive()
    assert archived.outcome == "completed" and archived.content == b"done"


def test_cancel_statuses(queue: Queue) -> None:
    pending = queue.create("p")
    locked = queue.create("l", priority=1)
    assert queue.dequeue(lock_ms=10_000)[0].id == locked.id
    assert pending.id is not None and locked.id is not None
    assert queue.cancel(locked.id) == "locked"
    assert queue.cancel(pending.id) == "cancelled"
    assert queue.cancel(pending.id) == "not_found"


def test_stats(queue: Queue) -> None:
    assert queue.queue_stats().ready == 0
    queue.channel_set("limited", max_concurrency=3)
    queue.create_batch(["a", "b"], channel="limited")
    queue.create("free")
    queue.create("later", channel="limited", delay_ms=60_000)
    queue.dequeue(lock_ms=10_000)
    stats = queue.queue_stats()
    assert (stats.ready, stats.scheduled, stats.locked) == (2, 1, 1)
    by_channel = {c.channel: c for c in queue.channel_stats()}
    assert by_channel["limited"].max_concurrency == 3
    assert sum(c.ready for c in by_channel.values()) == 2
    assert sum(c.locked for c in by_channel.values()) == 1


def test_prune_archive_and_verify(queue: Queue) -> None:
    queue.create("x")
    [m] = queue.dequeue(lock_ms=10_000)
    m.fail()
    assert queue.archive_prune(timedelta(days=1)) == 0
    assert queue.archive_prune(timedelta(0)) >= 1
    assert queue.message_archive() == []
    assert queue.verify() == []


def test_pause_resume_bulk_requeue_and_filtered_prune(queue: Queue) -> None:
    other = Queue(queue.pool, queue.name + "_other")
    queue.create("a", channel="t")
    assert queue.channel_pause("t") == "paused"
    assert queue.dequeue(lock_ms=10_000) == []
    assert queue.channel_resume("t") == "resumed"
    assert queue.queue_pause() == "paused"
    assert queue.dequeue(lock_ms=10_000) == []
    assert queue.queue_resume() == "resumed"
    assert queue.channel_pause("none") == "not_found"
    for q in (queue, other):
        q.create("x")
        for m in q.dequeue(lock_ms=10_000, max_messages=10):
            m.fail("boom")
    result = queue.archive_requeue(outcome="failed")
    assert (result.requeued, result.dropped) == (2, 0)
    for m in queue.dequeue(lock_ms=10_000, max_messages=10):
        m.fail()
    # Of this queue only: the other queue's archive stays.
    assert queue.archive_prune(timedelta(0), all_queues=False, outcome="dead") == 0
    assert queue.archive_prune(timedelta(0), all_queues=False) == 2
    assert len(other.message_archive()) == 1
    with pytest.raises(TypeError):
        queue.archive_requeue(1, outcome=None)  # type: ignore[call-overload]


def test_invalid_arguments_raise_22023(queue: Queue) -> None:
    with pytest.raises(psycopg.Error) as info:
        queue.dequeue(lock_ms=-1)
    assert info.value.sqlstate == "22023"


def test_schedule_needs_pg_cron(queue: Queue) -> None:
    # The test database has no pg_cron: the extension must say so clearly.
    with pytest.raises(psycopg.Error, match="pg_cron"):
        queue.schedule_set("nightly", "0 3 * * *", "run")


def test_queue_on_a_callers_pool(dsn: str, queue_name: str) -> None:
    from psycopg_pool import ConnectionPool

    from lonnymq import Worker

    with ConnectionPool(dsn, min_size=1, max_size=4, open=True) as pool:
        queue = Queue(pool, queue_name)
        queue.create("via pool")
        done: list[bytes] = []
        Worker(queue, lambda m: done.append(m.content)).run(until_idle=True)
        assert done == [b"via pool"]
        queue.close()  # the caller owns the pool: it stays open
        assert not pool.closed


# Queue methods that call a message_* SQL function drop the prefix (the names the Python
# API has always had); every other method is named exactly like its SQL function or view.
# One name per concept: 2.0 removed the 1.0 aliases (set_channel, stats, ...), and this
# test fails if a method not named after SQL comes back.
MESSAGE_VERBS = {
    "create",
    "create_batch",
    "dequeue",
    "complete",
    "complete_batch",
    "defer",
    "heartbeat",
    "fail",
    "cancel",
}
# waiting() is a context manager around wait_begin: the announcement lasts while it runs.
NOT_SQL = {"close", "conninfo", "waiting"}


def test_method_names_mirror_the_sql(db: psycopg.Connection[Any]) -> None:
    sql_names = {
        str(r[0])
        for r in db.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'lonnymq'::regnamespace "
            "UNION SELECT relname FROM pg_class WHERE relnamespace = 'lonnymq'::regnamespace "
            "AND relkind IN ('v', 'r')"
        ).fetchall()
    }
    methods = {m for m in dir(Queue) if not m.startswith("_")} - NOT_SQL
    for method in methods:
        sql_name = f"message_{method}" if method in MESSAGE_VERBS else method
        assert sql_name in sql_names, f"Queue.{method} is not named after an SQL call"
