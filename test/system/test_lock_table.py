"""Bounded resources per call: no call may exhaust PostgreSQL's shared lock table.

The lock table is shared by every database of the server (max_locks_per_transaction x
(max_connections + max_prepared_transactions) entries; about 13,000 on the test cluster).
In 1.0 a batch create over 20,000 distinct channels, or two dequeues of 10,000 over 12,000
channels, took one advisory lock per channel and failed with "out of shared memory" (and so
did an unrelated session elsewhere). Channels are now coordinated through row locks, which
live in the rows, and the head locks a call may hold are bounded (_head_lock_budget, 256).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from .conftest import ADMIN_DSN, drop_database, recreate_database, scalar, verify

HEAD_LOCK_BUDGET = 256


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    name = "lonnymq_rel_lock_table"
    yield recreate_database(ADMIN_DSN, name)
    drop_database(ADMIN_DSN, name)


def advisory_locks(conn: psycopg.Connection[Any]) -> int:
    return int(
        scalar(
            conn,
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'",
        )
    )


def test_a_batch_over_20000_channels_holds_a_bounded_number_of_locks(dsn: str) -> None:
    channels = [f"tenant-{i}" for i in range(20_000)]
    with psycopg.connect(dsn) as conn:
        statuses = conn.execute(
            "SELECT status FROM lonnymq.message_create_batch('big', %s, "
            "array_fill('x'::bytea, ARRAY[20000]))",
            (channels,),
        ).fetchall()
        assert statuses == [("created",)] * 20_000
        assert advisory_locks(conn) <= HEAD_LOCK_BUDGET + 2
        conn.commit()
        # A second batch over the same (now existing) channels, in the same way.
        conn.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch('big', %s, "
            "array_fill('y'::bytea, ARRAY[20000]))",
            (channels,),
        )
        assert advisory_locks(conn) <= HEAD_LOCK_BUDGET + 2
        conn.commit()
    assert verify(dsn) == []


def test_two_dequeues_of_10000_over_12000_channels(dsn: str) -> None:
    """Every channel holds one message, so every delivery drains its channel and raises its
    head: the case that took a head lock per channel."""
    channels = [f"c{i}" for i in range(12_000)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch('wide', %s, "
            "array_fill('x'::bytea, ARRAY[12000]))",
            (channels,),
        )
    results: dict[int, tuple[list[int], int]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def dequeue(slot: int) -> None:
        try:
            with psycopg.connect(dsn) as conn:
                barrier.wait()
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT id FROM lonnymq.message_dequeue('wide', 600000, 10000)"
                    ).fetchall()
                ]
                results[slot] = (ids, advisory_locks(conn))
                conn.commit()
        except BaseException as e:  # any failure: reported below
            errors.append(e)

    threads = [threading.Thread(target=dequeue, args=(slot,)) for slot in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    delivered = results[0][0] + results[1][0]
    assert len(delivered) == len(set(delivered))  # each message once
    assert all(locks <= HEAD_LOCK_BUDGET + 2 for _, locks in results.values()), results
    assert verify(dsn) == []
    # Channels whose new work neither call had folded in yet (each folds in as many as it
    # can serve) are served by the next call: nothing is left behind.
    with psycopg.connect(dsn, autocommit=True) as conn:
        rest = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM lonnymq.message_dequeue('wide', 600000, 10000)"
            ).fetchall()
        ]
    assert len(delivered) >= 10_000
    assert (
        sorted(delivered + rest) == sorted(set(delivered + rest))
        and len(delivered + rest) == 12_000
    )
