"""Fixtures of the Spark suite: one SparkSession for the whole run, one database of its own.

``local[2,3]``: two cores, and a task may fail up to three times, so a task that fails once
is retried as it would be on a cluster. The admin DSN comes from LONNYMQ_TEST_DSN (default:
the local cluster of scripts/cluster); the suite works in its own database,
lonnymq_spark_test, so it can run next to the other suites.
"""

from __future__ import annotations

import getpass
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from lonnymq.spark import _bookkeeping

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

ADMIN_DSN = os.environ.get("LONNYMQ_TEST_DSN", "postgresql://postgres@127.0.0.1:25429/postgres")
DATABASE = os.environ.get("LONNYMQ_SPARK_TEST_DB", "lonnymq_spark_test")
# The bookkeeping schema of the suite's role (the admin DSN's user).
BOOK = _bookkeeping.schema_for(
    str(conninfo.conninfo_to_dict(ADMIN_DSN).get("user") or getpass.getuser())
)


@pytest.fixture(scope="session")
def dsn() -> str:
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    url = conninfo.make_conninfo(ADMIN_DSN, dbname=DATABASE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION lonnymq")
    return url


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Executors must run this interpreter: it is the one with lonnymq installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from lonnymq.spark import register

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("lonnymq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # Small Arrow batches: a partition is written in several chunks, as big ones are.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def queue_name() -> str:
    return "s_" + uuid.uuid4().hex[:10]


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def count_live(db: psycopg.Connection[Any], queue: str) -> int:
    row = db.execute("SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def enqueue(db: psycopg.Connection[Any], queue: str, n: int, channels: int = 3) -> list[int]:
    rows = db.execute(
        "SELECT id FROM lonnymq.message_create_batch(%s,"
        " (SELECT array_agg('tenant_' || (i %% %s) ORDER BY i) FROM generate_series(1, %s) i),"
        " (SELECT array_agg(convert_to('m' || i, 'UTF8') ORDER BY i)"
        "  FROM generate_series(1, %s) i))",
        (queue, channels, n, n),
    ).fetchall()
    return [int(r[0]) for r in rows]
