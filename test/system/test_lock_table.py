"""Bounded resources per call: no call may exhaust PostgreSQL's shared lock table.

The lock table is shared by every database of the server (max_locks_per_transaction x
(max_connections + max_prepared_transactions) entries; about 13,000 on the test cluster).
In 1.0 a batch create over 20,000 distinct channels, or two dequeues of 10,000 over 12,000
channels, took one advisory lock per channel and failed with "out of shared memory" (and so
did an unrelated session elsewhere). Channels are now coordinated through row locks, which
live in the rows, and head locks are keyed by 256 slots (_head_lock_slot), so a transaction
holds at most 256 of them however many channels it writes to or drains.

The wake-up handshake escaped that bound until 2.0: wait_begin kept one session lock per
queue, and a producer one lock per queue it wrote to until commit, so on a server with a small
lock table one waiter over 1,500 queues (``lonnymq tail``, the dashboard) or one statement
creating into 15,000 queues failed with 53200. Queues now share 64 wake-up slots
(_wait_slot): both hold at most 64 advisory locks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from .conftest import (
    ADMIN_DSN,
    OWN_PORT,
    ROOT,
    OwnCluster,
    drop_database,
    recreate_database,
    scalar,
    verify,
)

HEAD_LOCK_SLOTS = 256
WAKE_SLOTS = 64


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
        assert advisory_locks(conn) <= HEAD_LOCK_SLOTS + 2
        conn.commit()
        # A second batch over the same (now existing) channels, in the same way.
        conn.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch('big', %s, "
            "array_fill('y'::bytea, ARRAY[20000]))",
            (channels,),
        )
        assert advisory_locks(conn) <= HEAD_LOCK_SLOTS + 2
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
    assert all(locks <= HEAD_LOCK_SLOTS + 2 for _, locks in results.values()), results
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


def test_a_transaction_over_3000_channels_holds_at_most_the_slots(dsn: str) -> None:
    """Head locks are held until commit, so a transaction of many calls used to add one entry
    per channel it wrote to or drained (3,000 channels: 3,000 entries), however small each
    call's share. Keyed by slot, the whole transaction holds at most the slots."""
    channels = [f"fan-{i}" for i in range(3_000)]
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "SELECT count(*) FROM lonnymq.message_create_batch('fanout', %s,"
            " array_fill('seed'::bytea, ARRAY[3000]))",
            (channels,),
        )
        conn.commit()
        # A message into each (now existing) channel, one call each, in one transaction.
        created = scalar(
            conn,
            "SELECT count(*) FROM unnest(%s::text[]) c, lonnymq.message_create('fanout', c, 'x') m"
            " WHERE m.status = 'created'",
            (channels,),
        )
        assert created == 3_000
        assert advisory_locks(conn) <= HEAD_LOCK_SLOTS + WAKE_SLOTS
        conn.commit()
        # Draining them in one transaction: every channel's head rises as it drains.
        delivered = 0
        for _ in range(6):
            delivered += int(
                scalar(conn, "SELECT count(*) FROM lonnymq.message_dequeue('fanout', 60000, 1000)")
            )
        assert delivered == 6_000
        assert advisory_locks(conn) <= HEAD_LOCK_SLOTS
        conn.commit()
    assert verify(dsn) == []


# -- the wake-up handshake on a server with a small lock table ----------------------------------


@pytest.fixture(scope="module")
def small_lock_table() -> Iterator[str]:
    """A private server whose shared lock table holds a few hundred entries
    (max_locks_per_transaction 10 for about 26 backends); a database with the extension."""
    cluster = OwnCluster(ROOT / ".pgdata-small-lock-table", OWN_PORT + 1)
    cluster.create()
    with open(cluster.pgdata / "postgresql.conf", "a") as conf:
        conf.write(
            "max_connections = 20\nmax_locks_per_transaction = 10\nmax_worker_processes = 2\n"
            "max_wal_senders = 0\nshared_buffers = 32MB\n"
        )
    cluster.start()
    try:
        yield recreate_database(cluster.admin_dsn, "lonnymq_rel_small_lock_table")
    finally:
        cluster.destroy()


def heard_queues(conn: psycopg.Connection[Any], wanted: set[str]) -> set[str]:
    """The queues named by the 'lonnymq' notifications ``conn`` receives, until it has heard
    every queue in ``wanted`` or nothing more arrives for 10 s."""
    heard: set[str] = set()
    while not wanted <= heard:
        before = len(heard)
        for notify in conn.notifies(timeout=10.0, stop_after=1000):
            heard.add(json.loads(notify.payload)["queue"])
        if len(heard) == before:
            break
    return heard


def test_a_waiter_over_2000_queues_and_a_producer_into_15000_fit_a_small_lock_table(
    small_lock_table: str,
) -> None:
    dsn = small_lock_table
    # The server is small enough that one lock per queue does not fit: the 1.12 scheme failed.
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.OutOfMemory):
        conn.execute("SELECT count(pg_advisory_lock(1, i)) FROM generate_series(1, 2000) i")

    queues = [f"q-{i}" for i in range(15_000)]
    waited = queues[:2000]
    with psycopg.connect(dsn, autocommit=True) as waiter:
        waiter.execute("LISTEN lonnymq")
        # A producer into 15,000 queues in one statement, nobody waiting: it holds the producing
        # lock of each slot until commit, one entry per slot. (Channel-less messages: a message
        # into an existing channel also holds its channel's head-lock slot until commit:
        # test_a_transaction_over_3000_channels_holds_at_most_the_slots.)
        with psycopg.connect(dsn) as producer:
            created = scalar(
                producer,
                "SELECT count(*) FROM unnest(%s::text[]) q, lonnymq.message_create(q, NULL, 'x') m"
                " WHERE m.status = 'created'",
                (queues,),
            )
            assert created == 15_000
            assert advisory_locks(producer) == WAKE_SLOTS
            producer.commit()

        # A waiter over 2,000 queues (as tail and the dashboard announce them): one lock per slot.
        waiter.execute("SELECT count(lonnymq.wait_begin(q)) FROM unnest(%s::text[]) q", (waited,))
        assert advisory_locks(waiter) <= WAKE_SLOTS

        # The same 15,000 queues again, in one statement, while it waits: every queue waited on
        # is notified (no wake-up lost), and the producer's lock entries stay bounded.
        with psycopg.connect(dsn) as producer:
            created = scalar(
                producer,
                "SELECT count(*) FROM unnest(%s::text[]) q, lonnymq.message_create(q, NULL, 'y') m"
                " WHERE m.status = 'created'",
                (queues,),
            )
            assert created == 15_000
            assert advisory_locks(producer) <= WAKE_SLOTS
            producer.commit()
        assert set(waited) <= heard_queues(waiter, set(waited))

        waiter.execute("SELECT count(lonnymq.wait_end(q)) FROM unnest(%s::text[]) q", (waited,))
        assert advisory_locks(waiter) == 0
    assert verify(dsn) == []
