"""Fault 5: a poison message kills the worker process that handles it, every time.

Its channel has ``max_attempts`` 3 and ``max_concurrency`` 2: while the poison's expired
lock is outstanding it holds one slot (by design: a channel limited to 1 is blocked until
the poison is given up, 3 lock periods), and the other slot must keep serving the channel.
Worker processes (one ``Worker``, one ``AsyncWorker``) that die are restarted by the test,
like a supervisor would. The poison must kill exactly three processes and then be
dead-lettered (``dead`` in the archive after 3 attempts), and the rest of its channel (and
another channel) must keep flowing meanwhile: every other message completed exactly once, some
of them before the poison was given up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import psycopg

from lonnymq import Queue

from .conftest import WorkerProcess, archive_outcomes, live_ids, verify

LOCK_MS = 800


def test_poison_message_is_dead_lettered_and_its_channel_flows(
    shared_db: str, queue_name: str, workers: Callable[..., WorkerProcess]
) -> None:
    with Queue(shared_db, queue_name, pool_size=2) as queue:
        queue.channel_set("tenant", max_concurrency=2, max_attempts=3, retain_completed=True)
        queue.channel_set("other", retain_completed=True)
        before = queue.create_batch([json.dumps({"sleep_ms": 20})] * 5, channel="tenant")
        poison = queue.create(json.dumps({"crash": True}), channel="tenant").id
        assert poison is not None
        after = queue.create_batch([json.dumps({"sleep_ms": 40})] * 60, channel="tenant")
        other = queue.create_batch([json.dumps({"sleep_ms": 40})] * 40, channel="other")
        assert all(r.status == "created" for r in before + after + other)
        created = {r.id for r in before + after + other if r.id is not None} | {poison}

    procs = [workers(shared_db, queue_name, 1, LOCK_MS, mode) for mode in ("sync", "async")]
    deaths: list[int | None] = []
    deadline = time.monotonic() + 60
    while (
        len(archive_outcomes(shared_db, queue_name)) < len(created) and time.monotonic() < deadline
    ):
        for p in procs:
            if not p.alive():
                assert p.process is not None
                deaths.append(p.process.returncode)
                p.start()
        time.sleep(0.05)
    exit_codes = [p.terminate() for p in procs]

    outcomes = archive_outcomes(shared_db, queue_name)
    assert set(outcomes) == created and all(len(o) == 1 for o in outcomes.values())
    assert outcomes[poison] == [("dead", 3)]
    assert all(outcomes[m][0][0] == "completed" for m in created - {poison})
    assert deaths == [3, 3, 3], "the poison should have killed exactly three processes"
    assert exit_codes == [0, 0]
    with psycopg.connect(shared_db, autocommit=True) as conn:
        error, dead_at = conn.execute(
            "SELECT error, archived_at FROM lonnymq.message_archive WHERE message_id = %s",
            (poison,),
        ).fetchone() or (None, None)
        flowed = conn.execute(
            "SELECT count(*) FROM lonnymq.message_archive "
            "WHERE message_id = ANY(%s) AND archived_at < %s",
            ([r.id for r in after], dead_at),
        ).fetchone()
    assert error is not None and "attempt 3 of 3" in error
    # Its channel kept flowing while the poison was still being retried.
    assert flowed is not None and flowed[0] > 0
    assert not live_ids(shared_db, queue_name)
    assert verify(shared_db) == []
