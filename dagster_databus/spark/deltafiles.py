"""A Python data source over the data files of Delta tables (``databus_delta_files``): one task per file,
read through the storage layer (a local folder or an object store, no Hadoop connectors needed).

Each file can carry constant columns (a logical table's part label), be conformed to a target schema
(columns it lacks are null), and, given a sink, be written straight into another table's folder: the
task then yields only the files it wrote, as the bootstrap's tasks do (``spark.tables``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dagster_databus.core.batch import repeated
from dagster_databus.core.pickle_text import unpack
from dagster_databus.dataplane.reads import FileRead
from dagster_databus.errors import DatabusError, for_task


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


class DeltaFilesSource(DataSource):
    """Options: ``files`` (a packed list of ``FileRead``), ``schema`` (a packed Arrow schema: the rows'
    columns, each file conformed to it), ``sink`` (optional, a packed ``spark.tables.FilesSink``: write
    the rows there and yield the files written)."""

    @classmethod
    def name(cls) -> str:
        return "databus_delta_files"

    def schema(self) -> Any:
        if "sink" in self.options:
            return "kind string, path string, size long, rows long, stats string"
        return spark_schema(unpack(self.options["schema"]))

    def reader(self, schema: Any) -> DataSourceReader:
        return _FilesReader(dict(self.options))


class _FilesReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(len(unpack(self.options["files"])))] or [InputPartition(-1)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        try:
            yield from self._read(int(partition.value))
        except DatabusError as exc:
            raise for_task(exc) from None

    def _read(self, index: int) -> Iterator[Any]:
        from dagster_databus.dataplane.delta import conform_rows
        from dagster_databus.dataplane.files import FileWriter, actions_batch

        if index < 0:
            return
        file: FileRead = unpack(self.options["files"])[index]
        schema: pa.Schema = unpack(self.options["schema"])
        wanted = [f.name for f in schema if f.name not in file.constants]
        held = file.read(schema if file.then else None)  # a compaction's files joined in one type per column
        if file.live:
            from dagster_databus.dataplane.delta import live

            held = live(held)
        if file.as_history:
            from dagster_databus.dataplane.history import from_snapshot

            held = from_snapshot(held)
        data = held.select([n for n in wanted if n in held.column_names])
        for name, value in file.constants.items():
            data = data.append_column(name, repeated(value, pa.string(), data.num_rows))
        data = conform_rows(data, schema, file.fills)
        if "sink" not in self.options:
            yield from data.to_batches()
            return
        sink = unpack(self.options["sink"])
        writer = FileWriter(sink.location, schema, sink.file_rows, f"{sink.prefix}-f{index:05d}")
        files = writer.write(data.to_batches())
        yield actions_batch(files, facts=[{"rows": data.num_rows, "constants": dict(file.constants)}])
