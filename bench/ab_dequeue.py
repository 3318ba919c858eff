"""A/B of a hot-path change: the server CPU of one message_dequeue under two definitions.

Usage (the benchmark cluster running, see bench/README.md, "A/B tools"):
    .venv/bin/python bench/ab_dequeue.py A.sql B.sql [--rounds 12] [--messages 3000] [--batch 1]
                                         [--channelless | --held] [--name NAME]
    .venv/bin/python bench/ab_dequeue.py A.sql --original [--rounds 12] ...

A.sql and B.sql hold function definitions (CREATE OR REPLACE ...), typically two versions
of sql/50_dequeue.sql. Each is applied on top of this checkout's installed lonnymq in a
database of its own (ab_a, ab_b, created afresh). Every round fills both queues alike
(MESSAGES ready messages over 100 channels, VACUUM ANALYZE), then dequeues them one per
transaction, alternating between the two databases every 100 dequeues, and reads each
backend's CPU time from /proc: drift on the machine (other work, frequency, caches) falls
on both alike. With --batch N, each call dequeues N messages (max_messages), and the CPU
is reported per message. With --channelless, the messages have no channel (workload 3's
shape). With --held, they all sit on one channel whose row another transaction holds once
the warm-up is done, so every dequeue takes the held path (workload 2's other dequeuers);
that transaction ends and takes the row again every 10 dequeues, outside the measured
backend (kept open, it would keep every claimed message's index entry alive, and each claim
would step over all of them). Run it with the same file twice to see the noise (A/A): on
the 2-core machine of bench/README.md, 12 rounds gave ratios of 0.96-1.09 and a median of 1.000.
With --original, B is the original LonnyMQ instead (its install SQL from the peers'
folder, see common.PEERS_DIR; single dequeues only): its channels declared without limits,
as lonnymq's are by default, filled and dequeued the same way.
Writes bench/results/ab-NAME.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from common import (
    HOST,
    PEERS,
    PGBIN,
    PORT,
    RESULTS,
    cpu_s,
    load_peer,
    log,
    reset_lonnymq_original,
    scalar,
)

CHUNK = 100
CHANNELS = 100
HOLD_EVERY = 10  # with --held, dequeues between two takes of the channel's row
ORIGINAL_DB = "ab_original"  # with --original, B's database


def _dsn(database: str) -> str:
    return f"host={HOST} port={PORT} user=postgres dbname={database}"


def _prepare(database: str, definitions: Path) -> None:
    """A fresh database with lonnymq installed, then the definitions applied over it."""
    with psycopg.connect(_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database}")
    with psycopg.connect(_dsn(database), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION lonnymq")
    subprocess.run(
        [
            str(PGBIN / "psql"),
            "-q",
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            _dsn(database),
            "-f",
            str(definitions),
        ],
        check=True,
    )


def _prepare_original(database: str) -> None:
    """A fresh database with the original LonnyMQ loaded into its schema."""
    with psycopg.connect(_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database}")
    with psycopg.connect(_dsn(database), autocommit=True) as conn:
        load_peer(conn, "lonnymq_original")


def _dequeue(conn: psycopg.Connection[Any], batch: int) -> int:
    """One message_dequeue call of up to `batch` messages; how many it returned."""
    if _is_original(conn):
        # (result_code 3: a delivery; 2: nothing ready.)
        query = "SELECT count(*) FROM lonny_up.message_dequeue(3600000) WHERE result_code = 3"
        return int(scalar(conn, query))
    return int(
        scalar(conn, "SELECT count(*) FROM lonnymq.message_dequeue('ab', 3600000, %s)", (batch,))
    )


def _is_original(conn: psycopg.Connection[Any]) -> bool:
    return conn.info.dbname == ORIGINAL_DB


class _Holder:
    """With --held: a transaction of its own holding the one channel's row (see the docstring)."""

    def __init__(self, database: str) -> None:
        self.conn = psycopg.connect(_dsn(database))
        self.take()

    def take(self) -> None:
        """The row released and taken again, in a new transaction."""
        self.conn.rollback()
        self.conn.execute("SELECT 1 FROM lonnymq.channel WHERE name = 'h' FOR NO KEY UPDATE")

    def close(self) -> None:
        self.conn.close()


def _refill(conn: psycopg.Connection[Any], messages: int, shape: str) -> None:
    """The queue emptied, given `messages` ready messages (over the channels, on one channel
    for --held, or none for --channelless), vacuumed."""
    if _is_original(conn):
        reset_lonnymq_original(conn, [f"c{c}" for c in range(1, CHANNELS + 1)])
        conn.execute(
            "SELECT count(*) FROM generate_series(1, %s) i, "
            "LATERAL lonny_up.message_create('c' || (i %% %s + 1), 'payload'::bytea, NULL) x",
            (messages, CHANNELS),
        )
        tables: tuple[str, ...] = ("lonny_up.message", "lonny_up.channel")
    else:
        conn.execute("TRUNCATE lonnymq.message, lonnymq.channel_hint, lonnymq.message_archive")
        channel = {"channelless": "NULL", "held": "'h'"}.get(shape, f"'c' || (i %% {CHANNELS} + 1)")
        conn.execute(
            f"SELECT count(lonnymq.message_create('ab', {channel}, 'payload'::bytea)) "
            "FROM generate_series(1, %s) i",
            (messages,),
        )
        tables = ("lonnymq.message", "lonnymq.channel", "lonnymq.channel_hint")
    for table in tables:
        conn.execute(f"VACUUM ANALYZE {table}")


def _warm(conn: psycopg.Connection[Any], batch: int) -> int:
    """Plans made and caches warmed by a few dequeues; the backend pid."""
    for _ in range(CHUNK // 2):  # plans made, caches warm
        _dequeue(conn, 1)
    if batch > 1:
        _dequeue(conn, batch)
    return int(scalar(conn, "SELECT pg_backend_pid()"))


def _turns(conn: psycopg.Connection[Any]) -> int:
    """The last turn number of the queue's channels: it moves whenever a dequeue takes a turn."""
    return int(scalar(conn, "SELECT coalesce(max(turn_seq), 0) FROM lonnymq.channel"))


def _round(messages: int, batch: int, databases: tuple[str, str], shape: str) -> dict[str, float]:
    """One round: µs of backend CPU per dequeued message in each database (A's, then B's)."""
    conns = {db: psycopg.connect(_dsn(db), autocommit=True) for db in databases}
    holders: dict[str, _Holder] = {}
    try:
        for conn in conns.values():
            _refill(conn, messages, shape)
        pids = {db: _warm(conn, batch) for db, conn in conns.items()}
        if shape == "held":
            # Held only now: the warm-up above folded the producers' hints into the channel's
            # head, as its holder would have (held for good, each dequeue would fold them
            # again). Then the held path's plans made too.
            holders = {db: _Holder(db) for db in conns}
            for conn in conns.values():
                _warm(conn, batch)
        turns = {db: _turns(conn) for db, conn in conns.items() if db in holders}
        spent = dict.fromkeys(conns, 0.0)
        chunks = (messages - 2 * CHUNK) // CHUNK
        for chunk in range(chunks):
            order = databases if chunk % 2 == 0 else databases[::-1]
            for db in order:
                before = cpu_s(pids[db])
                for call in range(CHUNK // batch):
                    if db in holders and call % HOLD_EVERY == 0:
                        holders[db].take()  # (another backend: not in the measurement)
                    if _dequeue(conns[db], batch) < batch:
                        raise RuntimeError(f"{db}: the queue ran dry before the other")
                spent[db] += cpu_s(pids[db]) - before
        if any(_turns(conns[db]) != turn for db, turn in turns.items()):
            raise RuntimeError("--held: a dequeue took a turn, so it did not take the held path")
        per_chunk = CHUNK // batch * batch
        return {db: spent[db] / (chunks * per_chunk) * 1e6 for db in conns}
    finally:
        for holder in holders.values():
            holder.close()
        for conn in conns.values():
            conn.close()


def _definitions(path: Path) -> dict[str, str]:
    return {"file": str(path), "md5": hashlib.md5(path.read_bytes()).hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="definitions for database ab_a")
    parser.add_argument("b", type=Path, nargs="?", help="definitions for database ab_b")
    parser.add_argument(
        "--original", action="store_true", help="B is the original LonnyMQ (database ab_original)"
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=1, help="max_messages per call, 1-100")
    shapes = parser.add_mutually_exclusive_group()
    shapes.add_argument(
        "--channelless", action="store_true", help="channel-less messages (workload 3's shape)"
    )
    shapes.add_argument(
        "--held", action="store_true", help="one channel another transaction holds (workload 2)"
    )
    parser.add_argument("--name", default="dequeue")
    args = parser.parse_args()
    if args.messages < 3 * CHUNK:
        parser.error(f"--messages must be at least {3 * CHUNK}")
    if not 1 <= args.batch <= CHUNK:
        parser.error(f"--batch must be between 1 and {CHUNK}")
    if (args.b is None) != args.original:
        parser.error("give either B.sql or --original")
    if args.original and args.batch != 1:
        parser.error("the original LonnyMQ dequeues one message per call: --batch 1 only")
    if args.original and (args.channelless or args.held):
        parser.error("--channelless and --held are lonnymq's shapes only")
    _prepare("ab_a", args.a)
    if args.original:
        _prepare_original(ORIGINAL_DB)
    else:
        _prepare("ab_b", args.b)
    databases = ("ab_a", ORIGINAL_DB if args.original else "ab_b")
    shape = "channelless" if args.channelless else "held" if args.held else "channels"
    rounds = []
    for number in range(args.rounds):
        measured = _round(args.messages, args.batch, databases, shape)
        result = {"ab_a": measured[databases[0]], "ab_b": measured[databases[1]]}
        result["ratio"] = result["ab_b"] / result["ab_a"]
        rounds.append(result)
        log(
            f"round {number + 1}: A {result['ab_a']:.0f} µs, B {result['ab_b']:.0f} µs "
            f"per message (B/A {result['ratio']:.3f})"
        )
    ratios = sorted(r["ratio"] for r in rounds)
    median = statistics.median(ratios)
    spread = f"{ratios[0]:.3f} .. {ratios[-1]:.3f}"
    log(f"B/A median of {args.rounds} rounds: {median:.3f} (rounds {spread})")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ab-{args.name}.json"
    out.write_text(
        json.dumps(
            {
                "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "a": _definitions(args.a),
                "b": _definitions(args.b) if args.b else {"original": PEERS["lonnymq_original"][1]},
                "messages": args.messages,
                "chunk": CHUNK,
                "batch": args.batch,
                "channelless": args.channelless,
                "held": args.held,
                "rounds": rounds,
                "median_ratio": median,
            },
            indent=1,
        )
        + "\n"
    )
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
