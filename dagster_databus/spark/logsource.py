"""A PySpark Python data source over the change log: ``spark.read.format("databus_log")``.

One input partition per committed segment overlapping (since, until], or, with ``split_bytes``, per
group of small segments or piece of a large one (``ChangeLogReader.partitions``). Tasks decode the
Avro segments with ``log.columns`` and yield its Arrow record batches: the table's latest
schema, each column in its snapshot (Delta) type (columns an older schema version lacks are
null; dropped columns are left out).

With the ``route`` option (a packed ``dataplane.merging.MergePlan``) each task also does the merge's
first step on its segment before anything reaches the JVM: the newest change per key, cut by the
group of files that may hold it, each group's changes one Arrow payload (``MergePlan.route``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dagster_databus.core.event_columns import CHANGE_META, EVENT_TYPES
from dagster_databus.errors import DatabusError, for_task
from dagster_databus.storage.lake import Lake

# Columns the reader adds after the table's own, in Spark's DDL.
META_SPARK = ", ".join(f"`{name}` {EVENT_TYPES[name].spark()}" for name, _ in CHANGE_META)
META_NAMES = tuple(name for name, _ in CHANGE_META)


class ChangeLogDataSource(DataSource):
    """Options: ``lake`` (a folder, or ``Lake.spec()``: tasks resolve its credentials from their own
    environment), ``source``, ``table``, ``since`` (exclusive), ``until`` (inclusive), ``split_bytes``
    (optional: read segments larger than this in several tasks), ``route`` (optional, see above)."""

    @classmethod
    def name(cls) -> str:
        return "databus_log"

    def _latest(self) -> Any:
        from dagster_databus.log.changelog import ChangeLog

        log = ChangeLog(Lake.from_spec(self.options["lake"]), self.options["source"])
        latest = log.schemas.latest(self.options["table"])
        if latest is None:
            raise ValueError(f"no schema registered for table {self.options['table']!r}")
        return latest[1]

    def schema(self) -> str:
        if "route" in self.options:
            from dagster_databus.dataplane.merging import ROUTED_SPARK

            return ROUTED_SPARK
        columns = ", ".join(f"`{c.name}` {c.type.spark()}" for c in self._latest().columns)
        return f"{columns}, {META_SPARK}"

    def reader(self, schema: Any) -> DataSourceReader:
        return ChangeLogReader(dict(self.options), [(c.name, str(c.type)) for c in self._latest().columns])


class ChangeLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: list[tuple[str, str]]) -> None:
        self.options = options
        self.columns = columns

    def partitions(self) -> list[InputPartition]:
        """With ``split_bytes``, whole segments smaller than that share a task up to that size (a capture run
        that polls often writes many small segments, and a task apiece would cost more than reading them),
        and a segment larger than that is read by several tasks, each the blocks that begin in its byte
        range (``log.avro.container.read_container``). Without it, one task per segment."""
        from dagster_databus.core.scn import Scn
        from dagster_databus.log.changelog import ChangeLog

        log = ChangeLog(Lake.from_spec(self.options["lake"]), self.options["source"])
        until = Scn.parse(self.options["until"]) if self.options.get("until") else None
        table = self.options["table"]
        split = int(self.options.get("split_bytes") or 0)
        out: list[dict[str, Any]] = []
        pack: list[dict[str, Any]] = []
        packed = 0
        for segment in log.manifest().between(Scn.parse(self.options.get("since", "0")), until):
            if table not in segment.tables:
                continue
            if split and segment.bytes <= split:
                if pack and packed + segment.bytes > split:
                    out.append({"segments": pack})
                    pack, packed = [], 0
                pack.append(segment.to_json())
                packed += segment.bytes
                continue
            pieces = -(-segment.bytes // split) if split else 1
            for piece in range(pieces):
                span = [piece * split, (piece + 1) * split if piece + 1 < pieces else None] if pieces > 1 else None
                out.append({"segments": [segment.to_json()], "piece": piece, "span": span})
        if pack:
            out.append({"segments": pack})
        return [InputPartition(json.dumps(spec)) for spec in out] or [InputPartition("{}")]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        try:
            spec = json.loads(partition.value)
            if "route" in self.options:
                from dagster_databus.core.wire import unpack

                # Windows never span segments, and a packed task's segments are read by no other task: its
                # first segment names it.
                origin = (spec["segments"][0]["file"], spec.get("piece", 0)) if spec else None
                yield from unpack(self.options["route"]).route(self._read(spec), origin)
            else:
                yield from self._read(spec)
        except DatabusError as exc:
            raise for_task(exc) from None

    def _read(self, spec: dict[str, Any]) -> Iterator[Any]:
        from dagster_databus.core.schema import Column, TableSchema
        from dagster_databus.core.scn import Scn
        from dagster_databus.core.types import ColumnType
        from dagster_databus.log.changelog import ChangeLog
        from dagster_databus.log.columns import segment_changes
        from dagster_databus.log.manifest import SegmentInfo

        if not spec:
            return
        opts = self.options
        log = ChangeLog(Lake.from_spec(opts["lake"]), opts["source"])
        # The columns as planned, even if a capture registers a newer schema version meanwhile.
        planned = TableSchema(opts["source"], opts["table"],
                              tuple(Column(name, ColumnType.parse(kind)) for name, kind in self.columns), ())
        until = Scn.parse(opts["until"]) if opts.get("until") else None
        names = [*(name for name, _ in self.columns), *META_NAMES]
        cut = spec.get("span")
        span = (cut[0], cut[1] if cut[1] is not None else 2**62) if cut else None
        for segment in spec["segments"]:
            for batch in segment_changes(log, SegmentInfo(**segment), planned, Scn.parse(opts.get("since", "0")),
                                         until, byte_range=span):
                yield batch.select(names)
