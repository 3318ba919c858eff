"""A worked pipeline: Spark enqueues per-tenant jobs, workers run them, Spark reports.

    .venv/bin/python docs/examples/spark_pipeline.py all            # every step, in order
    .venv/bin/python docs/examples/spark_pipeline.py enqueue|work|report

1. prepare  creates the database (``lonnymq_example`` on the local cluster of scripts/cluster,
            or ``--dsn``) with the extension, and gives every tenant a channel that retains
            completed messages (the archive only keeps completed work where a channel asks)
            and allows 2 attempts; the big tenant gets at most 2 jobs in flight.
2. enqueue  a Spark job turns a dataset of jobs into messages, one channel per tenant,
            content = the job as JSON. ``idempotency_key`` makes the write exactly-once:
            run this step twice and the second run creates nothing.
3. work     the Python client's ``Worker`` runs the jobs (4 slots) until the queue is idle;
            a job that raises is retried with backoff, then failed into the archive.
4. report   a Spark job reads ``message_archive`` back and prints, per tenant, the outcomes,
            attempts, and latency from enqueue to settlement (p50 / p95 / max).

See docs/spark.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

import psycopg
from psycopg import conninfo, sql

from lonnymq import Backoff, Message, Queue, Worker

QUEUE = "reports"
# Skewed on purpose: fairness across channels means the small tenants are not stuck
# behind acme's backlog.
TENANTS = {"acme": 300, "globex": 80, "initech": 40, "umbrella": 20, "hooli": 10}
DEFAULT_DSN = os.environ.get(
    "LONNYMQ_EXAMPLE_DSN", "postgresql://postgres@127.0.0.1:25429/lonnymq_example"
)


def prepare(dsn: str) -> None:
    database = conninfo.conninfo_to_dict(dsn)["dbname"]
    admin = conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(database))))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS lonnymq")
    with Queue(dsn, QUEUE) as queue:
        for tenant in TENANTS:
            queue.channel_set(
                tenant,
                retain_completed=True,
                max_attempts=2,
                max_concurrency=2 if tenant == "acme" else None,
            )
    print(f"prepared {dsn}: channels {', '.join(TENANTS)} (retain_completed)")


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from lonnymq.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lonnymq-example")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def enqueue(dsn: str, run_id: str) -> None:
    from pyspark.sql import functions as F

    spark = spark_session()
    # The "dataset": in real life spark.read.parquet(...) of the day's work.
    jobs = spark.createDataFrame(
        [(tenant, n) for tenant, count in TENANTS.items() for n in range(count)],
        "tenant string, n int",
    ).select(
        F.col("tenant"),
        F.struct(
            F.concat_ws("-", "tenant", F.col("n").cast("string")).alias("job_id"),
            F.col("tenant"),
            F.when(F.col("n") % 5 == 0, "pdf").otherwise("csv").alias("kind"),
            (F.col("n") % 7 * 3 + 2).alias("work_ms"),
        ).alias("job"),
    )
    (
        jobs.write.format("lonnymq")
        .option("dsn", dsn)
        .option("queue", QUEUE)
        .option("channel_column", "tenant")
        .option("content_column", "job")  # a struct: stored as JSON
        .option("idempotency_key", f"example-{run_id}")
        .mode("append")
        .save()
    )
    stats = (
        spark.read.format("lonnymq")
        .option("dsn", dsn)
        .option("table", "channel")
        .option("queue", QUEUE)
        .load()
        .select("channel", "ready", "locked", "max_concurrency", "retain_completed")
        .orderBy("channel")
    )
    print(f"enqueued {sum(TENANTS.values())} jobs (idempotency_key example-{run_id}):")
    stats.show(truncate=False)
    spark.stop()


def handle(message: Message) -> None:
    job = json.loads(message.content)
    time.sleep(job["work_ms"] / 1000)
    # Some jobs are broken: they raise on every attempt and end up failed in the archive.
    if job["job_id"].endswith("-13"):
        raise ValueError(f"job {job['job_id']}: template missing")


def work(dsn: str) -> None:
    logging.basicConfig(level=logging.WARNING)
    with Queue(dsn, QUEUE) as queue:
        worker = Worker(
            queue,
            handle,
            concurrency=4,
            lock_ms=10_000,
            max_attempts=2,
            backoff=Backoff(base_ms=50, max_ms=200),
            handle_signals=False,
        )
        started = time.monotonic()
        worker.run(until_idle=True)
        print(f"worker done in {time.monotonic() - started:.1f}s: {worker.counts}")


def report(dsn: str) -> None:
    from pyspark.sql import functions as F

    spark = spark_session()
    archive = (
        spark.read.format("lonnymq")
        .option("dsn", dsn)
        .option("table", "message_archive")
        .option("queue", QUEUE)
        .option("num_partitions", 2)
        .load()
        .withColumn(
            "latency_s",
            F.col("archived_at").cast("double") - F.col("created_at").cast("double"),
        )
    )
    summary = (
        archive.groupBy(F.col("channel").alias("tenant"))
        .agg(
            F.count("*").alias("jobs"),
            F.sum(F.when(F.col("outcome") == "completed", 1).otherwise(0)).alias("completed"),
            F.sum(F.when(F.col("outcome") == "failed", 1).otherwise(0)).alias("failed"),
            F.sum(F.when(F.col("outcome") == "dead", 1).otherwise(0)).alias("dead"),
            F.round(F.avg("num_attempts"), 2).alias("avg_attempts"),
            F.round(F.percentile_approx("latency_s", 0.5), 2).alias("p50_s"),
            F.round(F.percentile_approx("latency_s", 0.95), 2).alias("p95_s"),
            F.round(F.max("latency_s"), 2).alias("max_s"),
        )
        .orderBy(F.desc("jobs"))
    )
    print("per-tenant outcomes and latency (enqueue -> settled), from message_archive:")
    summary.show(truncate=False)
    errors = archive.where("outcome <> 'completed'").select(
        "channel", "num_attempts", F.substring_index("error", "\n", 1).alias("error")
    )
    errors.show(truncate=False)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="lonnymq Spark pipeline example")
    parser.add_argument("step", choices=["all", "prepare", "enqueue", "work", "report"])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument(
        "--run-id",
        default=time.strftime("%Y-%m-%d"),
        help="names the write's idempotency_key (default: today)",
    )
    args = parser.parse_args()
    if args.step in ("all", "prepare"):
        prepare(args.dsn)
    if args.step in ("all", "enqueue"):
        enqueue(args.dsn, args.run_id)
    if args.step in ("all", "work"):
        work(args.dsn)
    if args.step in ("all", "report"):
        report(args.dsn)


if __name__ == "__main__":
    main()
