"""lonnymq as a PySpark data source: format ``"lonnymq"`` (PySpark 4, ``pyspark.sql.datasource``).

    from lonnymq.spark import register
    register(spark)
    df.write.format("lonnymq").option("dsn", dsn).option("queue", "jobs").mode("append").save()
    spark.read.format("lonnymq").option("dsn", dsn).option("table", "message_archive").load()
    spark.readStream.format("lonnymq").option("dsn", dsn).option("queue", "jobs").load()
    df.writeStream.format("lonnymq").option("dsn", dsn).option("queue", "jobs").start()

Needs the ``spark`` extra (``pip install 'lonnymq[spark]'``). PySpark is imported only by
``register()``, so ``import lonnymq`` and ``import lonnymq.spark`` work without it. See
docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from ._bookkeeping import install
from ._options import OptionError

__all__ = ["FORMAT", "OptionError", "install", "register"]

FORMAT = "lonnymq"


def register(spark: Any) -> None:
    """Registers the ``lonnymq`` format with a SparkSession."""
    from .datasource import LonnymqDataSource

    spark.dataSource.register(LonnymqDataSource)
