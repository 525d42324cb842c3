"""The spark engine: Spark tasks read, reduce and write the data files; the driver commits them.

Bootstrap: the source's table is cut into primary-key ranges (``CaptureSource.ranges``); one task per
range reads it on its own connection and writes its rows as Parquet straight into the snapshot's
folder, clustered by key (``spark.tables``). Merge: tasks read the change log segment by segment,
route every change to the group of files that may hold its key, and rewrite only the files that do
(``spark.merge_tasks``). Either way only file descriptions reach the driver, which commits them in
one delta-rs transaction with the transaction ids (``snapshot.commit``); the delta-spark jars are
never needed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.core.progress import Progress
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.log.columns import change_schema
from dagster_databus.log.durable import crash_point, disk_errors
from dagster_databus.snapshot.commit import (
    OPERATION_KEY,
    commit_bootstrap,
    commit_merge,
    location,
    remove_uncommitted,
)
from dagster_databus.snapshot.delta import DeltaSnapshot, MergeCounts
from dagster_databus.snapshot.engines import Bootstrapped, Merged, SparkProvider
from dagster_databus.snapshot.files import TableFiles, TaskReport, run_prefix
from dagster_databus.snapshot.reduce import ChangeStats
from dagster_databus.spark.session import job_progress, read_changes, task_errors
from dagster_databus.spark.wire import pack

if TYPE_CHECKING:
    from dagster_databus.config import DatabusConfig
    from dagster_databus.log.store import ChangeLog
    from dagster_databus.sources.base import CaptureSource


class SparkEngine:
    name = "spark"

    def __init__(self, config: DatabusConfig, spark: SparkProvider) -> None:
        self.config, self.spark = config, spark

    def bootstrap(self, snap: DeltaSnapshot, source: CaptureSource, table: str, progress: Progress) -> Bootstrapped:
        from dagster_databus.spark.tables import FilesSink, TableFilesSource

        rows_per_range = getattr(source.config, "bootstrap_chunk_rows", self.config.merge.file_rows)
        read = source.ranges(table, rows_per_range)
        progress(f"{table}: bootstrapping in {len(read.ranges)} Spark task(s), one per key range"
                 + (f", all as of SCN {read.scn}" if read.scn is not None else ""))
        spark = self.spark()
        spark.dataSource.register(TableFilesSource)
        prefix = run_prefix()
        sink = FilesSink(location(snap), read.schema.arrow(with_meta=True), self.config.merge.file_rows, prefix,
                         int(time.time() * 1000))
        committed = False
        report = None
        try:
            with task_errors(), job_progress(spark, progress, f"{table}: bootstrapping"):
                actions = (spark.read.format("databus_table_files").option("read", pack(read))
                           .option("sink", pack(sink)).load().toArrow())
            report = TaskReport.of(actions)
            scn = read.scn if read.scn is not None else Scn(min(int(f["scn"]) for f in report.facts))
            crash_point("delta_commit")
            with disk_errors(f"bootstrapping {snap.source}.{table} into Delta", snap.path):
                commit_bootstrap(snap, sink.schema, report.added, scn, self.name)
            committed = True
            crash_point("delta_committed")
        finally:
            remove_uncommitted(snap, prefix, report.added if committed and report is not None else ())
        rows = report.total("rows")
        progress(f"{table}: bootstrapped {rows:,} rows in {len(report.added)} file(s) at SCN {scn}")
        return Bootstrapped(scn, read.schema, rows, len(report.added))

    def merge(self, snap: DeltaSnapshot, log: ChangeLog, schema: TableSchema, since: Scn, until: Scn,
              progress: Progress) -> Merged | None:
        from deltalake import Transaction

        from dagster_databus.spark.merge_tasks import MergePlan, partitions_for

        table = snap.existing()  # the version this merge reads and commits against
        applied = table.transaction_version(snap.app_id) if table is not None else None
        if table is None or applied is None:
            raise SnapshotMissingError(
                f"snapshot {snap.source}.{snap.table} has not been bootstrapped ({snap.uri})",
                f"materialize the {snap.source}/{snap.table} asset, which bootstraps it first")
        if until.value <= applied:
            return None
        target = schema.arrow(with_meta=True)
        held = {f.name for f in table.schema().fields}
        added = [f for f in target if f.name not in held]
        if added:
            # Columns the source added: their own commit first (existing rows read them as null), so the
            # merge plans and commits against a version that has them.
            from deltalake import Schema as DeltaSchema

            table.alter.add_columns(DeltaSchema.from_arrow(pa.schema(added)).fields)
            progress(f"{schema.table}: added column(s) {', '.join(f.name for f in added)} to the snapshot")
            table = snap.delta()
        files = TableFiles.of(table, schema.primary_key, target)
        prefix = run_prefix()
        plan = MergePlan(location(snap), target, change_schema(schema), schema.primary_key, applied, files,
                         self.config.merge.file_rows, prefix, self.config.merge.memory_mb * 2**20,
                         str(self.config.merge.spill_dir) if self.config.merge.spill_dir else None)
        spark = self.spark()
        events = read_changes(spark, self.config, snap.source, schema.table, Scn(max(since.value, applied)), until)
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        routed = events.mapInArrow(plan.route, StructType([*events.schema.fields, StructField("__group", LongType()),
                                                           StructField("__fact", StringType())]))
        partitions = partitions_for(files.groups, spark.sparkContext.defaultParallelism)
        progress(f"{schema.table}: merging SCN {Scn(max(since.value, applied))}..{until} in Spark: "
                 f"{len(files.files)} data file(s) in {files.groups} key group(s)")
        committed = False
        report = None
        try:
            with task_errors(), job_progress(spark, progress, f"{schema.table}: merging"):
                actions = (routed.repartition(partitions, "__group")
                           .mapInArrow(plan.apply, "kind string, path string, size long, rows long, stats string")
                           .toArrow())
            report = TaskReport.of(actions)
            removed = {f.path: f for f in files.files}
            metadata = {OPERATION_KEY: "merge", "engine": self.name, "databus.scn_range": f"{applied}..{until}"}
            crash_point("delta_commit")
            with disk_errors(f"committing {snap.source}.{snap.table} to Delta", snap.path):
                commit_merge(snap, table, target, report.added, [removed[p] for p in report.removed],
                             [Transaction(app_id=snap.app_id, version=until.value)], metadata)
            committed = True
            crash_point("delta_committed")
        finally:
            remove_uncommitted(snap, prefix, report.added if committed and report is not None else ())
        read_ops: dict[str, int] = {}
        for fact in report.facts:
            for op, n in fact.get("read", {}).items():
                read_ops[op] = read_ops.get(op, 0) + n
        counts = MergeCounts(report.total("inserted"), report.total("updated"), report.total("deleted"))
        stats = ChangeStats(read_ops, report.total("windows"))
        progress(f"{schema.table}: merged {stats.events:,} events in {stats.windows:,} windows: "
                 f"{counts.inserted:,} inserted, {counts.updated:,} updated, {counts.deleted:,} deleted; rewrote "
                 f"{report.total('files_rewritten')} of {len(files.files)} file(s), added {len(report.added)}")
        return Merged(counts, stats, {
            "files_before": len(files.files), "files_read": report.total("files_read"),
            "files_rewritten": report.total("files_rewritten"), "files_added": len(report.added),
            "bytes_rewritten": report.total("bytes_rewritten"), "rows_rewritten": report.total("rows_rewritten")})
