"""A streaming query in its own driver process, for test_stream's kill -9 test.

    python stream_child.py DSN QUEUE CHECKPOINT SEEN_TABLE

Consumes QUEUE in micro-batches of 20, records every delivered id in SEEN_TABLE and sleeps a
little per batch, until it is killed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import psycopg

dsn, queue, checkpoint, seen = sys.argv[1:5]
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

from lonnymq.spark import register  # noqa: E402

spark = (
    SparkSession.builder.master("local[2]")
    .appName("lonnymq-stream-child")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
register(spark)


def record(df: Any, batch_id: int) -> None:
    rows = [(batch_id, r.id, r.num_attempts) for r in df.select("id", "num_attempts").collect()]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {seen} (batch_id, id, num_attempts) VALUES (%s, %s, %s)", rows
        )
    time.sleep(0.1)


query = (
    spark.readStream.format("lonnymq")
    .option("dsn", dsn)
    .option("queue", queue)
    .option("max_messages_per_batch", 20)
    .load()
    .writeStream.foreachBatch(record)
    .option("checkpointLocation", checkpoint)
    .start()
)
query.awaitTermination()
