"""The spark engine's merge: changes applied to a Delta table by rewriting only the data files that hold their
keys (copy-on-write), by Spark tasks, and committed by the driver in one delta-rs transaction.

A rewrite is described by three values: the table and the version it was read at (``RewriteTarget``), the
changes and how they apply (``Changes``: a Spark frame of them routed by a merge plan, ``dataplane.merging``),
and what the commit records (``RewriteCommit``). The snapshot merge, a refresh, a history's merge and
restatement and a logical table's merge are all rewrites (``SparkJobs.rewrite``). One whose changes and files
are within ``merge.in_driver_mib`` runs the same route and apply steps in the driver instead (``in_driver``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.dataplane.commit import (
    change_feed_on,
    commit_merge,
    commit_with_changes,
    location,
    remove_uncommitted,
)
from dagster_databus.dataplane.delta import DeltaFolder, MergeCounts
from dagster_databus.dataplane.files import TableFiles, TaskReport, run_prefix
from dagster_databus.dataplane.results import FileCounts
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.faults import task_fault
from dagster_databus.storage.durable import crash_point, disk_errors

if TYPE_CHECKING:
    from deltalake import DeltaTable, Transaction
    from pyspark.sql import DataFrame

    from dagster_databus.config import MergeConfig
    from dagster_databus.core.progress import Progress
    from dagster_databus.dataplane.merging import MergePlan
    from dagster_databus.spark.runtime import SparkRuntime

APPLIED = "kind string, path string, size long, rows long, stats string"  # what the apply tasks yield


@dataclass(frozen=True, slots=True)
class RewriteTarget:
    """The table changes are applied to, at the version ``table`` was read (the commit is made against it)."""

    folder: DeltaFolder
    table: DeltaTable
    schema: pa.Schema  # the table's columns, the merge's meta columns included
    key: tuple[str, ...]  # what a change matches a row on
    what: str  # how progress and errors name it


@dataclass(frozen=True, slots=True)
class Changes:
    """The changes to apply and how: ``routed_by(plan)`` is the Spark frame of them (in ``schema``) reduced and
    routed by ``plan.route`` to the files that may hold their keys."""

    schema: pa.Schema
    routed_by: Callable[[MergePlan], DataFrame]
    applied: int = 0  # changes at or below this SCN are dropped
    part_column: str | None = None  # a logical table's: changes match rows on (part, key)
    reads: bool = False  # a source read again (refresh): a row replaces one of the same or an older SCN
    history: tuple[str, ...] | None = None  # folded into a history table, whose versions these columns end
    soft: bool = False  # deletes mark rows deleted rather than drop them
    # The same routed batches made in this process (None: only tasks can read them), and the bytes that reads.
    in_driver: Callable[[MergePlan], Iterator[pa.RecordBatch]] | None = None
    read_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RewriteCommit:
    """What the commit records: transaction ids and metadata; fault tests stop at ``<crash>_commit(ted)``."""

    txns: Sequence[Transaction]
    metadata: Mapping[str, str]
    crash: str = "delta"


@dataclass(frozen=True, slots=True)
class Rewritten:
    report: TaskReport
    read: Mapping[str, Mapping[str, int]]  # events read, by part ("" when the rows have no part) and operation
    counts: MergeCounts
    files: FileCounts
    where: str  # "in Spark", or "in this process" (``in_driver``): what the merge's closing line says

    def events(self, part: str = "") -> dict[str, int]:
        """Events read of ``part``, by operation."""
        return dict(self.read.get(part, {}))


def rewrite(spark: SparkRuntime, merge: MergeConfig, target: RewriteTarget, changes: Changes,
            commit: RewriteCommit, progress: Progress) -> Rewritten:
    """Apply ``changes`` to ``target``: tasks reduce the routed changes per key and rewrite the files that hold
    them, and the driver commits the files against the version the table was read at."""
    from dagster_databus.dataplane.merging import MergePlan, balanced_slots

    folder, table = target.folder, target.table
    files = TableFiles.of(table, target.key, target.schema)
    prefix = run_prefix()
    spill_dir = str(merge.spill_dir) if merge.spill_dir else None

    def planned(parallelism: int, fault: Callable[[str], None] | None = task_fault) -> MergePlan:
        partitions, slots = balanced_slots(files, parallelism)
        return MergePlan(location(folder), target.schema, changes.schema, target.key, changes.applied, files,
                         merge.file_rows, prefix, merge.memory_mb * 2**20, spill_dir, changes.part_column,
                         partitions, slots, changes.reads, changes.history,
                         change_feed_on(table) and changes.history is None, changes.soft, fault)

    committed = False
    report = None
    try:
        plan = planned(1, fault=None)  # the fault seam is in Spark's tasks
        actions = in_driver(plan, changes, merge.in_driver_bytes)
        where = "in this process" if actions is not None else "in Spark"
        if actions is None:
            plan = planned(spark.parallelism())
            with task_errors(), spark.job_progress(progress, f"{target.what}: merging"):
                actions = changes.routed_by(plan).repartition(plan.partitions, "__slot") \
                    .mapInArrow(plan.apply, APPLIED).toArrow()
        report = TaskReport.of(actions)
        removed = {f.path: f for f in files.files}
        crash_point(f"{commit.crash}_commit")
        with disk_errors(f"committing {target.what} to Delta", folder.path):
            if plan.change_feed:
                commit_with_changes(folder, table, report.added, [removed[p] for p in report.removed],
                                    report.changes, commit.txns, dict(commit.metadata))
            else:
                commit_merge(folder, table, target.schema, report.added, [removed[p] for p in report.removed],
                             commit.txns, dict(commit.metadata))
        committed = True
        crash_point(f"{commit.crash}_committed")
    finally:
        remove_uncommitted(folder, prefix, [*report.added, *report.changes] if committed and report is not None
                           else ())
    return Rewritten(report, events_read(report), MergeCounts(report.total("inserted"), report.total("updated"),
                                                              report.total("deleted")),
                     FileCounts(before=len(files.files), read=report.total("files_read"),
                                rewritten=report.total("files_rewritten"), added=len(report.added),
                                bytes_rewritten=report.total("bytes_rewritten"),
                                rows_rewritten=report.total("rows_rewritten")), where)


def in_driver(plan: MergePlan, changes: Changes, budget: int) -> pa.Table | None:
    """The rewrite's task rows, from its route and apply steps run here one after another, when the changes read
    and the files they rewrite come to at most ``budget`` bytes; else None (nothing written), for a Spark job.
    Below that size a job's fixed cost (planning, scheduling, its tasks' Python workers) is more than its work."""
    from dagster_databus.dataplane.files import ACTION_SCHEMA
    from dagster_databus.dataplane.merging import GROUP

    if changes.in_driver is None or changes.read_bytes > budget:
        return None
    routed = list(changes.in_driver(plan))
    groups = {g for batch in routed for g in batch.column(GROUP).to_pylist() if g >= 0}
    rewritten = sum(f.size for f, g in zip(plan.files.files, plan.files.group_of, strict=True) if g in groups)
    if changes.read_bytes + rewritten > budget:
        return None
    return pa.Table.from_batches(list(plan.apply(iter(routed))), ACTION_SCHEMA)


def events_read(report: TaskReport) -> Mapping[str, Mapping[str, int]]:
    """The events the tasks read, summed by part and operation."""
    read: dict[str, dict[str, int]] = {}
    for fact in report.facts:
        for part, ops in fact.get("read", {}).items():
            for op, n in ops.items():
                read.setdefault(part, {})[op] = read.setdefault(part, {}).get(op, 0) + n
    return read
