"""The spark engine's history tables (``dataplane.history``): started from a snapshot version by tasks copying its
files as first versions, the log's changes folded in by the snapshot merge's rewrite (``MergePlan.history``),
and a snapshot read again folded in as changes at its SCN (``restate_history``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import OPERATION_KEY, commit_files, location
from dagster_databus.dataplane.merging import count_windows
from dagster_databus.dataplane.reduce import ChangeStats
from dagster_databus.dataplane.results import Merged
from dagster_databus.log.columns import change_schema
from dagster_databus.spark.jobs import ENGINE, FileCopy, SparkJobs, paths, with_columns
from dagster_databus.spark.rewrite import Changes, RewriteCommit, RewriteTarget

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_databus.core.progress import Progress
    from dagster_databus.core.schema import TableSchema
    from dagster_databus.dataplane.delta import DeltaSnapshot, MergeCounts
    from dagster_databus.dataplane.files import DataFile
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.dataplane.merging import MergePlan
    from dagster_databus.log.changelog import ChangeLog


class HistoryTables(SparkJobs):
    def start_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, target: pa.Schema, start: Scn,
                      based: Scn, progress: Progress) -> int:
        """One task per data file of the snapshot's ``version`` writes its rows as the history's first versions;
        one overwrite commit."""
        from deltalake import CommitProperties, Transaction

        from dagster_databus.dataplane.reads import FileRead

        reads = [FileRead(location(snap), path, as_history=True, live=True) for path in paths(snap.delta(version))]
        props = CommitProperties(app_transactions=[Transaction(app_id=hist.app_id, version=start.value),
                                                   Transaction(app_id=hist.start_app_id, version=start.value),
                                                   Transaction(app_id=hist.based_app_id, version=based.value)],
                                 custom_metadata={OPERATION_KEY: "history-start", "engine": ENGINE})

        def commit(added: Sequence[DataFile]) -> None:
            commit_files(hist, target, added, props, f"databus history of {hist.source}.{hist.table}")

        report = self.copy_files(FileCopy(hist, reads, target, commit, f"history {hist.source}.{hist.table}",
                                          "starting", "history"), progress)
        return report.total("rows")

    def merge_history(self, hist: HistoryTable, log: ChangeLog, schema: TableSchema, target: pa.Schema,
                      tracked: Sequence[str], since: Scn, until: Scn, progress: Progress) -> Merged | None:
        """The snapshot merge's tasks, reducing per key and SCN and folding the changes into the files that
        hold the keys' open versions (``MergePlan.history``)."""
        from deltalake import Transaction

        table = hist.existing()
        applied = table.transaction_version(hist.app_id) if table is not None else None
        if table is None or applied is None or until.value <= applied:
            return None
        table = with_columns(hist, table, target, progress)
        since = Scn(max(since.value, applied))
        done = self.rewrite(
            RewriteTarget(hist, table, target, schema.primary_key, f"history {schema.table}"),
            self.log_changes(log, schema, since, until, applied, history=tuple(tracked)),
            RewriteCommit([Transaction(app_id=hist.app_id, version=until.value)],
                          {OPERATION_KEY: "history", "engine": ENGINE, "databus.scn_range": f"{since}..{until}"},
                          crash="history"),
            progress)
        stats = ChangeStats(done.events(), count_windows(list(done.report.facts)))
        progress(f"{schema.table}: history: {done.counts.inserted:,} versions opened, {done.counts.updated:,} "
                 f"ended ({done.counts.deleted:,} by deletes); rewrote {done.files.rewritten} of "
                 f"{done.files.before} file(s), {done.where}")
        return Merged(done.counts, stats, done.files)

    def restate_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, schema: TableSchema,
                        target: pa.Schema, tracked: Sequence[str], scn: Scn, progress: Progress) -> MergeCounts:
        """Tasks read the snapshot's files at ``version`` (a bootstrap at ``scn``) as changes that state each row
        again, with deletes at ``scn`` of the keys the history holds open that the read lacks (an anti-join of
        keys), and route them through the history merge's tasks (``dataplane.history.Restated``)."""
        from deltalake import Transaction

        from dagster_databus.dataplane.history import Restated
        from dagster_databus.dataplane.merging import ROUTED_SPARK
        from dagster_databus.dataplane.reads import FileRead
        from dagster_databus.spark.deltafiles import spark_schema

        key = list(schema.primary_key)
        changes = change_schema(schema)
        rows = self.file_frame([FileRead(location(snap), p, live=True) for p in paths(snap.delta(version))],
                               schema.arrow(with_meta=True))
        table = with_columns(hist, hist.delta(), target, progress)
        heads = pa.schema([target.field(k) for k in [*key, "__end_scn"]])
        held = (self.file_frame([FileRead(location(hist), p) for p in paths(table)], heads)
                .where("`__end_scn` IS NULL").select(*[f"`{k}`" for k in key]))
        gone = held.join(rows.select(*[f"`{k}`" for k in key]), on=key, how="left_anti")
        read_ms = snap.bootstrapped_ms() or int(time.time() * 1000)
        events = (rows.mapInArrow(Restated(changes), spark_schema(changes))
                  .unionByName(gone.mapInArrow(Restated(changes, (scn.value, read_ms)), spark_schema(changes))))
        applied = table.transaction_version(hist.app_id) or 0
        progress(f"{schema.table}: history: restating the read at SCN {scn} in Spark")

        def routed_by(plan: MergePlan) -> DataFrame:
            return events.mapInArrow(plan.route, ROUTED_SPARK)

        done = self.rewrite(
            RewriteTarget(hist, table, target, tuple(key), f"history {schema.table}"),
            Changes(changes, routed_by, history=tuple(tracked)),
            RewriteCommit([Transaction(app_id=hist.app_id, version=max(scn.value, applied)),
                           Transaction(app_id=hist.based_app_id, version=scn.value)],
                          {OPERATION_KEY: "history-restate", "engine": ENGINE}, crash="history"),
            progress)
        return done.counts
