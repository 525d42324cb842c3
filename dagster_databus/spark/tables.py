"""Python data sources over a source table's primary-key ranges (``sources.base.RangeRead``). A Spark task reads
one or more ranges, one after another (``spark.jobs.range_tasks``), each on a connection of its own.

``databus_table_files`` is the spark engine's bootstrap: each task writes its range's rows as Parquet
straight into the snapshot's folder and yields only what the driver commits, the files it wrote and
the SCN its range was read at. ``databus_table`` yields the rows themselves (with ``__scn``) for an
engine that writes through Spark (delta-spark). ``databus_table_refresh`` is an on-demand snapshot of
chosen rows: each task turns its range into changes (``dataplane.refresh``) and routes them as the merge
routes the log's (``dataplane.merging``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dagster_databus.core.batch import repeated
from dagster_databus.core.pickle_text import unpack
from dagster_databus.dataplane.reads import FilesSink
from dagster_databus.errors import DatabusError, for_task


def _spark_type(kind: str) -> str:
    from dagster_databus.core.types import ColumnType

    return ColumnType.parse(kind).spark()


class _RangesReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        # ``tasks``: each task's ranges by their index in the whole plan (``spark.jobs.range_tasks``; a resumed
        # bootstrap leaves out the ranges already read).
        return [InputPartition(tuple(t)) for t in unpack(self.options["tasks"])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        read = unpack(self.options["read"])
        try:
            for index in partition.value:
                yield from self._read(read, int(index))
        except DatabusError as exc:
            raise for_task(exc) from None

    def _read(self, read: Any, index: int) -> Iterator[Any]:
        raise NotImplementedError


class TableRangesSource(DataSource):
    """Options: ``read`` (a packed ``RangeRead``), ``tasks`` (each task's ranges, packed). Rows: the table's columns,
    then ``__scn``."""

    @classmethod
    def name(cls) -> str:
        return "databus_table"

    def schema(self) -> str:
        read = unpack(self.options["read"])
        return ", ".join(f"`{c.name}` {_spark_type(str(c.type))}" for c in read.schema.columns) + ", `__scn` long"

    def reader(self, schema: Any) -> DataSourceReader:
        return _RowsReader(dict(self.options))


class _RowsReader(_RangesReader):
    def _read(self, read: Any, index: int) -> Iterator[Any]:
        from dagster_databus.sources import read_range

        got = read_range(read, index)
        for batch in got.batches:
            scn = repeated(got.scn.value, pa.int64(), batch.num_rows)
            yield pa.RecordBatch.from_arrays([*batch.columns, scn], names=[*batch.schema.names, "__scn"])


class TableFilesSource(DataSource):
    """Options: ``read`` (a packed ``RangeRead``), ``tasks`` (each task's ranges, packed), ``sink`` (a packed
    ``FilesSink``). Rows: what each task wrote (``dataplane.files.ACTION_SCHEMA``), and a fact with its range's SCN
    and row count."""

    @classmethod
    def name(cls) -> str:
        return "databus_table_files"

    def schema(self) -> str:
        return "kind string, path string, size long, rows long, stats string"

    def reader(self, schema: Any) -> DataSourceReader:
        return _FilesReader(dict(self.options))


class _FilesReader(_RangesReader):
    def _read(self, read: Any, index: int) -> Iterator[Any]:
        from dagster_databus.dataplane.delta import with_meta
        from dagster_databus.dataplane.files import FileWriter, actions_batch
        from dagster_databus.sources import read_range
        from dagster_databus.spark.faults import task_fault

        sink: FilesSink = unpack(self.options["sink"])
        if sink.progress is not None and _retried() and sink.progress.recorded(index):
            return  # an earlier attempt of this task read the range and recorded its files: they stand
        started_at, started = time.time(), time.monotonic()
        if sink.progress is not None:
            sink.progress.started(index)
        got = read_range(read, index)
        opened = time.monotonic()
        reading = _Timed(iter(got.batches))
        writer = FileWriter(sink.location, sink.schema, sink.file_rows, f"{sink.prefix}-r{index:05d}")
        files = writer.write(with_meta(b, got.scn, "r", sink.read_at_ms) for b in reading)
        task_fault("bootstrap_files_written")
        ended = time.monotonic()
        # Where the task's time went (``dataplane.results.BOOTSTRAP_PHASES``): the range's connection and snapshot,
        # its rows read and converted (the source's query included), and its files written.
        actions = actions_batch(files, facts=[{"range": index, "scn": got.scn.value,
                                               "rows": sum(f.rows for f in files),
                                               "seconds": round(ended - started, 3), "started_at": started_at,
                                               "opening": opened - started, "reading": reading.seconds,
                                               "writing": ended - opened - reading.seconds}])
        if sink.progress is not None:
            sink.progress.done(index, actions)
        task_fault("bootstrap_range_recorded")
        yield actions


def _retried() -> bool:
    """Whether this task is Spark's retry of one that failed (its worker lost, an error)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is not None and context.attemptNumber() > 0


class _Timed:
    """An iterator's items, with the time spent making them (``seconds``)."""

    def __init__(self, items: Iterator[Any]) -> None:
        self.items, self.seconds = items, 0.0

    def __iter__(self) -> Iterator[Any]:
        while True:
            started = time.monotonic()
            item = next(self.items, _END)
            self.seconds += time.monotonic() - started
            if item is _END:
                return
            yield item


_END = object()


class TableRefreshSource(DataSource):
    """Options: ``read`` (a packed ``RangeRead``), ``tasks`` (each task's ranges, packed), ``changes`` (a packed
    ``dataplane.refresh.RangeChanges``), ``route`` (a packed ``dataplane.merging.MergePlan``). Rows: the merge's
    routed changes (``ROUTED``)."""

    @classmethod
    def name(cls) -> str:
        return "databus_table_refresh"

    def schema(self) -> str:
        from dagster_databus.dataplane.merging import ROUTED_SPARK

        return ROUTED_SPARK

    def reader(self, schema: Any) -> DataSourceReader:
        return _RefreshReader(dict(self.options))


class _RefreshReader(_RangesReader):
    def _read(self, read: Any, index: int) -> Iterator[Any]:
        changes = unpack(self.options["changes"])
        plan = unpack(self.options["route"])
        yield from plan.route(changes.of(read, index, plan.location, plan.files), origin=(f"range-{index}", 0))
