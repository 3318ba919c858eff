"""Bad input: random sequences of SQL API calls with random and hostile arguments.

Hypothesis drives sequences of calls (create, batch create, dequeue, complete, batch complete,
defer, heartbeat, fail, cancel, requeue, prune, channel_set, channel_delete, channel_sweep,
wait_hint_ms) with NULLs, negatives, boundary and huge values, empty and multi-megabyte
content, odd names (unicode, quotes, SQL, 256 and 257 characters) and timestamps at
+-infinity, mixed with valid references to real deliveries. Properties:

- every call returns a documented status (or rows), or raises SQLSTATE 22023 with a message
  that starts ``lonnymq:`` - any other error fails;
- a delivery is never handed out before its dequeue_at, and a message this test settled or
  cancelled never comes back (not delivered again, every later action is ``not_found``);
- after every call ``verify()`` is empty and the inspection views can be read in full.

Fixed hostile cases, each a call with its exact answer, are in test/sql/07_hostile.sql (the
far-future dequeue time and the huge archive_prune ages that were tested here too).

Values are passed with the SQL types of the parameters (a bigint where the API takes a
bigint): an out-of-range cast fails in the caller's own statement, before lonnymq runs.
"""

from __future__ import annotations

import atexit
import os
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

INT4 = (-(2**31), 2**31 - 1)
INT8 = (-(2**63), 2**63 - 1)

# Timestamps at the edges: the infinities, the first and last finite timestamps, and both
# sides of the year-100000 limit on dequeue times.
HOSTILE_TIMES = [
    "infinity",
    "-infinity",
    "4713-01-01 00:00:00+00 BC",
    "1970-01-01 00:00:00+00",
    "2000-01-01 00:00:00+00",
    "99999-12-31 23:59:59+00",
    "100000-01-01 00:00:01+00",
    "250000-01-01 00:00:00+00",
    "294276-12-31 23:59:59+00",
]

ODD_NAMES = [
    "",
    " ",
    "x" * 256,
    "x" * 257,
    "é" * 256,
    "名前",
    "🦀🦀",
    "'",
    "''",
    '"',
    "\\",
    "a'b\"c\\d",
    "'); DROP TABLE lonnymq.message; --",
    "lonnymq.every:x",
    "%s",
    "{}",
    "NULL",
    "\t\n",
    "ﷺ" * 3,
    "\u202etxet",
    "c1",
]


def names(nullable: bool = True) -> st.SearchStrategy[str | None]:
    text = st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        max_size=300,
    )
    options: list[st.SearchStrategy[str | None]] = [
        st.sampled_from(ODD_NAMES),
        text,
        st.sampled_from(["c1", "c2", "c3"]),
    ]
    if nullable:
        options.append(st.none())
    return st.one_of(*options)


def ints(bounds: tuple[int, int], nullable: bool = True) -> st.SearchStrategy[int | None]:
    low, high = bounds
    edges = st.sampled_from([low, low + 1, -1, 0, 1, 2, 3, 100, high - 1, high])
    options: list[st.SearchStrategy[int | None]] = [
        edges,
        st.integers(low, high),
        st.integers(0, 2000),
    ]
    if nullable:
        options.append(st.none())
    return st.one_of(*options)


contents = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=64),
    st.builds(
        lambda n, b: b * n, st.sampled_from([2**20, 3 * 2**20]), st.sampled_from([b"\x00", b"\xff"])
    ),
)
times = st.one_of(st.none(), st.sampled_from(HOSTILE_TIMES))
states = st.one_of(st.none(), st.just(b""), st.binary(max_size=16))


def pick(
    data: st.DataObject,
    rng: random.Random,
    valid: st.SearchStrategy[Any],
    hostile: st.SearchStrategy[Any],
) -> Any:
    """Nine times in ten a valid value, else a hostile one: a call has several arguments,
    and sequences need calls that succeed (real deliveries to settle, stale or not). The
    choice comes from a seeded Random (hypothesis' own choices lean towards the edges)."""
    return data.draw(valid if rng.random() < 0.9 else hostile)


CHANNELS = st.sampled_from(["c1", "c2", "c3", None, "名前", "x" * 256, "a'b\"c\\d"])
VALID_TIMES = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "1970-01-01 00:00:00+00",
            "2000-01-01 00:00:00+00",
            "4713-01-01 00:00:00+00 BC",
            "99999-01-01 00:00:00+00",
        ]
    ),
)
small_contents = st.one_of(st.just(b""), st.binary(max_size=64))

STATUSES = {
    "create": {"created", "deduplicated", "dropped"},
    "create_batch": {"created", "deduplicated", "dropped", "duplicate_batch"},
    "complete": {"completed", "not_found", "state_invalid"},
    "defer": {"deferred", "not_found", "state_invalid"},
    "heartbeat": {"extended", "not_found", "state_invalid"},
    "fail": {"failed", "not_found", "state_invalid"},
    "cancel": {"cancelled", "locked", "not_found"},
    "requeue": {"created", "dropped", "not_found"},
    "channel_delete": {"deleted", "not_found", "not_empty"},
}


@dataclass
class Model:
    """What the test knows: deliveries it holds and messages it has settled."""

    queues: list[str | None]
    rng: random.Random
    deliveries: list[tuple[int, int]] = field(default_factory=list)
    ids: set[int] = field(default_factory=set)
    archive_ids: set[int] = field(default_factory=set)
    gone: set[int] = field(default_factory=set)  # settled or cancelled by this test


# (op, outcome) tallies; LONNYMQ_HYPOTHESIS_STATS=1 prints them, to see what a run covered.
SEEN: Counter[tuple[str, str]] = Counter()
if os.environ.get("LONNYMQ_HYPOTHESIS_STATS"):
    atexit.register(lambda: print("\n".join(f"{k}: {v}" for k, v in sorted(SEEN.items()))))


def call(
    conn: psycopg.Connection[Any], name: str, query: str, params: tuple[Any, ...]
) -> list[Any] | None:
    """Runs one API call: its rows, or None if it raised the documented 22023 error."""
    try:
        rows = conn.execute(query, params).fetchall()
        SEEN[
            name, str(rows[0][0]) if rows and isinstance(rows[0][0], str) else f"{len(rows)} rows"
        ] += 1
        return rows
    except psycopg.Error as exc:
        SEEN[name, "22023 " + (exc.diag.message_primary or "")[:60]] += 1
        sqlstate = exc.diag.sqlstate
        message = exc.diag.message_primary or ""
        assert sqlstate == "22023", f"{name}{params!r:.300}: SQLSTATE {sqlstate}: {exc}"
        assert message.startswith("lonnymq: ") and len(message) > len("lonnymq: ") + 5, message
        return None


def reference(data: st.DataObject, model: Model) -> tuple[int | None, int | None]:
    """A delivery to act on: a real one, a real one with a wrong attempt, or garbage."""
    # The same draws whatever the database answered so far.
    real, index = (
        pick(data, model.rng, st.just(True), st.just(False)),
        data.draw(st.integers(0, 10**6)),
    )
    skew = data.draw(st.sampled_from([0, 0, 0, 0, 1, -1]))
    garbage = data.draw(ints(INT8)), data.draw(ints(INT8))
    if real and model.deliveries:
        mid, attempts = model.deliveries[index % len(model.deliveries)]
        return mid, attempts + skew
    return garbage


def step(conn: psycopg.Connection[Any], data: st.DataObject, model: Model) -> None:
    params: tuple[Any, ...]  # each call has its own arguments
    op = data.draw(
        st.sampled_from(
            [
                "create",
                "create",
                "create",
                "create_batch",
                "dequeue",
                "dequeue",
                "complete",
                "complete",
                "complete_batch",
                "defer",
                "heartbeat",
                "fail",
                "cancel",
                "requeue",
                "prune",
                "channel_set",
                "channel_delete",
                "sweep",
                "wait_hint",
            ]
        )
    )
    queue = pick(data, model.rng, st.just(model.queues[0]), st.sampled_from(model.queues[1:]))
    if op == "create":
        params = (
            queue,
            pick(data, model.rng, CHANNELS, names()),
            pick(data, model.rng, small_contents, contents),
            pick(data, model.rng, VALID_TIMES, times),
            pick(data, model.rng, st.sampled_from([0, 0, 0, 1, 20]), ints(INT8)),
            pick(data, model.rng, st.sampled_from([0, 0, 0, 0, 1, 5]), ints(INT4)),
            pick(data, model.rng, st.sampled_from([None, None, "k1", "k2"]), names(False)),
            data.draw(states),
        )
        rows = call(
            conn,
            op,
            "SELECT status, id FROM lonnymq.message_create(queue => %s::text, "
            "channel => %s::text, content => %s::bytea, dequeue_at => %s::timestamptz, "
            "delay_ms => %s::bigint, priority => %s::int, dedup_key => %s::text, "
            "state => %s::bytea)",
            params,
        )
        if rows is not None:
            [(status, mid)] = rows
            assert status in STATUSES[op]
            assert (mid is None) == (status == "dropped")
            if status == "created":
                model.ids.add(mid)
    elif op == "create_batch":
        n = data.draw(st.integers(0, 4))
        params = (
            queue,
            pick(
                data,
                model.rng,
                st.lists(CHANNELS, min_size=n, max_size=n),
                st.one_of(st.none(), st.lists(names(), max_size=5)),
            ),
            pick(
                data,
                model.rng,
                st.lists(small_contents, min_size=n, max_size=n),
                st.one_of(st.none(), st.lists(st.one_of(st.none(), small_contents), max_size=5)),
            ),
            pick(
                data,
                model.rng,
                st.one_of(st.none(), st.lists(VALID_TIMES, min_size=n, max_size=n)),
                st.lists(times, max_size=5),
            ),
            pick(
                data,
                model.rng,
                st.one_of(
                    st.none(), st.lists(st.sampled_from([None, "k1", "k3"]), min_size=n, max_size=n)
                ),
                st.lists(st.one_of(st.none(), names(False)), max_size=5),
            ),
            pick(
                data,
                model.rng,
                st.sampled_from([None, None, "i1", "i2"]),
                st.sampled_from(["", "x" * 513, "x" * 512]),
            ),
        )
        rows = call(
            conn,
            op,
            "SELECT status, id FROM lonnymq.message_create_batch(queue => %s::text, "
            "channels => %s::text[], contents => %s::bytea[], dequeue_ats => %s::timestamptz[], "
            "dedup_keys => %s::text[], idempotency_key => %s::text)",
            params,
        )
        if rows is not None:
            assert params[2] is not None and len(rows) == len(params[2])
            for status, mid in rows:
                assert status in STATUSES[op]
                if status == "created":
                    model.ids.add(mid)
    elif op == "dequeue":
        params = (
            queue,
            pick(
                data, model.rng, st.one_of(st.integers(1, 50), st.integers(1000, 60000)), ints(INT8)
            ),
            pick(data, model.rng, st.integers(1, 5), ints(INT4)),
        )
        rows = call(
            conn,
            op,
            "SELECT id, num_attempts, dequeue_at <= clock_timestamp(), recovered "
            "FROM lonnymq.message_dequeue(queue => %s::text, lock_ms => %s::bigint, "
            "max_messages => %s::int)",
            params,
        )
        for mid, attempts, due, _recovered in rows or []:
            assert due, f"message {mid} delivered before its dequeue_at"
            assert mid not in model.gone, f"message {mid} was settled but is delivered again"
            assert attempts >= 1
            model.deliveries.append((mid, attempts))
    elif op in ("complete", "heartbeat", "fail", "defer"):
        mid, attempts = reference(data, model)
        if op == "complete":
            query, params = (
                "SELECT lonnymq.message_complete(id => %s::bigint, num_attempts => %s::bigint)",
                (mid, attempts),
            )
        elif op == "heartbeat":
            query = (
                "SELECT lonnymq.message_heartbeat("
                "id => %s::bigint, num_attempts => %s::bigint, lock_ms => %s::bigint)"
            )
            params = (mid, attempts, pick(data, model.rng, st.integers(1, 5000), ints(INT8)))
        elif op == "fail":
            query = (
                "SELECT lonnymq.message_fail("
                "id => %s::bigint, num_attempts => %s::bigint, error => %s::text)"
            )
            params = (
                mid,
                attempts,
                pick(data, model.rng, st.sampled_from([None, "boom", "é'\""]), names()),
            )
        else:
            query = (
                "SELECT lonnymq.message_defer(id => %s::bigint, num_attempts => %s::bigint, "
                "dequeue_at => %s::timestamptz, delay_ms => %s::bigint, state => %s::bytea)"
            )
            params = (
                mid,
                attempts,
                pick(data, model.rng, VALID_TIMES, times),
                pick(data, model.rng, st.integers(0, 50), ints(INT8)),
                data.draw(states),
            )
        rows = call(conn, op, query, params)
        if rows is not None:
            [(status,)] = rows
            assert status in STATUSES[op]
            if mid in model.gone:
                assert status == "not_found", f"{op} of settled message {mid}: {status}"
            if status in ("completed", "failed"):
                model.gone.add(mid)
    elif op == "complete_batch":
        refs = [reference(data, model) for _ in range(data.draw(st.integers(0, 4)))]
        ids = [r[0] for r in refs]
        attempts = [r[1] for r in refs]
        if data.draw(st.integers(0, 9)) == 0:
            attempts = attempts[:-1]
        rows = call(
            conn,
            op,
            "SELECT id, status FROM lonnymq.message_complete_batch(ids => %s::bigint[], "
            "num_attempts => %s::bigint[])",
            (ids, attempts),
        )
        if rows is not None:
            assert [r[0] for r in rows] == ids
            for mid, status in rows:
                assert status in STATUSES["complete"]
                if mid in model.gone:  # settled before, or earlier in this very batch
                    assert status == "not_found", (
                        f"complete_batch of settled message {mid}: {status}"
                    )
                if status == "completed":
                    model.gone.add(mid)
    elif op == "cancel":
        real, index = (
            pick(data, model.rng, st.just(True), st.just(False)),
            data.draw(st.integers(0, 10**6)),
        )
        garbage = data.draw(ints(INT8))
        known = sorted(model.ids)
        mid = known[index % len(known)] if real and known else garbage
        rows = call(conn, op, "SELECT lonnymq.message_cancel(id => %s::bigint)", (mid,))
        if rows is not None:
            [(status,)] = rows
            assert status in STATUSES[op]
            if mid in model.gone:
                assert status == "not_found"
            if status == "cancelled":
                model.gone.add(mid)
    elif op == "requeue":
        archived = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM lonnymq.message_archive ORDER BY id DESC LIMIT 20"
            )
        ]
        real, index = (
            pick(data, model.rng, st.just(True), st.just(False)),
            data.draw(st.integers(0, 10**6)),
        )
        garbage = data.draw(ints(INT8))
        aid = archived[index % len(archived)] if real and archived else garbage
        rows = call(
            conn,
            op,
            "SELECT status, id FROM lonnymq.archive_requeue(archive_id => %s::bigint)",
            (aid,),
        )
        if rows is not None:
            [(status, mid)] = rows
            assert status in STATUSES[op]
            assert mid is None or mid not in model.gone  # a redrive is a new message
            if status == "created":
                model.ids.add(mid)
    elif op == "prune":
        # (PostgreSQL 15 has no infinite intervals.)
        interval = data.draw(
            st.sampled_from(
                [
                    None,
                    "-1 second",
                    "0",
                    "1000 years",
                    "-178000000 years",
                    "178000000 years",
                    "1 microsecond",
                    "-1 microsecond",
                ]
            )
        )
        rows = call(
            conn, op, "SELECT lonnymq.archive_prune(older_than => %s::interval)", (interval,)
        )
        if rows is not None:
            assert rows[0][0] >= 0
    elif op == "channel_set":
        params = (
            queue,
            pick(data, model.rng, CHANNELS, names()),
            pick(data, model.rng, st.sampled_from([None, 1, 2, 3]), ints(INT4)),
            pick(data, model.rng, st.sampled_from([0, 0, 0, 5]), ints(INT8)),
            pick(data, model.rng, st.sampled_from([None, None, 1, 3, 10]), ints(INT8)),
            pick(data, model.rng, st.sampled_from([None, None, 1, 2, 3]), ints(INT4)),
            pick(data, model.rng, st.booleans(), st.none()),
        )
        rows = call(
            conn,
            op,
            "SELECT max_concurrency FROM lonnymq.channel_set(queue => %s::text, "
            "channel => %s::text, max_concurrency => %s::int, release_interval_ms => %s::bigint, "
            "max_size => %s::bigint, max_attempts => %s::int, retain_completed => %s::boolean)",
            params,
        )
        if rows is not None:
            assert rows == [(params[2],)]
    elif op == "channel_delete":
        rows = call(
            conn,
            op,
            "SELECT lonnymq.channel_delete(queue => %s::text, channel => %s::text)",
            (queue, pick(data, model.rng, CHANNELS, names())),
        )
        if rows is not None:
            assert rows[0][0] in STATUSES[op]
    elif op == "sweep":
        rows = call(
            conn,
            op,
            "SELECT lonnymq.channel_sweep(max_channels => %s::int)",
            (pick(data, model.rng, st.integers(0, 10), ints(INT4)),),
        )
        if rows is not None:
            assert rows[0][0] >= 0
    else:
        rows = call(conn, op, "SELECT lonnymq.wait_hint_ms(queue => %s::text)", (queue,))
        if rows is not None:
            assert rows[0][0] is None or rows[0][0] >= 0


def check_invariants(conn: psycopg.Connection[Any]) -> None:
    assert conn.execute("SELECT * FROM lonnymq.verify()").fetchall() == []
    # Every column computed on the server (as text: Python has no year 4713 BC); content is
    # left out, or the multi-megabyte messages of earlier examples would be read every step.
    for columns, view in (
        (
            "id, queue, channel, num_attempts, dequeue_at, locked_until, created_at, priority, "
            "dedup_key",
            "messages",
        ),
        ("v.*", "channel_stats"),
        ("v.*", "queue_stats"),
        (
            "id, message_id, queue, channel, num_attempts, outcome, error, created_at, archived_at",
            "message_archive",
        ),
    ):
        conn.execute(
            f"SELECT pg_catalog.md5(row({columns})::text) FROM lonnymq.{view} v"
        ).fetchall()


@pytest.fixture(scope="module")
def conn(shared_db: str) -> Any:
    with psycopg.connect(shared_db, autocommit=True) as c:
        # Small enough that the hostile channel_sweep calls really sweep.
        c.execute("SET lonnymq.channel_idle_ms = '50'")
        yield c


# No shrinking and no example database: the calls change a real database, so a replay
# cannot reproduce the same state; a failure is reported as first found.
@settings(
    max_examples=int(os.environ.get("LONNYMQ_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=st.data())
def test_random_hostile_call_sequences(conn: psycopg.Connection[Any], data: st.DataObject) -> None:
    own = "hq_" + uuid.uuid4().hex[:8]
    model = Model(
        queues=[own, None, "", "x" * 257, "名前 'q'", "x" * 256],
        rng=data.draw(st.randoms(use_true_random=False)),
    )
    for _ in range(data.draw(st.integers(5, 25))):
        step(conn, data, model)
        check_invariants(conn)
