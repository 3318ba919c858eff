"""Bulk enqueue through Spark vs plain COPY vs per-message message_create, in one run.

    .venv/bin/python bench/spark/bench_enqueue.py [--rows 200000] [--rounds 3]

Three ways to put the same rows (channel = one of 100 tenants, content = a ~120-byte JSON
document) into PostgreSQL, measured in the same run, interleaved, medians over rounds:

- spark:  ``df.write.format("lonnymq")`` from ``local[2]`` (2 partitions): tasks COPY into
          the job's UNLOGGED staging table, the driver's commit publishes every staged row
          with ``message_create_batch`` in chunks, in one transaction. The DataFrame is cached
          first, so Spark's own row generation is not timed.
- copy:   psycopg ``COPY ... FROM STDIN (FORMAT BINARY)`` of the same rows into a bare table
          (channel text, content bytea), one connection, one transaction: the floor for
          putting rows into PostgreSQL at all.
- direct: the data source's own write path called from plain Python threads, one per
          partition, without Spark, timed in its two steps: ``stage`` (Arrow to COPY into
          the staging table: client conversion and transfer) and ``publish`` (the commit:
          server only). spark / direct is Spark's own overhead (JVM, Arrow, Python workers).
- spark_keyed: the same Spark write with a ``dedup_key`` column (a distinct key per row):
          every row is checked for a live duplicate of its key, in the set-based
          ``message_create_batch`` (before 1.2's set-based batch, element by element).
- create: ``SELECT * FROM lonnymq.message_create(...)`` per message, one transaction each
          (autocommit), one connection: what a naive producer loop gets.
- ceiling: the rows, already on the server in a temporary table, inserted straight into
          ``lonnymq.message`` by one ``INSERT ... SELECT`` (no client, no checks, no hints):
          the most any path through the queue's own table can reach. ceiling / copy is the
          ratio no client of the extension can beat (ids, wider rows, two indexes).

Results: JSON in bench/spark/results/ (machine, settings, git head, every round, medians,
ratios) and a summary on stdout. The database (default: lonnymq_spark_bench on the test
cluster of scripts/cluster) is dropped and re-created with the extension.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from lonnymq.spark import _bookkeeping

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"


def content_of(i: int) -> bytes:
    doc = {"job": "render", "tenant": f"tenant_{i % 100}", "n": i, "payload": "x" * 64}
    return json.dumps(doc, separators=(",", ":")).encode()


def recreate(admin_dsn: str, database: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = conninfo.make_conninfo(admin_dsn, dbname=database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION lonnymq")
        conn.execute("CREATE TABLE bare (channel text, content bytea)")
    return dsn


def reset(dsn: str) -> None:
    """Empties the queue tables between runs, so each starts from the same state."""
    with _bookkeeping.connect(dsn, autocommit=True) as conn:
        b = _bookkeeping.schema(conn)
        spark = conn.execute("SELECT to_regclass(%s)", (f"{b}.write_attempt",)).fetchone()
        conn.execute(
            "TRUNCATE lonnymq.message, lonnymq.channel_hint, lonnymq.batch, bare"
            + (
                f", {b}.write_partition, {b}.write_job, {b}.write_attempt"
                if spark and spark[0]
                else ""
            )
        )
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def run_copy(dsn: str, rows: list[tuple[str, bytes]]) -> float:
    start = time.perf_counter()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy("COPY bare (channel, content) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "bytea"])
            for row in rows:
                copy.write_row(row)
        conn.commit()
    return len(rows) / (time.perf_counter() - start)


def run_ceiling(dsn: str, rows: list[tuple[str, bytes]]) -> float:
    """Server-side INSERT ... SELECT into lonnymq.message; only that statement is timed."""
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE src (ord bigint, channel text, content bytea)")
        with conn.cursor().copy("COPY src FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["bigint", "text", "bytea"])
            for i, (channel, content) in enumerate(rows):
                copy.write_row((i, channel, content))
        # The queue and its 100 channels exist since the warm-up write (reset keeps them).
        queue_id = conn.execute("SELECT id FROM lonnymq.queue WHERE name = 'bench'").fetchone()[0]  # type: ignore[index]
        conn.commit()
        start = time.perf_counter()
        conn.execute(
            "INSERT INTO lonnymq.message (queue_id, channel_id, content, dequeue_ms)"
            " SELECT %s, c.id, s.content, 0 FROM src s"
            " LEFT JOIN lonnymq.channel c ON c.queue_id = %s AND c.name = s.channel",
            (queue_id, queue_id),
        )
        conn.commit()
        return len(rows) / (time.perf_counter() - start)


def run_create(dsn: str, rows: list[tuple[str, bytes]]) -> float:
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for channel, content in rows:
            conn.execute(
                "SELECT * FROM lonnymq.message_create(%s, %s, %s)",
                ("bench", channel, content),
            )
    return len(rows) / (time.perf_counter() - start)


def run_spark(df: Any, dsn: str, n: int, keyed: bool = False) -> float:
    """The write of channel and content (and the dedup_key column when keyed)."""
    columns = ["channel", "content", "dedup_key"] if keyed else ["channel", "content"]
    start = time.perf_counter()
    (
        df.select(*columns)
        .write.format("lonnymq")
        .option("dsn", dsn)
        .option("queue", "bench")
        .option("channel_column", "channel")
        .option("content_column", "content")
        .mode("append")
        .save()
    )
    return n / (time.perf_counter() - start)


def run_direct(dsn: str, rows: list[tuple[str, bytes]], partitions: int) -> dict[str, float]:
    """The data source's write path without Spark: one thread per partition stages Arrow
    batches of 10,000 rows, then one commit publishes. Returns rows/s and the seconds of
    each step."""
    import threading

    import pyarrow as pa

    from lonnymq.spark import _write
    from lonnymq.spark._convert import BINARY, ColumnMapping
    from lonnymq.spark._options import Options

    opts = Options.parse({"dsn": dsn, "queue": "bench"})
    mapping = ColumnMapping("channel", "content", BINARY, None, None)
    size = -(-len(rows) // partitions)
    write_id = f"auto:direct-{time.time()}"
    results: list[Any] = []

    def batches(part: list[tuple[str, bytes]]) -> Any:
        for i in range(0, len(part), 10_000):
            chunk = part[i : i + 10_000]
            yield pa.record_batch(
                [
                    pa.array([c for c, _ in chunk]),
                    pa.array([b for _, b in chunk], pa.binary()),
                ],
                names=["channel", "content"],
            )

    # Outside Spark there is no TaskContext: each thread says which partition it writes.
    local = threading.local()
    _write.task = lambda: (local.partition, 0)

    def stage(part: list[tuple[str, bytes]], n: int) -> None:
        local.partition = n
        results.append(
            _write.stage_partition(opts, run, write_id, _write.arrow_chunks(batches(part), mapping))
        )

    start = time.perf_counter()
    run = _write.open_run(opts, "batch")
    threads = [
        threading.Thread(target=stage, args=(rows[i * size : (i + 1) * size], i))
        for i in range(partitions)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    staged = time.perf_counter()
    _write.publish(opts, mapping, run, write_id, results)
    _write.close_run(opts, run)
    end = time.perf_counter()
    return {
        "direct": len(rows) / (end - start),
        "stage_s": staged - start,
        "publish_s": end - staged,
    }


def count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument(
        "--create-rows",
        type=int,
        default=3_000,
        help="messages for the per-message message_create rate",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--admin-dsn",
        default=os.environ.get(
            "LONNYMQ_TEST_DSN", "postgresql://postgres@127.0.0.1:25429/postgres"
        ),
    )
    parser.add_argument("--database", default="lonnymq_spark_bench")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lonnymq.spark import register

    dsn = recreate(args.admin_dsn, args.database)
    rows = [(f"tenant_{i % 100}", content_of(i)) for i in range(args.rows)]

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lonnymq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (
        spark.range(0, args.rows, numPartitions=args.partitions)
        .select(
            F.concat(F.lit("tenant_"), (F.col("id") % 100).cast("string")).alias("channel"),
            F.to_json(
                F.struct(
                    F.lit("render").alias("job"),
                    F.concat(F.lit("tenant_"), (F.col("id") % 100).cast("string")).alias("tenant"),
                    F.col("id").alias("n"),
                    F.lit("x" * 64).alias("payload"),
                )
            ).alias("content"),
            F.concat(F.lit("key-"), F.col("id").cast("string")).alias("dedup_key"),
        )
        .cache()
    )
    assert df.count() == args.rows
    # Warm-up: Python workers, the bookkeeping schema, the channels.
    run_spark(df.limit(1000), dsn, 1000)

    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        result: dict[str, float] = {}
        order = ["spark", "direct", "copy", "ceiling", "create", "spark_keyed"]
        if r % 2:
            order.reverse()
        for what in order:
            reset(dsn)
            if what == "spark":
                result["spark"] = run_spark(df, dsn, args.rows)
                assert count(dsn, "lonnymq.message") == args.rows
            elif what == "spark_keyed":
                result["spark_keyed"] = run_spark(df, dsn, args.rows, keyed=True)
                assert count(dsn, "lonnymq.message") == args.rows
            elif what == "direct":
                result.update(run_direct(dsn, rows, args.partitions))
                assert count(dsn, "lonnymq.message") == args.rows
            elif what == "ceiling":
                result["ceiling"] = run_ceiling(dsn, rows)
                assert count(dsn, "lonnymq.message") == args.rows
            elif what == "copy":
                result["copy"] = run_copy(dsn, rows)
                assert count(dsn, "bare") == args.rows
            else:
                result["create"] = run_create(dsn, rows[: args.create_rows])
        rounds.append(result)
        print(
            f"round {r + 1}: "
            + ", ".join(
                f"{k} {v:.2f}" if k.endswith("_s") else f"{k} {v:,.0f} rows/s"
                for k, v in result.items()
            ),
            flush=True,
        )
    spark.stop()

    med = {
        k: statistics.median(x[k] for x in rounds)
        for k in (
            "spark",
            "spark_keyed",
            "direct",
            "stage_s",
            "publish_s",
            "copy",
            "ceiling",
            "create",
        )
    }
    # Where a Spark write's time goes, per round (seconds for all rows): Spark's own work
    # (JVM, Arrow, Python workers) is what the Spark write takes beyond the same path
    # without Spark; staging is client conversion and transfer; publishing is the server.
    split = {
        "spark_s": statistics.median(args.rows / x["spark"] for x in rounds),
        "spark_own_s": statistics.median(
            args.rows / x["spark"] - args.rows / x["direct"] for x in rounds
        ),
        "stage_s": med["stage_s"],
        "publish_s": med["publish_s"],
        "ceiling_s": statistics.median(args.rows / x["ceiling"] for x in rounds),
    }
    ratio_copy = statistics.median(x["spark"] / x["copy"] for x in rounds)
    ratio_create = statistics.median(x["spark"] / x["create"] for x in rounds)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=False,
        capture_output=True,
        text=True,
    ).stdout.strip()
    load = os.getloadavg()
    report: dict[str, Any] = {
        "benchmark": "spark bulk enqueue",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_head": head,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_at_end": load,
        },
        "settings": {
            "rows": args.rows,
            "create_rows": args.create_rows,
            "rounds": args.rounds,
            "spark_master": "local[2]",
            "partitions": args.partitions,
            "content_bytes": len(content_of(0)),
        },
        "rounds_rows_per_s": rounds,
        "median_rows_per_s": med,
        "ratios": {
            "spark_vs_copy": ratio_copy,
            "spark_vs_message_create": ratio_create,
            "spark_keyed_vs_spark": statistics.median(
                x["spark_keyed"] / x["spark"] for x in rounds
            ),
            "spark_vs_direct": statistics.median(x["spark"] / x["direct"] for x in rounds),
            "direct_vs_copy": statistics.median(x["direct"] / x["copy"] for x in rounds),
            "ceiling_vs_copy": statistics.median(x["ceiling"] / x["copy"] for x in rounds),
            # The most any path into lonnymq.message can reach against message_create.
            "ceiling_vs_message_create": statistics.median(
                x["ceiling"] / x["create"] for x in rounds
            ),
            "spark_vs_ceiling": statistics.median(x["spark"] / x["ceiling"] for x in rounds),
            "publish_vs_ceiling": statistics.median(
                args.rows / x["publish_s"] / x["ceiling"] for x in rounds
            ),
        },
        "split_s": split,
        "goals": {"spark_vs_ceiling": 0.8, "spark_vs_message_create": 100},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "enqueue.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\nmedians: spark {med['spark']:,.0f} rows/s, same path without Spark "
        f"{med['direct']:,.0f} rows/s, COPY {med['copy']:,.0f} rows/s, "
        f"ceiling {med['ceiling']:,.0f} rows/s, message_create {med['create']:,.0f} msgs/s"
    )
    print(f"spark / ceiling        = {report['ratios']['spark_vs_ceiling']:.2f}x (goal >= 0.8x)")
    print(
        f"spark / message_create = {ratio_create:.1f}x (goal >= 100x; the ceiling itself is "
        f"{report['ratios']['ceiling_vs_message_create']:.1f}x)"
    )
    print(f"spark / COPY           = {ratio_copy:.2f}x")
    print(
        f"spark with dedup keys  = {med['spark_keyed']:,.0f} rows/s"
        f" ({report['ratios']['spark_keyed_vs_spark']:.2f}x the write without keys)"
    )
    print(
        "split (s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in split.items())
        + "  (spark_own = spark - same path without Spark)"
    )
    print(
        f"ceiling / COPY         = {report['ratios']['ceiling_vs_copy']:.2f}x"
        " (server-side INSERT ... SELECT into lonnymq.message: no path into the queue beats it)"
    )
    print(f"load average at end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; wrote {out}")


if __name__ == "__main__":
    main()
