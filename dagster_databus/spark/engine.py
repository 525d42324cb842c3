"""The spark engine: Spark tasks read, reduce and write the data files; the driver commits them.

Bootstrap: the source's table is cut into primary-key ranges (``CaptureSource.ranges``); one task per
range reads it on its own connection and writes its rows as Parquet straight into the snapshot's
folder, clustered by key (``spark.tables``). Merge: tasks read the change log segment by segment,
route every change to the group of files that may hold its key, and rewrite only the files that do
(``dataplane.merging``). Either way only file descriptions reach the driver, which commits them in
one delta-rs transaction with the transaction ids (``dataplane.commit``); the delta-spark jars are
never needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.core.event_columns import CHANGE_META
from dagster_databus.core.progress import Progress
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.wire import pack
from dagster_databus.dataplane.commit import (
    OPERATION_KEY,
    change_feed_on,
    commit_bootstrap,
    commit_files,
    commit_merge,
    commit_with_changes,
    location,
    remove_uncommitted,
)
from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot, MergeCounts
from dagster_databus.dataplane.engine import (
    Bootstrapped,
    Merged,
    Refreshed,
    range_rows,
    soft_deletes,
)
from dagster_databus.dataplane.files import DataFile, TableFiles, TaskReport, run_prefix
from dagster_databus.dataplane.merging import count_windows
from dagster_databus.dataplane.reduce import ChangeStats
from dagster_databus.log.columns import change_schema
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.faults import task_fault
from dagster_databus.spark.frames import read_changes, reduce_latest
from dagster_databus.storage.durable import crash_point, disk_errors

if TYPE_CHECKING:
    from deltalake import DeltaTable, Transaction
    from pyspark.sql import DataFrame

    from dagster_databus.config import DatabusConfig
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.dataplane.logical import LogicalLayout, LogicalPart, LogicalSnapshot
    from dagster_databus.dataplane.merging import MergePlan
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import CaptureSource, RowSelection
    from dagster_databus.spark.runtime import SparkRuntime


SPLIT_MIN_BYTES = 4 * 2**20  # smaller pieces of a segment cost more in tasks than they save


class SparkEngine:
    name = "spark"

    def __init__(self, config: DatabusConfig, spark: SparkRuntime) -> None:
        self.config, self.spark = config, spark
        self.tables_at_once = config.merge.parallel_tables

    def bootstrap(self, snap: DeltaSnapshot, source: CaptureSource, table: str, progress: Progress) -> Bootstrapped:
        from dataclasses import replace

        from dagster_databus.dataplane.reads import FilesSink
        from dagster_databus.dataplane.resume import BootstrapProgress
        from dagster_databus.log.changelog import ChangeLog

        read = source.ranges(table, range_rows(self.config, source))
        store = BootstrapProgress(self.config.lake, snap.source, table)
        manifest = ChangeLog(self.config.lake, snap.source).manifest()
        plan, done = store.plan(), {}
        if (plan is not None and plan.fingerprint == read.schema.fingerprint() and plan.epoch == manifest.epoch
                and not _committed(snap, plan.prefix)):
            done = store.done()
            if any(int(f["scn"]) < manifest.start_scn.value for r in done.values() for f in r.facts):
                plan, done = None, {}  # the change log no longer reaches back to those reads: start over
        else:
            plan = None
        if plan is None:
            plan = store.start(read.ranges, read.schema.fingerprint(), manifest.epoch)
        else:
            read = replace(read, ranges=plan.ranges)
        remaining = [i for i in range(len(read.ranges)) if i not in done]
        progress(f"{table}: bootstrapping in {len(read.ranges)} key range(s), one Spark task each"
                 + (f", all as of SCN {read.scn}" if read.scn is not None else "")
                 + (f"; resuming: {len(done)} already read" if done else ""))
        spark = self.spark
        sink = FilesSink(location(snap), read.schema.arrow(with_meta=True), self.config.merge.file_rows, plan.prefix,
                         int(time.time() * 1000), store.spec)
        committed = False
        report = None
        try:
            if remaining:
                with task_errors(), spark.job_progress(progress, f"{table}: bootstrapping"):
                    spark.frame("databus_table_files", read=pack(read), sink=pack(sink), only=pack(remaining)).toArrow()
            # The ranges' own records are the bootstrap's account, this run's and any earlier one's alike.
            done = store.done()
            missing = [i for i in range(len(read.ranges)) if i not in done]
            if missing:
                raise RuntimeError(f"bootstrap of {snap.source}.{table}: key range(s) {missing} finished without "
                                   "recording their files")
            report = TaskReport(tuple(f for i in sorted(done) for f in done[i].added), (),
                                tuple(f for i in sorted(done) for f in done[i].facts))
            scn = Scn(min(int(f["scn"]) for f in report.facts))
            crash_point("delta_commit")
            with disk_errors(f"bootstrapping {snap.source}.{table} into Delta", snap.path):
                commit_bootstrap(snap, sink.schema, report.added, scn, self.name)
            committed = True
            crash_point("delta_committed")
            starts = store.starts()
            store.clear()
        finally:
            # A failed run keeps the files its finished ranges recorded: the next run resumes with them.
            keep = report.added if committed and report is not None else [
                f for r in store.done().values() for f in r.added]
            remove_uncommitted(snap, plan.prefix, keep)
        rows = report.total("rows")
        progress(f"{table}: bootstrapped {rows:,} rows in {len(report.added)} file(s) at SCN {scn}")
        ranges = {"ranges": len(read.ranges), "resumed": len(read.ranges) - len(remaining),
                  "most_reads": max(starts.values(), default=0)}
        return Bootstrapped(scn, read.schema, rows, len(report.added), ranges)

    def refresh(self, snap: DeltaSnapshot, source: CaptureSource, table: str, rows: RowSelection,
                progress: Progress) -> Refreshed:
        """One task per key range reads it, turns it into changes and routes them to the files that may hold
        their keys; the merge's apply tasks rewrite those files (``_rewrite``)."""
        from dagster_databus.dataplane.refresh import RangeChanges, finds_deletes

        current, _ = snap.bootstrapped()
        read = source.ranges(table, range_rows(self.config, source), rows)
        schema = read.schema
        target = schema.arrow(with_meta=True)
        current = with_columns(snap, current, target, progress)
        deletes = finds_deletes(schema, rows)
        changes = RangeChanges(change_schema(schema), target, schema.primary_key, deletes)
        progress(f"{table}: reading {rows.describe()} again in {len(read.ranges)} key range(s), one Spark task each"
                 + ("" if deletes else "; deletes are not looked for (a filter, or keys the lake orders otherwise)"))
        spark = self.spark
        done = self._rewrite(snap, current, target, schema.primary_key, changes.changes,
                             lambda plan: (spark.session.read.format("databus_table_refresh").option("read", pack(read))
                                           .option("changes", pack(changes)).option("route", pack(plan)).load()),
                             0, [], {OPERATION_KEY: "refresh", "engine": self.name, "databus.rows": rows.describe()},
                             table, progress, reads=True, soft=soft_deletes(self.config, snap))
        read_ops = done.read.get("", {})
        result = Refreshed(read_ops.get("r", 0), read_ops.get("d", 0), deletes, len(read.ranges), done.counts,
                           done.files)
        progress(f"{table}: read {result.rows_read:,} rows again ({result.deletes_found:,} keys gone at the source): "
                 f"{done.counts.inserted:,} inserted, {done.counts.updated:,} updated, {done.counts.deleted:,} deleted")
        return result

    def compact(self, snap: DeltaFolder, table: DeltaTable, key: Sequence[str], groups: Sequence[Sequence[Any]],
                progress: Progress) -> int:
        """One task per group reads its files in key order and writes them as files of ``merge.file_rows`` rows;
        the driver swaps them in one commit that changes no data."""
        from dagster_databus.dataplane.reads import FileRead

        schema = pa.schema(table.schema().to_arrow())
        reads = [FileRead(location(snap), g[0].path, then=tuple(f.path for f in g[1:]), order_by=tuple(key))
                 for g in groups]
        removed = [f for g in groups for f in g]
        report = self._copy_files(
            snap, reads, schema,
            lambda added: commit_merge(snap, table, schema, added, removed, [],
                                       {OPERATION_KEY: "compact", "engine": self.name}, data_change=False),
            snap.key, "compacting", "compact", progress)
        return len(report.added)

    def evolve(self, snap: DeltaSnapshot, schema: TableSchema, scn: Scn, progress: Progress,
               fills: Mapping[str, pa.Scalar] | None = None) -> int:
        """One task per data file reads it in the new columns and writes it back; one overwrite commit."""
        from deltalake import CommitProperties, Transaction

        from dagster_databus.dataplane.reads import FileRead

        table = snap.delta()
        paths = _paths(table)
        props = CommitProperties(app_transactions=[Transaction(app_id=snap.evolved_app_id, version=scn.value)],
                                 custom_metadata={OPERATION_KEY: "evolve", "engine": self.name,
                                                  "databus.schema_change_scn": str(scn)})
        target = schema.arrow(with_meta=True)
        report = self._copy_files(
            snap, [FileRead(location(snap), path, fills=dict(fills or {})) for path in paths], target,
            lambda added: commit_files(snap, target, added, props, f"databus snapshot of {snap.source}.{schema.table}"),
            f"{snap.source}.{schema.table}", "evolving", "delta", progress)
        return report.total("rows")

    def _copy_files(self, folder: DeltaFolder, reads: Sequence[Any], schema: pa.Schema,
                    commit: Callable[[Sequence[DataFile]], None], what: str, doing: str, crash: str,
                    progress: Progress) -> TaskReport:
        """Tasks read ``reads`` (``spark.deltafiles.FileRead``) in ``schema`` and write them into ``folder``;
        ``commit(files)`` then commits the files written (fault tests stop at ``<crash>_commit(ted)``)."""
        from dagster_databus.dataplane.reads import FilesSink

        spark = self.spark
        prefix = run_prefix()
        sink = FilesSink(location(folder), schema, self.config.merge.file_rows, prefix, 0)
        committed = False
        report = None
        try:
            with task_errors(), spark.job_progress(progress, f"{what}: {doing}"):
                report = TaskReport.of(spark.session.read.format("databus_delta_files").option("files", pack(reads))
                                       .option("schema", pack(schema)).option("sink", pack(sink)).load().toArrow())
            folder.prepare()
            crash_point(f"{crash}_commit")
            with disk_errors(f"{doing} {what} in Delta", folder.path):
                commit(report.added)
            committed = True
            crash_point(f"{crash}_committed")
        finally:
            remove_uncommitted(folder, prefix, report.added if committed and report is not None else ())
        return report

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
        progress(f"{schema.table}: merging SCN {since}..{until} in Spark")
        spark = self.spark
        done = self._rewrite(snap, table, target, schema.primary_key, change_schema(schema),
                             self._log_routed(spark, log, schema.table, since, until), applied,
                             [Transaction(app_id=snap.app_id, version=until.value)],
                             {OPERATION_KEY: "merge", "engine": self.name, "databus.scn_range": f"{since}..{until}"},
                             schema.table, progress, soft=soft_deletes(self.config, snap))
        stats = ChangeStats(done.read.get("", {}), count_windows(list(done.report.facts)))
        progress(f"{schema.table}: merged {stats.events:,} events in {stats.windows:,} windows: "
                 f"{done.counts.inserted:,} inserted, {done.counts.updated:,} updated, {done.counts.deleted:,} "
                 f"deleted; rewrote {done.files['files_rewritten']} of {done.files['files_before']} file(s), added "
                 f"{done.files['files_added']}")
        return Merged(done.counts, stats, done.files)

    def _rewrite(self, folder: DeltaFolder, table: DeltaTable, target: pa.Schema, key: Sequence[str],
                 changes: pa.Schema, routed_by: Callable[[MergePlan], DataFrame], applied: int,
                 txns: Sequence[Transaction], metadata: dict[str, str], what: str, progress: Progress,
                 part_column: str | None = None, reads: bool = False,
                 history: tuple[str, ...] | None = None, crash: str = "delta", soft: bool = False) -> Rewritten:
        """Apply changes to ``folder`` at the version ``table`` was read: ``routed_by(plan)`` is the Spark
        frame of the changes reduced and routed by ``plan.route`` (per log segment) to the files that may
        hold their keys; tasks then reduce them per ``key`` and rewrite the files that do, and the driver
        commits the files with ``txns`` against that version."""
        from dagster_databus.dataplane.merging import MergePlan, balanced_slots

        files = TableFiles.of(table, key, target)
        prefix = run_prefix()
        merge = self.config.merge
        spark = self.spark
        partitions, slots = balanced_slots(files, spark.parallelism())
        plan = MergePlan(location(folder), target, changes, tuple(key), applied, files, merge.file_rows, prefix,
                         merge.memory_mb * 2**20, str(merge.spill_dir) if merge.spill_dir else None, part_column,
                         partitions, slots, reads, history, change_feed_on(table) and history is None, soft,
                         task_fault)
        routed = routed_by(plan)
        committed = False
        report = None
        try:
            with task_errors(), spark.job_progress(progress, f"{what}: merging"):
                actions = (routed.repartition(partitions, "__slot")
                           .mapInArrow(plan.apply, "kind string, path string, size long, rows long, stats string")
                           .toArrow())
            report = TaskReport.of(actions)
            removed = {f.path: f for f in files.files}
            crash_point(f"{crash}_commit")
            with disk_errors(f"committing {what} to Delta", folder.path):
                if plan.change_feed:
                    commit_with_changes(folder, table, report.added, [removed[p] for p in report.removed],
                                        report.changes, txns, metadata)
                else:
                    commit_merge(folder, table, target, report.added, [removed[p] for p in report.removed], txns,
                                 metadata)
            committed = True
            crash_point(f"{crash}_committed")
        finally:
            remove_uncommitted(folder, prefix, [*report.added, *report.changes] if committed and report is not None
                               else ())
        read: dict[str, dict[str, int]] = {}
        for fact in report.facts:
            for part, ops in fact.get("read", {}).items():
                for op, n in ops.items():
                    read.setdefault(part, {})[op] = read.setdefault(part, {}).get(op, 0) + n
        return Rewritten(report, read, MergeCounts(report.total("inserted"), report.total("updated"),
                                                   report.total("deleted")), {
            "files_before": len(files.files), "files_read": report.total("files_read"),
            "files_rewritten": report.total("files_rewritten"), "files_added": len(report.added),
            "bytes_rewritten": report.total("bytes_rewritten"), "rows_rewritten": report.total("rows_rewritten")})

    def start_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, target: pa.Schema, start: Scn,
                      based: Scn, progress: Progress) -> int:
        """One task per data file of the snapshot's ``version`` writes its rows as the history's first versions;
        one overwrite commit."""
        from deltalake import CommitProperties, Transaction

        from dagster_databus.dataplane.reads import FileRead

        reads = [FileRead(location(snap), path, as_history=True, live=True) for path in _paths(snap.delta(version))]
        props = CommitProperties(app_transactions=[Transaction(app_id=hist.app_id, version=start.value),
                                                   Transaction(app_id=hist.start_app_id, version=start.value),
                                                   Transaction(app_id=hist.based_app_id, version=based.value)],
                                 custom_metadata={OPERATION_KEY: "history-start", "engine": self.name})
        report = self._copy_files(
            hist, reads, target,
            lambda added: commit_files(hist, target, added, props, f"databus history of {hist.source}.{hist.table}"),
            f"history {hist.source}.{hist.table}", "starting", "history", progress)
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
        spark = self.spark
        done = self._rewrite(hist, table, target, schema.primary_key, change_schema(schema),
                             self._log_routed(spark, log, schema.table, since, until), applied,
                             [Transaction(app_id=hist.app_id, version=until.value)],
                             {OPERATION_KEY: "history", "engine": self.name, "databus.scn_range": f"{since}..{until}"},
                             f"history {schema.table}", progress, history=tuple(tracked), crash="history")
        stats = ChangeStats(done.read.get("", {}), count_windows(list(done.report.facts)))
        progress(f"{schema.table}: history: {done.counts.inserted:,} versions opened, {done.counts.updated:,} "
                 f"ended ({done.counts.deleted:,} by deletes); rewrote {done.files['files_rewritten']} of "
                 f"{done.files['files_before']} file(s)")
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

        spark = self.spark
        key = list(schema.primary_key)
        changes = change_schema(schema)
        read = snap.delta(version)
        rows = (spark.session.read.format("databus_delta_files")
                .option("files", pack([FileRead(location(snap), p, live=True) for p in _paths(read)]))
                .option("schema", pack(schema.arrow(with_meta=True))).load())
        table = with_columns(hist, hist.delta(), target, progress)
        heads = pa.schema([target.field(k) for k in [*key, "__end_scn"]])
        held = (spark.session.read.format("databus_delta_files")
                .option("files", pack([FileRead(location(hist), p) for p in _paths(table)]))
                .option("schema", pack(heads)).load().where("`__end_scn` IS NULL").select(*[f"`{k}`" for k in key]))
        gone = held.join(rows.select(*[f"`{k}`" for k in key]), on=key, how="left_anti")
        read_ms = snap.bootstrapped_ms() or int(time.time() * 1000)
        events = (rows.mapInArrow(Restated(changes), spark_schema(changes))
                  .unionByName(gone.mapInArrow(Restated(changes, (scn.value, read_ms)), spark_schema(changes))))
        applied = table.transaction_version(hist.app_id) or 0
        progress(f"{schema.table}: history: restating the read at SCN {scn} in Spark")
        txns = [Transaction(app_id=hist.app_id, version=max(scn.value, applied)),
                Transaction(app_id=hist.based_app_id, version=scn.value)]
        done = self._rewrite(hist, table, target, key, changes,
                             lambda plan: events.mapInArrow(plan.route, ROUTED_SPARK), 0, txns,
                             {OPERATION_KEY: "history-restate", "engine": self.name}, f"history {schema.table}",
                             progress, history=tuple(tracked), crash="history")
        return done.counts

    def _log_routed(self, spark: SparkRuntime, log: ChangeLog, table: str, since: Scn, until: Scn
                    ) -> Callable[[MergePlan], DataFrame]:
        """The frame of ``table``'s changes in (since, until], reduced and routed by a merge plan, for ``_rewrite``."""
        split = self._split_bytes(spark, log, since, until)
        return lambda plan: read_changes(spark, self.config, log.source, table, since, until, route=pack(plan),
                                         split_bytes=split)

    @staticmethod
    def _split_bytes(spark: SparkRuntime, log: ChangeLog, since: Scn, until: Scn) -> int:
        """Read a segment in pieces of this size, so that even one large segment keeps every core busy."""
        total = sum(s.bytes for s in log.manifest().between(since, until))
        return max(SPLIT_MIN_BYTES, -(-total // (2 * spark.parallelism())))

    # -- logical tables ----------------------------------------------------------------------------

    def load_logical(self, target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart],
                     progress: Progress) -> dict[str, int]:
        """Overwrite the logical table with every part's physical snapshot (each at its own applied SCN):
        one task per physical data file copies it, with the part's label, into the logical table."""
        from deltalake import CommitProperties, Transaction

        from dagster_databus.dataplane.logical import LAYOUT_KEY, PART_COLUMN
        from dagster_databus.dataplane.reads import FileRead

        reads, txns, rows = [], [], {}
        for part in parts:
            table = part.snap.delta()  # one version: its files, applied SCN and bootstrap SCN together
            applied = table.transaction_version(part.snap.app_id)
            absorbed = part.snap.absorbed_in(table)
            actions = pa.table(table.get_add_actions(flatten=True))
            constants = {PART_COLUMN: part.label, **({layout.shard_column: part.label} if layout.shard_from_label
                                                    else {})}
            reads += [FileRead(location(part.snap), path, constants, live=True) for path in actions["path"].to_pylist()]
            rows[part.label] = sum(n or 0 for n in actions["num_records"].to_pylist())
            txns += [Transaction(app_id=target.app_id(part.label), version=applied),
                     Transaction(app_id=target.loaded_from_app_id(part.label), version=absorbed.value)]
        spark = self.spark
        schema = layout.arrow()
        if not layout.shard_from_label:
            keys = pa.schema([schema.field(n) for n in [*layout.key, PART_COLUMN]])
            self._refuse_collisions(spark.session.read.format("databus_delta_files").option("files", pack(reads))
                                    .option("schema", pack(keys)).load(), layout, target)
        props = CommitProperties(app_transactions=txns, custom_metadata={
            LAYOUT_KEY: layout.document(), OPERATION_KEY: "load", "engine": self.name})
        description = f"databus logical table {target.name}"
        self._copy_files(target, reads, schema, lambda added: commit_files(target, schema, added, props, description),
                         f"logical {target.name}", "loading", "logical", progress)
        return rows

    def merge_logical(self, target: LogicalSnapshot, layout: LogicalLayout,
                      ranges: Sequence[tuple[LogicalPart, Scn, Scn]],
                      progress: Progress) -> tuple[dict[str, dict[str, int]], MergeCounts]:
        """Merge each part's log range (applied, until] in one commit that moves every part's SCN: the
        parts' changes are read by Spark tasks, matched on (part, key), so SCNs are only compared within
        one part's own log."""
        from deltalake import Transaction

        from dagster_databus.dataplane.logical import LAYOUT_KEY, PART_COLUMN

        spark = self.spark
        F = spark.functions()
        schema = layout.arrow()
        log_meta = [name for name, _ in CHANGE_META]
        frames = []
        for part, since, until in ranges:
            events = read_changes(spark, self.config, part.config.source, part.config.table, since, until)
            events = events.withColumn(PART_COLUMN, F.lit(part.label))
            if layout.shard_from_label:
                events = events.withColumn(layout.shard_column, F.lit(part.label))
            columns = [f.name for f in schema if f.name not in ("__scn", "__op", "__commit_ts")]
            frames.append(events.select(*[F.col(f"`{c}`") for c in [*columns, *log_meta]]))
        events = frames[0]
        for frame in frames[1:]:
            events = events.unionByName(frame)
        if not layout.shard_from_label:
            self._refuse_collisions(events, layout, target, reduce_first=True)
        table = with_columns(target, target.delta(), schema, progress, {LAYOUT_KEY: layout.document()})
        spans = ", ".join(f"{part.label} {since}..{until}" for part, since, until in ranges)
        progress(f"logical {target.name}: merging in Spark ({spans})")

        def routed_by(plan: MergePlan) -> DataFrame:
            from dagster_databus.dataplane.merging import ROUTED_SPARK

            return events.mapInArrow(plan.route, ROUTED_SPARK)

        done = self._rewrite(target, table, schema, layout.match, to_arrow_schema(events.schema), routed_by, 0,
                             [Transaction(app_id=target.app_id(part.label), version=until.value)
                              for part, _, until in ranges],
                             {LAYOUT_KEY: layout.document(), OPERATION_KEY: "merge", "engine": self.name},
                             f"logical table {target.name}", progress, part_column=PART_COLUMN)
        return done.read, done.counts

    def _refuse_collisions(self, rows: DataFrame, layout: LogicalLayout, target: LogicalSnapshot,
                           reduce_first: bool = False) -> None:
        """With a data shard column: no NULL shard, no logical key from two parts, and (for changes) no key
        arriving from one part while the table holds it from another; raises ``ShardCollisionError``."""
        from dagster_databus.dataplane.logical import PART_COLUMN, collision, null_shard
        from dagster_databus.dataplane.reads import FileRead

        spark = self.spark
        F = spark.functions()
        if reduce_first:
            rows = reduce_latest(spark, rows, layout.match)
        keyed = rows.select(*[F.col(f"`{c}`") for c in [*layout.key, PART_COLUMN]])
        with task_errors():
            nulls = keyed.where(F.col(f"`{layout.shard_column}`").isNull()).limit(1).collect()
            if nulls:
                raise null_shard(layout, nulls[0][PART_COLUMN])
            clashes = (keyed.groupBy(*[F.col(f"`{k}`") for k in layout.key])
                       .agg(F.countDistinct(PART_COLUMN).alias("__n"), F.sort_array(F.collect_set(PART_COLUMN))
                            .alias("__parts")).where("__n > 1").limit(3).collect())
            if clashes:
                raise collision(layout, [(key_text(layout, c.asDict()), list(c["__parts"])) for c in clashes])
            table = target.existing()
            if not reduce_first or table is None:
                return
            schema = layout.arrow()
            keys = pa.schema([schema.field(n) for n in [*layout.key, PART_COLUMN]])
            held = (spark.session.read.format("databus_delta_files")
                    .option("files", pack([FileRead(location(target), p) for p in _paths(table)]))
                    .option("schema", pack(keys)).load().withColumnRenamed(PART_COLUMN, "__held"))
            clashes = (keyed.join(held, on=list(layout.key)).where(F.col(PART_COLUMN) != F.col("__held"))
                       .limit(3).collect())
            if clashes:
                raise collision(layout, [(key_text(layout, c.asDict()), [c[PART_COLUMN], c["__held"]])
                                         for c in clashes], held=True)


@dataclass(frozen=True, slots=True)
class Rewritten:
    report: TaskReport
    read: dict[str, dict[str, int]]  # events read, by part ("" when the rows have no part) and operation
    counts: MergeCounts
    files: dict[str, int]


def _committed(snap: DeltaSnapshot, prefix: str) -> bool:
    """Whether the table names files of this prefix: a bootstrap that committed but was stopped before it
    cleared its progress (merges may since have replaced those files; its records are stale)."""
    table = snap.existing()
    if table is None:
        return False
    return any(p.startswith(prefix) for p in _paths(table))


def _paths(table: DeltaTable) -> list[str]:
    """The data files one version of a table names, as its log spells them."""
    return pa.table(table.get_add_actions(flatten=True))["path"].to_pylist()


def with_columns(folder: DeltaFolder, table: DeltaTable, target: pa.Schema, progress: Progress,
                 metadata: dict[str, str] | None = None) -> DeltaTable:
    """``table`` with the columns of ``target`` it lacks added (their own commit, before the merge plans
    against the table: existing rows read them as null); the version to merge into."""
    held = {f.name for f in table.schema().fields}
    added = [f for f in target if f.name not in held]
    if not added:
        return table
    from deltalake import CommitProperties
    from deltalake import Schema as DeltaSchema

    table.alter.add_columns(DeltaSchema.from_arrow(pa.schema(added)).fields,
                            commit_properties=CommitProperties(custom_metadata=metadata) if metadata else None)
    progress(f"{folder.key}: added column(s) {', '.join(f.name for f in added)} to the table")
    return folder.delta()


def to_arrow_schema(schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema as convert

    return convert(schema)


def key_text(layout: LogicalLayout, row: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={row[k]!r}" for k in layout.key) + ")"
