"""A PySpark Python data source over the change log: ``spark.read.format("databus_log")``.

One input partition per committed segment overlapping (since, until]. Tasks decode the
Avro segments with fastavro and yield Arrow record batches in the table's latest schema
(columns a payload's older schema lacks are null; dropped columns are left out).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

# Columns the reader adds after the table's own.
META_SPARK = "`__scn` long, `__seq` int, `__window_scn` long, `__op` string, `__commit_ts_ms` long"
SPARK_TYPES = {"long": "long", "double": "double", "string": "string", "bytes": "binary", "boolean": "boolean"}


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
        columns = ", ".join(f"`{c.name}` {SPARK_TYPES[c.type]}" for c in self._latest().columns)
        return f"{columns}, {META_SPARK}"

    def reader(self, schema: Any) -> DataSourceReader:
        return ChangeLogReader(dict(self.options), [(c.name, c.type) for c in self._latest().columns])


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
        return [InputPartition(json.dumps({"file": s.file})) for s in segments] or [InputPartition("{}")]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import io

        import fastavro
        import pyarrow as pa

        from dagster_databus.core.schema import ARROW_TYPES
        from dagster_databus.log.store import ChangeLog

        spec = json.loads(partition.value)
        if not spec:
            return
        opts = self.options
        log = ChangeLog(Path(opts["lake"]), opts["source"])
        table, since = opts["table"], int(opts.get("since", "0"))
        until = int(opts["until"]) if opts.get("until") else None
        names = [*self.columns, "__scn", "__seq", "__window_scn", "__op", "__commit_ts_ms"]
        arrow_schema = pa.schema(
            [pa.field(n, ARROW_TYPES[t]) for n, t in zip(self.columns, self.types, strict=True)]
            + [pa.field("__scn", pa.int64()), pa.field("__seq", pa.int32()), pa.field("__window_scn", pa.int64()),
               pa.field("__op", pa.string()), pa.field("__commit_ts_ms", pa.int64())]
        )
        batch: dict[str, list[Any]] = {n: [] for n in names}
        parsed: dict[int, Any] = {}
        with open(log.segments_dir / spec["file"], "rb") as f:
            for rec in fastavro.reader(f):
                scn = rec["scn"]
                if rec["table"] != table or scn <= since or (until is not None and scn > until):
                    continue
                version = rec["schema_version"]
                if version not in parsed:
                    parsed[version] = log.schemas.parsed(table, version)
                row = fastavro.schemaless_reader(io.BytesIO(rec["payload"]), parsed[version], None)
                for c in self.columns:
                    batch[c].append(row.get(c))
                batch["__scn"].append(scn)
                batch["__seq"].append(rec["seq"])
                batch["__window_scn"].append(rec["window_scn"])
                batch["__op"].append(rec["op"])
                batch["__commit_ts_ms"].append(rec["commit_ts_ms"])
                if len(batch["__scn"]) >= 10_000:
                    yield pa.RecordBatch.from_pydict(batch, schema=arrow_schema)
                    batch = {n: [] for n in names}
        if batch["__scn"]:
            yield pa.RecordBatch.from_pydict(batch, schema=arrow_schema)
