"""A PySpark Python data source over the change log: ``spark.read.format("databus_log")``.

One input partition per committed segment overlapping (since, until]. Tasks decode the
Avro segments (one row record per event) with fastavro and yield Arrow record batches in the
table's latest schema, each column in its snapshot (Delta) type (columns an older schema
version lacks are null; dropped columns are left out).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dagster_databus.errors import DatabusError, for_task

# Columns the reader adds after the table's own.
META_SPARK = "`__scn` long, `__seq` int, `__window_scn` long, `__op` string, `__commit_ts_ms` long"


class ChangeLogDataSource(DataSource):
    """Options: ``lake``, ``source``, ``table``, ``since`` (exclusive), ``until`` (inclusive)."""

    @classmethod
    def name(cls) -> str:
        return "databus_log"

    def _latest(self) -> Any:
        from dagster_databus.log.store import ChangeLog

        log = ChangeLog(Path(self.options["lake"]), self.options["source"])
        latest = log.schemas.latest(self.options["table"])
        if latest is None:
            raise ValueError(f"no schema registered for table {self.options['table']!r}")
        return latest[1]

    def schema(self) -> str:
        columns = ", ".join(f"`{c.name}` {c.type.spark()}" for c in self._latest().columns)
        return f"{columns}, {META_SPARK}"

    def reader(self, schema: Any) -> DataSourceReader:
        return ChangeLogReader(dict(self.options), [(c.name, str(c.type)) for c in self._latest().columns])


class ChangeLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: list[tuple[str, str]]) -> None:
        self.options = options
        self.columns = [name for name, _ in columns]
        self.types = [kind for _, kind in columns]

    def partitions(self) -> list[InputPartition]:
        from dagster_databus.core.scn import Scn
        from dagster_databus.log.store import ChangeLog

        log = ChangeLog(Path(self.options["lake"]), self.options["source"])
        until = Scn.parse(self.options["until"]) if self.options.get("until") else None
        table = self.options["table"]
        segments = [s for s in log.manifest().between(Scn.parse(self.options.get("since", "0")), until)
                    if table in s.tables]
        return [InputPartition(json.dumps(s.to_json())) for s in segments] or [InputPartition("{}")]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        try:
            yield from self._read(partition)
        except DatabusError as exc:
            raise for_task(exc) from None

    def _read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from dagster_databus.core.types import ColumnType
        from dagster_databus.log.store import ChangeLog, SegmentInfo, avro_conversions

        spec = json.loads(partition.value)
        if not spec:
            return
        opts = self.options
        log = ChangeLog(Path(opts["lake"]), opts["source"])
        table, since = opts["table"], int(opts.get("since", "0"))
        until = int(opts["until"]) if opts.get("until") else None
        types = [ColumnType.parse(t) for t in self.types]
        meta = [("__scn", pa.int64()), ("__seq", pa.int32()), ("__window_scn", pa.int64()), ("__op", pa.string()),
                ("__commit_ts_ms", pa.int64())]
        arrow_schema = pa.schema([pa.field(n, t.arrow()) for n, t in zip(self.columns, types, strict=True)]
                                 + [pa.field(n, t) for n, t in meta])

        def flush(batch: dict[str, list[Any]]) -> pa.RecordBatch:
            arrays = [t.to_arrow(batch[n]) for n, t in zip(self.columns, types, strict=True)]
            arrays += [pa.array(batch[n], type=t) for n, t in meta]
            return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

        names = [*self.columns, *(n for n, _ in meta)]
        batch: dict[str, list[Any]] = {n: [] for n in names}
        conversions: dict[int, list[tuple[str, Any]]] = {}
        with log.open_segment(SegmentInfo(**spec)) as (records, row_tables):
            for name, rec in records:
                scn = rec["__scn"]
                row_table, version = row_tables[name]
                if row_table != table or scn <= since or (until is not None and scn > until):
                    continue
                if version not in conversions:
                    conversions[version] = avro_conversions(log.schemas.load(table, version), "from")
                for column, convert in conversions[version]:
                    rec[column] = convert(rec[column])
                for c in self.columns:
                    batch[c].append(rec.get(c))
                batch["__scn"].append(scn)
                batch["__seq"].append(rec["__seq"])
                batch["__window_scn"].append(rec["__window_scn"])
                batch["__op"].append(rec["__op"])
                batch["__commit_ts_ms"].append(rec["__commit_ts_ms"])
                if len(batch["__scn"]) >= 10_000:
                    yield flush(batch)
                    batch = {n: [] for n in names}
        if batch["__scn"]:
            yield flush(batch)
