"""The spark engine's logical tables (``dataplane.logical``): loaded from the parts' physical snapshots by tasks
copying their files with the part's label, and merged from the parts' logs by the snapshot merge's rewrite,
matched on (part, key) so SCNs are only compared within one part's log. With a data shard column, Spark jobs
refuse a NULL shard and a key two parts hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.core.event_columns import CHANGE_META
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import OPERATION_KEY, commit_files, location
from dagster_databus.dataplane.results import LogicalLoaded, LogicalMerged
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.frames import reduce_latest
from dagster_databus.spark.jobs import ENGINE, FileCopy, SparkJobs, paths, with_columns
from dagster_databus.spark.logread import read_changes
from dagster_databus.spark.rewrite import Changes, RewriteCommit, RewriteTarget

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_databus.core.progress import Progress
    from dagster_databus.dataplane.files import DataFile
    from dagster_databus.dataplane.logical import LogicalLayout, LogicalPart, LogicalSnapshot
    from dagster_databus.dataplane.merging import MergePlan


class LogicalTables(SparkJobs):
    def load_logical(self, target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart],
                     progress: Progress) -> LogicalLoaded:
        """Overwrite the logical table with every part's physical snapshot (each at its own applied SCN):
        one task per physical data file copies it, with the part's label, into the logical table."""
        from deltalake import CommitProperties, Transaction

        from dagster_databus.dataplane.logical import LAYOUT_KEY, PART_COLUMN
        from dagster_databus.dataplane.reads import FileRead

        reads, txns, rows = [], [], {}
        for part in parts:
            table = part.snap.delta()  # one version: its files, applied SCN and bootstrap SCN together
            applied = table.transaction_version(part.snap.app_id)
            assert applied is not None  # sync_logical loads only parts whose snapshot was bootstrapped
            absorbed = part.snap.absorbed_in(table)
            actions = pa.table(table.get_add_actions(flatten=True))
            constants = {PART_COLUMN: part.label, **({layout.shard_column: part.label} if layout.shard_from_label
                                                    else {})}
            reads += [FileRead(location(part.snap), path, constants, live=True) for path in actions["path"].to_pylist()]
            rows[part.label] = sum(n or 0 for n in actions["num_records"].to_pylist())
            txns += [Transaction(app_id=target.app_id(part.label), version=applied),
                     Transaction(app_id=target.loaded_from_app_id(part.label), version=absorbed.value)]
        schema = layout.arrow()
        if not layout.shard_from_label:
            keys = pa.schema([schema.field(n) for n in [*layout.key, PART_COLUMN]])
            self._refuse_collisions(self.file_frame(reads, keys), layout, target)
        props = CommitProperties(app_transactions=txns, custom_metadata={
            LAYOUT_KEY: layout.document(), OPERATION_KEY: "load", "engine": ENGINE})
        description = f"databus logical table {target.name}"

        def commit(added: Sequence[DataFile]) -> None:
            commit_files(target, schema, added, props, description)

        self.copy_files(FileCopy(target, reads, schema, commit, f"logical {target.name}", "loading", "logical"),
                        progress)
        return LogicalLoaded(rows)

    def merge_logical(self, target: LogicalSnapshot, layout: LogicalLayout,
                      ranges: Sequence[tuple[LogicalPart, Scn, Scn]], progress: Progress) -> LogicalMerged:
        """Merge each part's log range (applied, until] in one commit that moves every part's SCN: the
        parts' changes are read by Spark tasks, matched on (part, key), so SCNs are only compared within
        one part's own log."""
        from deltalake import Transaction

        from dagster_databus.dataplane.logical import LAYOUT_KEY, PART_COLUMN
        from dagster_databus.dataplane.merging import ROUTED_SPARK

        F = self.spark.functions()
        schema = layout.arrow()
        log_meta = [name for name, _ in CHANGE_META]
        frames = []
        for part, since, until in ranges:
            events = read_changes(self.spark, self.config, part.config.source, part.config.table, since, until)
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
            return events.mapInArrow(plan.route, ROUTED_SPARK)

        done = self.rewrite(
            RewriteTarget(target, table, schema, tuple(layout.match), f"logical table {target.name}"),
            Changes(to_arrow_schema(events.schema), routed_by, part_column=PART_COLUMN),
            RewriteCommit([Transaction(app_id=target.app_id(part.label), version=until.value)
                           for part, _, until in ranges],
                          {LAYOUT_KEY: layout.document(), OPERATION_KEY: "merge", "engine": ENGINE}),
            progress)
        return LogicalMerged(done.read, done.counts)

    def _refuse_collisions(self, rows: DataFrame, layout: LogicalLayout, target: LogicalSnapshot,
                           reduce_first: bool = False) -> None:
        """With a data shard column: no NULL shard, no logical key from two parts, and (for changes) no key
        arriving from one part while the table holds it from another; raises ``ShardCollisionError``."""
        from dagster_databus.dataplane.logical import PART_COLUMN, collision, key_text, null_shard
        from dagster_databus.dataplane.reads import FileRead

        F = self.spark.functions()
        if reduce_first:
            rows = reduce_latest(self.spark, rows, layout.match)
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
            held = (self.file_frame([FileRead(location(target), p) for p in paths(table)], keys)
                    .withColumnRenamed(PART_COLUMN, "__held"))
            clashes = (keyed.join(held, on=list(layout.key)).where(F.col(PART_COLUMN) != F.col("__held"))
                       .limit(3).collect())
            if clashes:
                raise collision(layout, [(key_text(layout, c.asDict()), [c[PART_COLUMN], c["__held"]])
                                         for c in clashes], held=True)


def to_arrow_schema(schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema as convert

    return convert(schema)
