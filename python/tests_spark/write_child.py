"""A write in its own driver process, for test_write_failures' driver-kill tests.

    python write_child.py DSN QUEUE batch KEY ROWS
    python write_child.py DSN QUEUE stream SOURCE_DIR CHECKPOINT

``batch``: writes ROWS rows in 4 partitions with idempotency_key KEY. ``stream``: runs the
sink over the JSON files in SOURCE_DIR (one per micro-batch) with ``availableNow``. The test
kills it (SIGKILL, JVM and all) while the driver's commit waits on a lock the test holds.
"""

from __future__ import annotations

import os
import sys

dsn, queue, mode = sys.argv[1:4]
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

from lonnymq.spark import register  # noqa: E402

spark = (
    SparkSession.builder.master("local[2]")
    .appName("lonnymq-write-child")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
register(spark)

if mode == "batch":
    key, rows = sys.argv[4], int(sys.argv[5])
    (
        spark.range(0, rows, numPartitions=4)
        .selectExpr(
            "concat('t', CAST(id % 20 AS string)) AS channel", "CAST(id AS string) AS content"
        )
        .write.format("lonnymq")
        .option("dsn", dsn)
        .option("queue", queue)
        .option("idempotency_key", key)
        .mode("append")
        .save()
    )
else:
    source, checkpoint = sys.argv[4], sys.argv[5]
    (
        spark.readStream.schema("tenant string, n int")
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .selectExpr("tenant AS channel", "CAST(n AS string) AS content")
        .writeStream.format("lonnymq")
        .option("dsn", dsn)
        .option("queue", queue)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
