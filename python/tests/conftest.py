"""Fixtures: a throwaway database with the extension, and a fresh queue name per test.

The admin DSN comes from LONNYMQ_TEST_DSN (default: the local cluster of scripts/cluster).
The client never creates the extension, so the session fixture does it explicitly.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from lonnymq import AsyncQueue, Queue, Worker

ADMIN_DSN = os.environ.get("LONNYMQ_TEST_DSN", "postgresql://postgres@127.0.0.1:25429/postgres")
TEST_DATABASE = "lonnymq_pytest"


def dsn_for(database: str) -> str:
    return conninfo.make_conninfo(ADMIN_DSN, dbname=database)


def recreate_database(name: str) -> str:
    """Drop and create an empty database; returns its DSN."""
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return dsn_for(name)


@pytest.fixture(scope="session")
def dsn() -> str:
    url = recreate_database(TEST_DATABASE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION lonnymq")
    return url


@pytest.fixture
def queue_name() -> str:
    return "t_" + uuid.uuid4().hex[:12]


@pytest.fixture
def queue(dsn: str, queue_name: str) -> Iterator[Queue]:
    with Queue(dsn, queue_name, pool_size=12) as q:
        yield q


@pytest.fixture
async def aqueue(dsn: str, queue_name: str) -> AsyncIterator[AsyncQueue]:
    async with AsyncQueue(dsn, queue_name, pool_size=12) as q:
        yield q


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection for looking at the tables behind the client's back."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def start_worker() -> Iterator[Any]:
    """Runs workers in threads and makes sure they are stopped when the test ends."""
    running: list[tuple[Worker, threading.Thread]] = []

    def start(worker: Worker) -> threading.Thread:
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        running.append((worker, thread))
        return thread

    yield start
    for worker, _thread in running:
        worker.stop()
    for _worker, thread in running:
        thread.join(timeout=15)
        assert not thread.is_alive(), "worker did not stop"
