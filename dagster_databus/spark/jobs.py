"""What the spark engine's features (``engines.spark``) share: the config, the runtime their jobs run on, and the
two kinds of job they are built from: files copied by tasks into a table and committed by the driver
(``copy_files``: a compaction, an evolution, a history's start, a logical load), and changes applied by
rewriting the files that hold their keys (``rewrite``, ``spark.rewrite``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.core.pickle_text import pack
from dagster_databus.dataplane.commit import location, remove_uncommitted
from dagster_databus.dataplane.files import DataFile, TaskReport, run_prefix
from dagster_databus.log.columns import change_schema
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.logread import log_read, read_changes
from dagster_databus.spark.rewrite import Changes, RewriteCommit, RewriteTarget, Rewritten, rewrite
from dagster_databus.storage.durable import crash_point, disk_errors

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

    from dagster_databus.config import DatabusConfig
    from dagster_databus.core.progress import Progress
    from dagster_databus.core.schema import TableSchema
    from dagster_databus.core.scn import Scn
    from dagster_databus.dataplane.delta import DeltaFolder
    from dagster_databus.dataplane.merging import MergePlan
    from dagster_databus.dataplane.reads import FileRead
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.spark.runtime import SparkRuntime

# The spark engine's name, and what the commits its tasks' files go into record as their engine (the
# delta-spark engine's too, for what it leaves to those tasks).
ENGINE = "spark"
SPLIT_MIN_BYTES = 4 * 2**20  # smaller pieces of a segment cost more in tasks than they save

# The most ranges one task reads while Spark has more tasks than slots to run them in. Spark's fixed cost per
# task (a Python worker's round trip: 0.05-0.1 s on a local master, more than a third of the time a task reading
# 125,000 rows takes) is paid per task, so a task reads several ranges; a range stays the unit that a bootstrap
# resumes by and a retried task skips. Past this many, more tasks balance a skewed key space better.
RANGES_PER_TASK = 8


def range_tasks(indices: Sequence[int], slots: int) -> list[tuple[int, ...]]:
    """The ranges ``indices`` dealt into Spark tasks: one per slot Spark runs tasks in, or more where a task
    would otherwise read over ``RANGES_PER_TASK`` ranges. Dealt round-robin: neighbouring ranges, which a
    key space's skew makes alike (recent keys with wider rows), go to different tasks."""
    tasks = min(len(indices), max(slots, -(-len(indices) // RANGES_PER_TASK)))
    return [tuple(indices[k::tasks]) for k in range(tasks)]


@dataclass(frozen=True, slots=True)
class FileCopy:
    """Tasks read ``reads`` in ``schema`` and write them into ``folder``; ``commit(files)`` commits the files."""

    folder: DeltaFolder
    reads: Sequence[FileRead]
    schema: pa.Schema
    commit: Callable[[Sequence[DataFile]], None]
    what: str  # how progress and errors name the table ("shop.orders")
    doing: str  # and the job ("compacting")
    crash: str  # fault tests stop at ``<crash>_commit`` and ``<crash>_committed``


@dataclass(frozen=True, slots=True)
class LogRange:
    """A table's changes in a log range, for a rewrite (``Changes``): ``routed_by(plan)`` the frame of Spark tasks
    that read, reduce and route them; ``in_driver(plan)`` the same tasks' batches, run one after another here."""

    spark: SparkRuntime
    config: DatabusConfig
    source: str
    table: str
    since: Scn
    until: Scn
    bytes: int  # the segments' that hold the table

    def routed_by(self, plan: MergePlan) -> DataFrame:
        # Read a segment in pieces of this size, so that even one large segment keeps every core busy.
        split = max(SPLIT_MIN_BYTES, -(-self.bytes // (2 * self.spark.parallelism())))
        return read_changes(self.spark, self.config, self.source, self.table, self.since, self.until, plan=plan,
                            split_bytes=split)

    def in_driver(self, plan: MergePlan) -> Iterator[pa.RecordBatch]:
        read = log_read(self.config, self.source, self.table, self.since, self.until, plan, SPLIT_MIN_BYTES)
        for spec in read.tasks:
            yield from read.task(spec)


class SparkJobs:
    """The base of the spark engine's features: its config and runtime, and the jobs they share."""

    name = ENGINE

    def __init__(self, config: DatabusConfig, spark: SparkRuntime) -> None:
        self.config, self.spark = config, spark
        self.tables_at_once = config.merge.parallel_tables

    def copy_files(self, copy: FileCopy, progress: Progress) -> TaskReport:
        """One task per read (``spark.deltafiles``) writes its rows into the folder; then the commit."""
        from dagster_databus.dataplane.reads import FilesSink

        prefix = run_prefix()
        sink = FilesSink(location(copy.folder), copy.schema, self.config.merge.file_rows, prefix, 0)
        committed = False
        report = None
        try:
            with task_errors(), self.spark.job_progress(progress, f"{copy.what}: {copy.doing}"):
                report = TaskReport.of(self.spark.frame("databus_delta_files", files=pack(copy.reads),
                                                        schema=pack(copy.schema), sink=pack(sink)).toArrow())
            copy.folder.prepare()
            crash_point(f"{copy.crash}_commit")
            with disk_errors(f"{copy.doing} {copy.what} in Delta", copy.folder.path):
                copy.commit(report.added)
            committed = True
            crash_point(f"{copy.crash}_committed")
        finally:
            remove_uncommitted(copy.folder, prefix, report.added if committed and report is not None else ())
        return report

    def rewrite(self, target: RewriteTarget, changes: Changes, commit: RewriteCommit,
                progress: Progress) -> Rewritten:
        """``changes`` applied to ``target`` by rewriting the files that hold their keys (``spark.rewrite``)."""
        return rewrite(self.spark, self.config.merge, target, changes, commit, progress)

    def range_tasks(self, indices: Sequence[int]) -> list[tuple[int, ...]]:
        """The key ranges ``indices`` dealt into tasks for the slots this runtime's Spark has (``range_tasks``)."""
        return range_tasks(indices, self.spark.parallelism())

    def log_changes(self, log: ChangeLog, schema: TableSchema, since: Scn, until: Scn, applied: int,
                    **how: Any) -> Changes:
        """``schema``'s table's changes in (since, until], over ``applied``, for a rewrite (``how``: the rest of
        ``Changes``): reduced and routed by Spark tasks, or in this process."""
        logged = LogRange(self.spark, self.config, log.source, schema.table, since, until,
                          log.manifest().table_bytes(schema.table, since, until))
        return Changes(change_schema(schema), logged.routed_by, applied, in_driver=logged.in_driver,
                       read_bytes=logged.bytes, **how)

    def file_frame(self, reads: Sequence[FileRead], schema: pa.Schema) -> DataFrame:
        """The rows of ``reads`` in ``schema``'s columns, one task per file (``spark.deltafiles``)."""
        return self.spark.frame("databus_delta_files", files=pack(reads), schema=pack(schema))


def paths(table: DeltaTable) -> list[str]:
    """The data files one version of a table names, as its log spells them."""
    return [str(p) for p in pa.table(table.get_add_actions(flatten=True))["path"].to_pylist()]


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
