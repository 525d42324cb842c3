"""The spark engine's changes to a snapshot after its bootstrap: the log's changes merged (``merge``), chosen rows
read again and folded in (``refresh``), both by rewriting the files that hold their keys (``spark.rewrite``);
every row rewritten in new columns (``evolve``) and small files joined (``compact``), both by tasks copying
files (``SparkJobs.copy_files``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.core.pickle_text import pack
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import OPERATION_KEY, commit_files, commit_merge, location
from dagster_databus.dataplane.merging import count_windows
from dagster_databus.dataplane.reduce import ChangeStats
from dagster_databus.dataplane.results import Merged, Refreshed, range_rows, soft_deletes
from dagster_databus.log.columns import change_schema
from dagster_databus.spark.jobs import ENGINE, FileCopy, SparkJobs, paths, with_columns
from dagster_databus.spark.rewrite import Changes, RewriteCommit, RewriteTarget

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

    from dagster_databus.core.progress import Progress
    from dagster_databus.core.schema import TableSchema
    from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot
    from dagster_databus.dataplane.files import DataFile, TableFile
    from dagster_databus.dataplane.merging import MergePlan
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import RowSelection, Source


class SnapshotMerging(SparkJobs):
    def merge(self, snap: DeltaSnapshot, log: ChangeLog, schema: TableSchema, since: Scn, until: Scn,
              progress: Progress) -> Merged | None:
        from deltalake import Transaction

        table, bootstrapped = snap.bootstrapped()  # the version this merge reads and commits against
        applied = bootstrapped.value
        if until.value <= applied:
            return None
        target = schema.arrow(with_meta=True)
        table = with_columns(snap, table, target, progress)
        since = Scn(max(since.value, applied))
        progress(f"{schema.table}: merging SCN {since}..{until}")
        done = self.rewrite(
            RewriteTarget(snap, table, target, schema.primary_key, schema.table),
            self.log_changes(log, schema, since, until, applied, soft=soft_deletes(self.config, snap)),
            RewriteCommit([Transaction(app_id=snap.app_id, version=until.value)],
                          {OPERATION_KEY: "merge", "engine": ENGINE, "databus.scn_range": f"{since}..{until}"}),
            progress)
        stats = ChangeStats(done.events(), count_windows(list(done.report.facts)))
        progress(f"{schema.table}: merged {stats.events:,} events in {stats.windows:,} windows: "
                 f"{done.counts.inserted:,} inserted, {done.counts.updated:,} updated, {done.counts.deleted:,} "
                 f"deleted; rewrote {done.files.rewritten} of {done.files.before} file(s), added "
                 f"{done.files.added}, {done.where}")
        return Merged(done.counts, stats, done.files)

    def refresh(self, snap: DeltaSnapshot, source: Source, table: str, rows: RowSelection,
                progress: Progress) -> Refreshed:
        """One task per key range reads it, turns it into changes and routes them to the files that may hold
        their keys; the merge's apply tasks rewrite those files (``spark.rewrite``)."""
        from dagster_databus.dataplane.refresh import RangeChanges, finds_deletes

        current, _ = snap.bootstrapped()
        read = source.reads.ranges(table, range_rows(self.config, source), rows)
        schema = read.schema
        target = schema.arrow(with_meta=True)
        current = with_columns(snap, current, target, progress)
        deletes = finds_deletes(schema, rows)
        changes = RangeChanges(change_schema(schema), target, schema.primary_key, deletes)
        tasks = self.range_tasks(range(len(read.ranges)))
        progress(f"{table}: reading {rows.describe()} again in {len(read.ranges)} key range(s) by {len(tasks)} Spark "
                 "task(s)"
                 + ("" if deletes else "; deletes are not looked for (a filter, or keys the lake orders otherwise)"))

        def routed_by(plan: MergePlan) -> DataFrame:
            return self.spark.frame("databus_table_refresh", read=pack(read), changes=pack(changes), route=pack(plan),
                                    tasks=pack(tasks))

        done = self.rewrite(
            RewriteTarget(snap, current, target, schema.primary_key, table),
            Changes(changes.changes, routed_by, reads=True, soft=soft_deletes(self.config, snap)),
            RewriteCommit([], {OPERATION_KEY: "refresh", "engine": ENGINE, "databus.rows": rows.describe()}),
            progress)
        read_ops = done.events()
        result = Refreshed(read_ops.get("r", 0), read_ops.get("d", 0), deletes, len(read.ranges), done.counts,
                           done.files)
        progress(f"{table}: read {result.rows_read:,} rows again ({result.deletes_found:,} keys gone at the source): "
                 f"{done.counts.inserted:,} inserted, {done.counts.updated:,} updated, {done.counts.deleted:,} deleted")
        return result

    def compact(self, snap: DeltaFolder, table: DeltaTable, key: Sequence[str], groups: Sequence[Sequence[TableFile]],
                progress: Progress) -> int:
        """One task per group reads its files in key order and writes them as files of ``merge.file_rows`` rows;
        the driver swaps them in one commit that changes no data."""
        from dagster_databus.dataplane.reads import FileRead

        schema = pa.schema(table.schema().to_arrow())
        reads = [FileRead(location(snap), g[0].path, then=tuple(f.path for f in g[1:]), order_by=tuple(key))
                 for g in groups]
        removed = [f for g in groups for f in g]

        def commit(added: Sequence[DataFile]) -> None:
            commit_merge(snap, table, schema, added, removed, [], {OPERATION_KEY: "compact", "engine": ENGINE},
                         data_change=False)

        report = self.copy_files(FileCopy(snap, reads, schema, commit, snap.key, "compacting", "compact"), progress)
        return len(report.added)

    def evolve(self, snap: DeltaSnapshot, schema: TableSchema, scn: Scn, progress: Progress,
               fills: Mapping[str, pa.Scalar] | None = None) -> int:
        """One task per data file reads it in the new columns and writes it back; one overwrite commit."""
        from deltalake import CommitProperties, Transaction

        from dagster_databus.dataplane.reads import FileRead

        table = snap.delta()
        props = CommitProperties(app_transactions=[Transaction(app_id=snap.evolved_app_id, version=scn.value)],
                                 custom_metadata={OPERATION_KEY: "evolve", "engine": ENGINE,
                                                  "databus.schema_change_scn": str(scn)})
        target = schema.arrow(with_meta=True)

        def commit(added: Sequence[DataFile]) -> None:
            commit_files(snap, target, added, props, f"databus snapshot of {snap.source}.{schema.table}")

        reads = [FileRead(location(snap), path, fills=dict(fills or {})) for path in paths(table)]
        report = self.copy_files(FileCopy(snap, reads, target, commit, f"{snap.source}.{schema.table}", "evolving",
                                          "delta"), progress)
        return report.total("rows")
