"""Range reads in Spark tasks, the spark engine's bootstrap: the source's table cut into primary-key ranges
(``Reads.ranges``), Spark's tasks each reading one or more of them (``spark.jobs.range_tasks``), each range on
its own connection, and writing its rows as Parquet straight into the snapshot's folder, clustered by key; the
driver commits the files in one delta-rs transaction.

It resumes: each range records its files once written (``dataplane.resume``), and a run after a killed one
reads only the ranges without a record, keeping the others' files."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dagster_databus.core.pickle_text import pack
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import commit_bootstrap, location, remove_uncommitted
from dagster_databus.dataplane.files import TaskReport
from dagster_databus.dataplane.results import Bootstrapped, RangeCounts, range_rows
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.jobs import ENGINE, SparkJobs, paths
from dagster_databus.storage.durable import crash_point, disk_errors

if TYPE_CHECKING:
    from dagster_databus.core.progress import Progress
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.dataplane.resume import BootstrapPlan, BootstrapProgress
    from dagster_databus.sources.base import RangeRead, Source


class RangeReads(SparkJobs):
    """A table read in key ranges by Spark tasks, into a snapshot's files that the driver commits."""

    def bootstrap(self, snap: DeltaSnapshot, source: Source, table: str, progress: Progress) -> Bootstrapped:
        from dagster_databus.dataplane.reads import FilesSink
        from dagster_databus.dataplane.resume import BootstrapProgress

        planning = time.monotonic()
        store = BootstrapProgress(self.config.lake, snap.source, table)
        read, plan, done = self._plan(snap, store, source.reads.ranges(table, range_rows(self.config, source)))
        remaining = [i for i in range(len(read.ranges)) if i not in done]
        tasks = self.range_tasks(remaining)
        progress(f"{table}: bootstrapping in {len(read.ranges)} key range(s), read by {len(tasks)} Spark task(s)"
                 + (f", all as of SCN {read.scn}" if read.scn is not None else "")
                 + (f"; resuming: {len(done)} already read" if done else ""))
        sink = FilesSink(location(snap), read.schema.arrow(with_meta=True), self.config.merge.file_rows, plan.prefix,
                         int(time.time() * 1000), store.spec)
        committed = False
        report = None
        submitted = time.time()
        planning = time.monotonic() - planning
        try:
            if remaining:
                with task_errors(), self.spark.job_progress(progress, f"{table}: bootstrapping"):
                    self.spark.frame("databus_table_files", read=pack(read), sink=pack(sink),
                                     tasks=pack(tasks)).toArrow()
            # The ranges' own records are the bootstrap's account, this run's and any earlier one's alike.
            done = store.done()
            missing = [i for i in range(len(read.ranges)) if i not in done]
            if missing:
                raise RuntimeError(f"bootstrap of {snap.source}.{table}: key range(s) {missing} finished without "
                                   "recording their files")
            report = TaskReport(tuple(f for i in sorted(done) for f in done[i].added), (),
                                tuple(f for i in sorted(done) for f in done[i].facts))
            scn = Scn(min(int(f["scn"]) for f in report.facts))
            committing = time.monotonic()
            crash_point("delta_commit")
            with disk_errors(f"bootstrapping {snap.source}.{table} into Delta", snap.path):
                commit_bootstrap(snap, sink.schema, report.added, scn, ENGINE)
            committed = True
            committing = time.monotonic() - committing
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
        ranges = RangeCounts(ranges=len(read.ranges), resumed=len(read.ranges) - len(remaining),
                             most_reads=max(starts.values(), default=0),
                             seconds=_phases(planning, submitted, [f for f in report.facts if f["range"] in remaining],
                                             committing))
        return Bootstrapped(scn, read.schema, rows, len(report.added), ranges)

    def _plan(self, snap: DeltaSnapshot, store: BootstrapProgress, read: RangeRead
              ) -> tuple[RangeRead, BootstrapPlan, dict[int, TaskReport]]:
        """The read to do, its plan and the ranges already read: an earlier run's, if one was killed reading the
        same columns in the same epoch (and the change log still reaches back to its reads), else a new one."""
        from dagster_databus.log.changelog import ChangeLog

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
            return read, store.start(read.ranges, read.schema.fingerprint(), manifest.epoch), done
        return replace(read, ranges=plan.ranges), plan, done


def _phases(planning: float, submitted: float, facts: list[dict[str, Any]], committing: float) -> dict[str, float]:
    """Where the bootstrap's time went (``BOOTSTRAP_PHASES``), from the facts of the ranges this run read."""
    first = min((f["started_at"] for f in facts), default=submitted)
    last = max((f["started_at"] + f["seconds"] for f in facts), default=first)
    return {"planning": planning, "starting": max(0.0, first - submitted), "tasks": last - first,
            **{phase: sum(f[phase] for f in facts) for phase in ("opening", "reading", "writing")},
            "committing": committing}


def _committed(snap: DeltaSnapshot, prefix: str) -> bool:
    """Whether the table names files of this prefix: a bootstrap that committed but was stopped before it
    cleared its progress (merges may since have replaced those files; its records are stale)."""
    table = snap.existing()
    if table is None:
        return False
    return any(p.startswith(prefix) for p in paths(table))
