"""Plans made while the tables look empty still read rows by key.

A backend keeps the plan of each statement a function runs until the table's statistics
change. Planned when the queue was empty (a new connection to an idle queue, or right after a
vacuum emptied it), PostgreSQL read the tables sequentially or joined over whole tables, and
went on doing so as the queue filled: in 1.2 the dequeue's final read scanned the message
table once per call, and a complete_batch hashed all of it. The message functions now plan
with enable_seqscan off and look rows up by key (bench/burst.py measures what it costs).

Every statement the message functions run is captured with auto_explain (nested statements,
JSON) in a session that first runs them on empty tables, and no plan may read a lonnymq
table except through an index condition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from .conftest import ADMIN_DSN, drop_database, recreate_database

# Plan nodes that read a whole table, or a whole index, or build a set over one.
WHOLE = {"Seq Scan", "Hash Join", "Merge Join", "Materialize"}
INDEX_SCANS = {"Index Scan", "Index Only Scan"}


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    name = "lonnymq_rel_plans"
    yield recreate_database(ADMIN_DSN, name)
    drop_database(ADMIN_DSN, name)


def _touches_lonnymq(node: dict[str, Any]) -> bool:
    if node.get("Schema") == "lonnymq":
        return True
    return any(_touches_lonnymq(child) for child in node.get("Plans", []))


def _whole_reads(node: dict[str, Any]) -> list[str]:
    """Nodes of a plan tree that read a lonnymq table other than by an index condition."""
    found = []
    kind = node["Node Type"]
    if kind in WHOLE and _touches_lonnymq(node):
        found.append(f"{kind} over {node.get('Relation Name', 'a lonnymq table')}")
    if kind in INDEX_SCANS and node.get("Schema") == "lonnymq" and "Index Cond" not in node:
        found.append(f"{kind} of all of {node['Index Name']}")
    for child in node.get("Plans", []):
        found += _whole_reads(child)
    return found


def _exercise(conn: psycopg.Connection[Any]) -> None:
    """Every message function, over every kind of channel, first on empty tables."""

    def one(query: str, *params: Any) -> Any:
        return conn.execute(query, params).fetchone()

    one("SELECT count(*) FROM lonnymq.message_dequeue('p', 60000, 10)")
    one("SELECT lonnymq.message_create('p', 'plain', 'x'::bytea)")
    one("SELECT lonnymq.message_create('p', NULL, 'x'::bytea)")
    one("SELECT lonnymq.message_create('p', 'capped', 'x'::bytea)")
    one("SELECT lonnymq.message_create('p', 'limited', 'x'::bytea)")
    one("SELECT lonnymq.message_create('p', 'dying', 'x'::bytea)")
    one("SELECT lonnymq.message_create('p', 'plain', 'x'::bytea, dedup_key => 'k1')")
    one(
        "SELECT count(*) FROM lonnymq.message_create_batch('p', "
        "ARRAY['plain', NULL, 'capped', 'limited', 'other'], "
        "ARRAY['a', 'b', 'c', 'd', 'e']::bytea[])"
    )
    one(
        "SELECT count(*) FROM lonnymq.message_create_batch('p', ARRAY['plain', 'capped'], "
        "ARRAY['a', 'b']::bytea[], dedup_keys => ARRAY['k2', 'k3'])"
    )
    one(
        "SELECT count(*) FROM lonnymq.message_create_batch('p', ARRAY['plain'], "
        "ARRAY['a']::bytea[], idempotency_key => 'batch-1')"
    )
    rows = conn.execute(
        "SELECT id, num_attempts FROM lonnymq.message_dequeue('p', 60000, 6)"
    ).fetchall()
    rows += conn.execute(
        "SELECT id, num_attempts FROM lonnymq.message_dequeue('p', 60000)"
    ).fetchall()
    assert len(rows) >= 5, rows
    (a, na), (b, nb), (c, nc), (d, _), (e, ne) = rows[:5]
    one("SELECT lonnymq.message_heartbeat(%s, %s, 60000)", a, na)
    one("SELECT lonnymq.message_complete(%s, %s)", a, na)
    one("SELECT lonnymq.message_defer(%s, %s, delay_ms => 0)", b, nb)
    one("SELECT lonnymq.message_fail(%s, %s, 'e')", c, nc)
    one("SELECT lonnymq.message_cancel(%s)", d)
    one("SELECT count(*) FROM lonnymq.message_complete_batch(%s, %s)", [e, e], [ne, ne])
    # Expired locks, redelivered or dead-lettered (the "dying" channel allows one attempt).
    one("SELECT count(*) FROM lonnymq.message_dequeue('p', 1, 20)")
    time.sleep(0.02)
    one("SELECT count(*) FROM lonnymq.message_dequeue('p', 60000, 20)")
    rest = conn.execute(
        "SELECT id, num_attempts FROM lonnymq.message_dequeue('p', 60000, 20)"
    ).fetchall()
    if rest:
        one(
            "SELECT count(*) FROM lonnymq.message_complete_batch(%s, %s)",
            [r[0] for r in rest],
            [r[1] for r in rest],
        )


def test_message_functions_planned_on_empty_tables_read_by_key(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("SELECT lonnymq.message_create('p', 'plain', 'x'::bytea)")
        setup.execute("SELECT lonnymq.channel_set('p', 'capped', max_size => 100)")
        setup.execute("SELECT lonnymq.channel_set('p', 'limited', max_concurrency => 5)")
        setup.execute("SELECT lonnymq.channel_set('p', 'dying', max_attempts => 1)")
        setup.execute("TRUNCATE lonnymq.message, lonnymq.channel_hint, lonnymq.message_archive")
        setup.execute("VACUUM ANALYZE lonnymq.message, lonnymq.channel_hint, lonnymq.batch")
        assert setup.execute(
            "SELECT relpages FROM pg_class WHERE oid = 'lonnymq.message'::regclass"
        ).fetchone() == (0,)

    plans: list[dict[str, Any]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(
            lambda diag: (
                plans.append(json.loads(diag.message_primary.split("plan:", 1)[1]))
                if diag.message_primary and "plan:" in diag.message_primary
                else None
            )
        )
        conn.execute("LOAD 'auto_explain'")
        for setting, value in (
            ("log_min_duration", "0"),
            ("log_nested_statements", "on"),
            ("log_format", "json"),
            ("log_verbose", "on"),
            ("log_level", "notice"),
        ):
            conn.execute(f"SET auto_explain.{setting} = {value}")
        _exercise(conn)

    touching = [p for p in plans if _touches_lonnymq(p["Plan"])]
    assert len(touching) > 60, (
        f"only {len(touching)} plans read lonnymq tables: auto_explain missed them"
    )
    bad = {
        p["Query Text"].strip()[:160]: _whole_reads(p["Plan"])
        for p in plans
        if _whole_reads(p["Plan"])
    }
    assert not bad, json.dumps(bad, indent=1)
