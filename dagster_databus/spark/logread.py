"""The change log read by Spark tasks, planned by the driver: ``log_tasks`` cuts a table's segments in
(since, until] into task specs, and ``read_changes`` maps a frame of one row per spec with ``mapInArrow``
(``LogTasks``). Each task decodes its segments with ``log.columns`` and yields Arrow record batches: the
table's latest schema, each column in its snapshot (Delta) type (columns an older schema version lacks are
null; dropped columns are left out).

Not a Python data source: a data source is planned by Python workers on the server (its schema, its
partitions), which Spark starts again after a minute idle, on every scheduled run; ``mapInArrow`` needs only the
task workers, forked from the Python daemon Spark keeps running.

With a merge plan (``dataplane.merging.MergePlan``) each task also does the merge's first step on its
segment before anything reaches the JVM: the newest change per key, cut by the group of files that may hold it,
each group's changes one Arrow payload (``MergePlan.route``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_databus.core.event_columns import CHANGE_META, EVENT_TYPES
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import DatabusError, for_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from dagster_databus.config import DatabusConfig
    from dagster_databus.core.scn import Scn
    from dagster_databus.dataplane.merging import MergePlan
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.spark.runtime import SparkRuntime

# Columns the reader adds after the table's own, in Spark's DDL.
META_SPARK = ", ".join(f"`{name}` {EVENT_TYPES[name].spark()}" for name, _ in CHANGE_META)
META_NAMES = tuple(name for name, _ in CHANGE_META)


def log_tasks(log: ChangeLog, table: str, since: Scn, until: Scn | None, split: int = 0) -> list[dict[str, Any]]:
    """One task per committed segment holding ``table`` in (since, until]; with ``split``, whole segments
    smaller than that share a task up to that size (a capture run that polls often writes many small segments,
    and a task apiece would cost more than reading them), and a segment larger than that is read by several
    tasks, each the blocks that begin in its byte range (``log.avro.container.read_container``)."""
    out: list[dict[str, Any]] = []
    pack: list[dict[str, Any]] = []
    packed = 0
    for segment in log.manifest().between(since, until):
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
    return out


def read_changes(spark: SparkRuntime, config: DatabusConfig, source: str, table: str, since: Scn, until: Scn,
                 plan: MergePlan | None = None, split_bytes: int = 0) -> DataFrame:
    """The table's changes in (since, until], one task per log segment (segments over ``split_bytes`` in
    pieces, smaller ones together up to that size); with a merge ``plan``, reduced per task and tagged with their
    file groups (``MergePlan.route``)."""
    read = log_read(config, source, table, since, until, plan, split_bytes)
    if plan is not None:
        from dagster_databus.dataplane.merging import ROUTED_SPARK

        schema = ROUTED_SPARK
    else:
        schema = ", ".join(f"`{name}` {ColumnType.parse(kind).spark()}" for name, kind in read.columns) \
            + f", {META_SPARK}"
    # One row, so one task, per spec: a range cut in as many slices as it has numbers.
    return spark.session.range(0, len(read.tasks), 1, max(1, len(read.tasks))).mapInArrow(read, schema)


def log_read(config: DatabusConfig, source: str, table: str, since: Scn, until: Scn, plan: MergePlan | None = None,
             split_bytes: int = 0) -> LogTasks:
    """What the tasks of ``read_changes`` run, planned: its specs in the table's latest registered columns."""
    from dagster_databus.log.changelog import ChangeLog

    log = ChangeLog(config.lake, source)
    latest = log.schemas.latest(table)
    if latest is None:
        raise ValueError(f"no schema registered for table {table!r}")
    columns = tuple((c.name, str(c.type)) for c in latest[1].columns)
    tasks = tuple(log_tasks(log, table, since, until, split_bytes))
    return LogTasks(config.lake.spec(), source, table, str(since), str(until), columns, tasks, plan)


@dataclass(frozen=True, slots=True)
class LogTasks:
    """What the tasks of ``read_changes`` run: the specs named by the ids of their input rows, read from the log
    of ``source`` in ``lake`` (a folder, or ``Lake.spec()``: tasks resolve its credentials from their own
    environment) in the table's ``columns`` as planned, even if a capture registers a newer schema meanwhile."""

    lake: str
    source: str
    table: str
    since: str  # exclusive
    until: str  # inclusive
    columns: tuple[tuple[str, str], ...]
    tasks: tuple[dict[str, Any], ...]
    plan: MergePlan | None = None

    def __call__(self, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            for batch in ids:
                for task in batch.column(0).to_pylist():
                    yield from self.task(self.tasks[task])
        except DatabusError as exc:
            raise for_task(exc) from None

    def task(self, spec: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        if self.plan is None:
            yield from self.read(spec)
            return
        # Windows never span segments, and a packed task's segments are read by no other task: its first
        # segment names it.
        origin = (spec["segments"][0]["file"], spec.get("piece", 0))
        yield from self.plan.route(self.read(spec), origin, whole=spec.get("span") is None)

    def read(self, spec: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        from dagster_databus.core.schema import Column, TableSchema
        from dagster_databus.core.scn import Scn
        from dagster_databus.core.types import ColumnType
        from dagster_databus.log.changelog import ChangeLog
        from dagster_databus.log.columns import segment_changes
        from dagster_databus.log.manifest import SegmentInfo
        from dagster_databus.storage.lake import Lake

        log = ChangeLog(Lake.from_spec(self.lake), self.source)
        planned = TableSchema(self.source, self.table,
                              tuple(Column(name, ColumnType.parse(kind)) for name, kind in self.columns), ())
        names = [*(name for name, _ in self.columns), *META_NAMES]
        cut = spec.get("span")
        span = (cut[0], cut[1] if cut[1] is not None else 2**62) if cut else None
        since, until = Scn.parse(self.since), Scn.parse(self.until)
        for segment in spec["segments"]:
            for batch in segment_changes(log, SegmentInfo(**segment), planned, since, until, byte_range=span):
                yield batch.select(names)
