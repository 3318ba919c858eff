"""What an open dashboard costs the database (issue 13: "a dashboard left open on a queue
with a million messages must not show up in the database's load").

Loads one queue with MESSAGES live messages over TENANTS channels (most ready, some
scheduled, some locked), then requests each dashboard page and /metrics many times
in-process (Starlette's test client, no network) and reports, per request, the rows and
buffers the database touched (pg_stat_database deltas of the benchmark database, which
nothing else uses) and the latency. For contrast, the same for one read of the exact
``queue_stats`` view, which counts every message. Not a test: it asserts nothing.

    python bench/dashboard_load.py --dsn postgresql://postgres@127.0.0.1:25429/postgres
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import conninfo, sql
from starlette.testclient import TestClient

from lonnymq.web import create_app

DATABASE = "lonnymq_dashload"
STAT = (
    "SELECT tup_returned + tup_fetched AS rows, blks_hit + blks_read AS buffers"
    " FROM pg_catalog.pg_stat_database WHERE datname = current_database()"
)


def load(dsn: str, messages: int, tenants: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lonnymq.notify = off")
        batch = 10_000
        for start in range(0, messages, batch):
            n = min(batch, messages - start)
            conn.execute(
                "SELECT count(*) FROM lonnymq.message_create_batch('load',"
                " ARRAY(SELECT 'tenant-' || ((%s + i) %% %s) FROM generate_series(1, %s) i),"
                " ARRAY(SELECT convert_to(pg_catalog.repeat('x', 100), 'UTF8')"
                "       FROM generate_series(1, %s)),"
                " ARRAY(SELECT CASE WHEN (%s + i) %% 10 = 0 THEN now() + interval '1 day'"
                "       ELSE now() END FROM generate_series(1, %s) i))",
                (start, tenants, n, n, start, n),
            )
        # Some in flight.
        conn.execute("SELECT count(*) FROM lonnymq.message_dequeue('load', 3600000, 5000)")
        conn.execute("VACUUM ANALYZE")


def measure(dsn: str, name: str, request: Callable[[], Any], repeat: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as stat:
        request()  # warm plans and caches
        time.sleep(1.5)  # backends flush their statistics within a second
        before = stat.execute(STAT).fetchone()
        latencies = []
        for _ in range(repeat):
            started = time.perf_counter()
            request()
            latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(1.5)
        after = stat.execute(STAT).fetchone()
    assert before is not None and after is not None
    return {
        "what": name,
        "rows": (after[0] - before[0]) / repeat,
        "buffers": (after[1] - before[1]) / repeat,
        "median_ms": statistics.median(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True, help="a server with lonnymq installed")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="keep an already loaded database")
    args = parser.parse_args()
    dsn = conninfo.make_conninfo(args.dsn, dbname=DATABASE)
    if not args.reuse:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE))
            )
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION lonnymq")
        started = time.monotonic()
        load(dsn, args.messages, args.tenants)
        print(f"loaded {args.messages} messages in {time.monotonic() - started:.0f} s")
    with psycopg.connect(dsn) as conn:
        live = conn.execute("SELECT count(*) FROM lonnymq.message").fetchone()
    print(f"live messages: {live[0] if live else '?'}, tenants: {args.tenants}")

    results = []
    with TestClient(create_app(dsn, metrics_cache_s=0), base_url="http://localhost") as client:
        for path in (
            "/",
            "/channels?queue=load",
            "/messages?queue=load&channel=tenant-7",
            "/messages?queue=load&state=locked",
            "/archive",
            "/metrics",
        ):
            results.append(measure(dsn, path, functools.partial(client.get, path), args.repeat))
    with psycopg.connect(dsn, autocommit=True) as conn:
        results.append(
            measure(
                dsn,
                "SELECT * FROM lonnymq.queue_stats (exact view, for contrast)",
                lambda: conn.execute("SELECT * FROM lonnymq.queue_stats").fetchall(),
                3,
            )
        )
    print(f"{'request':62} {'rows/req':>10} {'buffers/req':>12} {'median ms':>10}")
    for r in results:
        print(f"{r['what']:62} {r['rows']:>10.0f} {r['buffers']:>12.0f} {r['median_ms']:>10.1f}")


if __name__ == "__main__":
    main()
