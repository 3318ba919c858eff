"""The PySpark classes of the ``lonnymq`` format. Importing this module imports pyspark.

The logic lives in the pyspark-free modules next to it (``_write``, ``_read``, ``_stream``);
these classes only adapt it to the ``pyspark.sql.datasource`` API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import datasource as ds
from pyspark.sql.types import StructType

try:  # PySpark >= 4.2: trigger(availableNow=True) for Python stream readers
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark: the trigger is refused by Spark
    SupportsTriggerAvailableNow = object  # type: ignore[assignment, misc]

from . import _read, _stream, _write
from ._convert import ColumnMapping, resolve_columns
from ._options import OptionError, Options

# Arrow writers avoid a Row object per message; PySpark 4.0 has only the batch one.
_ArrowWriter = getattr(ds, "DataSourceArrowWriter", None)
_StreamArrowWriter = getattr(ds, "DataSourceStreamArrowWriter", None)


class LonnymqDataSource(ds.DataSource):
    """``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("lonnymq")``."""

    @classmethod
    def name(cls) -> str:
        return "lonnymq"

    def _opts(self) -> Options:
        return Options.parse(self.options)

    def schema(self) -> str:
        return _read.SCHEMAS[self._opts().table]

    def reader(self, schema: StructType) -> LonnymqReader:
        return LonnymqReader(self._opts())

    def streamReader(self, schema: StructType) -> LonnymqStreamReader:
        opts = self._opts()
        if opts.table != "message":
            raise OptionError("readStream consumes a queue: leave option table unset")
        return LonnymqStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> LonnymqWriter:
        opts = self._opts()
        opts.require_queue()
        if overwrite:
            raise OptionError("lonnymq only appends messages: use mode('append')")
        return LonnymqWriter(opts, resolve_columns(schema, opts))

    def streamWriter(self, schema: StructType, overwrite: bool) -> LonnymqStreamWriter:
        opts = self._opts()
        opts.require_queue()
        return LonnymqStreamWriter(opts, resolve_columns(schema, opts))


# --- batch read ----------------------------------------------------------------------------


class ReadPartition(ds.InputPartition):
    def __init__(self, part: _read.Part) -> None:
        super().__init__(part.index)
        self.part = part


class LonnymqReader(ds.DataSourceReader):
    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def partitions(self) -> list[ReadPartition]:
        # Spark calls this once per load(), in a planner worker, and reuses the result for
        # every action on the DataFrame: what a task needs travels in the partitions, as the
        # reader was pickled for the tasks before this ran.
        return [ReadPartition(p) for p in _read.plan(self.opts)]

    def read(self, partition: ds.InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, ReadPartition)
        return _read.read(self.opts, partition.part)


# --- streaming source ----------------------------------------------------------------------


class BatchSlicePartition(ds.InputPartition):
    def __init__(self, part: _stream.BatchSlice) -> None:
        super().__init__(part.ord_low)
        self.part = part


class LonnymqStreamReader(ds.DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._core: _stream.StreamCore | None = None

    @property
    def core(self) -> _stream.StreamCore:
        # Driver only: executors get a pickled copy of the reader for read(), without the
        # driver's connection, lock and heartbeat thread.
        if self._core is None:
            self._core = _stream.StreamCore(self.opts)
        return self._core

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_core": None}

    def initialOffset(self) -> dict[str, Any]:
        return self.core.initial_offset()

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.opts.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self.core.prepare_available_now()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        # PySpark < 4.2 calls latestOffset() without arguments. The limit is Spark's
        # admission control: ReadMaxRows caps the batch (never above max_messages_per_batch,
        # one dequeue's bound); ReadAllAvailable and others mean the option's size.
        max_rows = getattr(limit, "max_rows", None)
        return self.core.latest_offset(start, max_rows)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[BatchSlicePartition]:
        return [BatchSlicePartition(p) for p in self.core.partitions(start, end)]

    def read(self, partition: ds.InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, BatchSlicePartition)
        return _stream.read_slice(self.opts, partition.part)

    def commit(self, end: dict[str, Any]) -> None:
        self.core.commit(end)

    def stop(self) -> None:
        if self._core is not None:
            self._core.stop()


# --- batch and streaming write --------------------------------------------------------------


class _WriterBase:
    arrow = False

    def __init__(self, opts: Options, mapping: ColumnMapping) -> None:
        self.opts = opts
        self.mapping = mapping

    def _chunks(self, iterator: Iterator[Any]) -> Iterator[_write.Chunk]:
        if self.arrow:
            return _write.arrow_chunks(iterator, self.mapping)
        return _write.row_chunks(iterator, self.mapping)


class LonnymqWriter(_WriterBase, _ArrowWriter or ds.DataSourceWriter):  # type: ignore[misc]
    """Batch write: one write id and one staging run for the whole job, chosen on the driver.
    Tasks stage; ``commit`` publishes exactly the attempts Spark hands it (see ``_write``)."""

    arrow = _ArrowWriter is not None

    def __init__(self, opts: Options, mapping: ColumnMapping) -> None:
        super().__init__(opts, mapping)
        self.write_id = _write.write_id_for(opts.idempotency_key)
        # A re-run of a committed keyed write: every task returns at once, nothing is staged.
        self.done = _write.job_committed(opts, self.write_id)
        self.run = None if self.done else _write.open_run(opts, "batch")

    def write(self, iterator: Iterator[Any]) -> _write.PartitionResult:
        if self.run is None:
            return _write.PartitionResult(self.write_id, _write.task()[0], skipped=True)
        return _write.stage_partition(self.opts, self.run, self.write_id, self._chunks(iterator))

    def commit(self, messages: list[Any]) -> None:
        if self.run is None:
            _write.log.info("lonnymq write %s: already committed", self.write_id)
            return
        done = _write.publish(self.opts, self.mapping, self.run, self.write_id, messages)
        _write.close_run(self.opts, self.run)
        _write.log.info(done.summary())

    def abort(self, messages: list[Any]) -> None:
        # Nothing was published: drop what the attempts staged. Re-running the job with the
        # same idempotency_key writes it in full.
        if self.run is not None:
            _write.close_run(self.opts, self.run)
        _write.log.warning("lonnymq write %s aborted: nothing published", self.write_id)


class LonnymqStreamWriter(_WriterBase, _StreamArrowWriter or ds.DataSourceStreamWriter):  # type: ignore[misc]
    """Streaming sink: a micro-batch's write id is (query id, batch id); one staging run per
    start of the query. Each batch is published by its commit, exactly as a batch write."""

    arrow = _StreamArrowWriter is not None

    def __init__(self, opts: Options, mapping: ColumnMapping) -> None:
        super().__init__(opts, mapping)
        self.run = _write.open_run(opts, "stream")

    def write(self, iterator: Iterator[Any]) -> _write.PartitionResult:
        return _write.stage_partition(
            self.opts, self.run, _write.stream_write_id(), self._chunks(iterator)
        )

    def commit(self, messages: list[Any], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, _write.PartitionResult)]
        for write_id in sorted({m.write_id for m in results}):
            mine = [m for m in results if m.write_id == write_id]
            done = _write.publish(self.opts, self.mapping, self.run, write_id, mine)
            _write.log.info(done.summary())

    def abort(self, messages: list[Any], batchId: int) -> None:
        _write.discard(self.opts, messages)
        _write.log.warning("lonnymq sink: micro-batch %s aborted: nothing published", batchId)
