"""``sync_logical``: bring a logical table up to each part's change log, loading it from the parts' physical
snapshots when it cannot follow the logs, and merging every part's new changes in one commit."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_databus.config import DatabusConfig, LogicalTableConfig
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot, MergeCounts
from dagster_databus.dataplane.logical import LogicalLayout, LogicalPart, LogicalSnapshot, logical_layout
from dagster_databus.errors import LogGapError, SnapshotMissingError
from dagster_databus.log.changelog import ChangeLog

if TYPE_CHECKING:
    from dagster_databus.spark.runtime import SparkRuntime


@dataclass(frozen=True, slots=True)
class PartSyncResult:
    label: str
    source: str
    table: str
    from_scn: Scn  # the part's applied SCN before the catch-up (after a load: the snapshot's SCN)
    to_scn: Scn  # the part's applied SCN now
    log_scn: Scn  # the part's change log's committed SCN
    events: int
    events_by_op: Mapping[str, int]  # events read, by operation ('i', 'u', 'd')
    loaded_rows: int  # rows taken from the physical snapshot by a load in this sync (0 otherwise)


@dataclass(frozen=True, slots=True)
class LogicalSyncResult:
    name: str
    parts: tuple[PartSyncResult, ...]
    load_reason: str | None  # why the table was (re)loaded from the physical snapshots; None: not loaded
    events: int
    counts: MergeCounts
    row_count: int
    delta_version: int | None
    commits: int  # Delta commits this sync made: 0 for a replay
    duration_s: float

    def part(self, label: str) -> PartSyncResult:
        return next(p for p in self.parts if p.label == label)


def sync_logical(config: DatabusConfig, name: str, progress: Progress = lambda _: None,
                 spark: SparkRuntime | None = None) -> LogicalSyncResult:
    """Bring logical table ``name`` up to each part's change log.

    Loads the table from the parts' physical snapshots when it does not exist yet or can no longer
    follow the logs (a part added or removed, a physical snapshot bootstrapped again, a log that no
    longer reaches back to a part's SCN); then merges each part's log after the part's own applied
    SCN, all parts in one commit. A sync with nothing new for any part commits nothing. ``spark``: the Spark
    engines' runtime (by default one built from ``config.spark``; either way started only if a job runs).
    """
    from dagster_databus.engines import open_engine
    from dagster_databus.spark.runtime import SparkRuntime

    started = time.monotonic()
    engine = open_engine(config, spark if spark is not None else SparkRuntime(config.spark))
    logical = config.logical_table(name)
    target = LogicalSnapshot(config.lake, name)
    lock = target.lock(f"logical table {name}", "wait for the other sync of this logical table to finish")
    with lock:
        parts = [LogicalPart(p, ChangeLog(config.lake, p.source), DeltaSnapshot(config.lake, p.source, p.table))
                 for p in logical.parts]
        for part in parts:
            _require_snapshot(logical, part)
            part.log.require_intact()
        layout = logical_layout(logical, parts)
        commits, loaded = 0, {p.label: 0 for p in parts}
        reason = _load_reason(target, layout, parts)
        if reason is not None:
            progress(f"logical {name}: loading from the physical snapshots: {reason}")
            loaded = dict(engine.load_logical(target, layout, parts, progress).rows)
            commits += 1
            progress(f"logical {name}: loaded {sum(loaded.values())} rows")
        applied = {p.label: _applied(target, p) for p in parts}
        until = {p.label: p.log.committed_scn() for p in parts}
        advancing = [p for p in parts if until[p.label] > applied[p.label]]
        by_op: Mapping[str, Mapping[str, int]] = {p.label: {} for p in parts}
        counts = MergeCounts()
        if advancing:
            for part in advancing:
                start = part.log.manifest().start_scn
                if start > applied[part.label]:
                    raise LogGapError(
                        f"logical table {name}: part {part.label} is at SCN {applied[part.label]}, but the change "
                        f"log of source {part.config.source!r} now starts after SCN {start}",
                        f"materialize the {part.asset} asset (its snapshot is the way past the gap), then this "
                        "logical table again; it reloads the part")
            merged = engine.merge_logical(target, layout, [(p, applied[p.label], until[p.label]) for p in advancing],
                                          progress)
            by_op, counts = merged.events, merged.counts
            commits += 1
        results = tuple(
            PartSyncResult(label=p.label, source=p.config.source, table=p.config.table, from_scn=applied[p.label],
                           to_scn=max(applied[p.label], until[p.label]), log_scn=until[p.label],
                           events=sum(by_op.get(p.label, {}).values()), events_by_op=by_op.get(p.label, {}),
                           loaded_rows=loaded[p.label])
            for p in parts)
        return LogicalSyncResult(
            name=name, parts=results, load_reason=reason, events=sum(r.events for r in results), counts=counts,
            row_count=target.row_count(), delta_version=target.version(), commits=commits,
            duration_s=time.monotonic() - started)


def _require_snapshot(logical: LogicalTableConfig, part: LogicalPart) -> None:
    """The part's physical snapshot exists and has followed every DDL its log recorded."""
    if part.snap.applied_scn() is None:
        raise SnapshotMissingError(
            f"logical table {logical.name}: part {part.label} needs the snapshot of "
            f"{part.config.source}.{part.config.table}, which has not been bootstrapped ({part.snap.uri})",
            f"materialize the {part.asset} asset first, then this logical table", asset=part.asset)
    ddl = part.log.ddl.last_for(part.config.table)
    if ddl is not None and ddl.scn > part.snap.absorbed_ddl_scn():
        # The rows changed without row events (or the columns did): only the physical snapshot's
        # re-read (or its evolution in place) can carry the part past that point, and it has not happened yet.
        raise SnapshotMissingError(
            f"logical table {logical.name}: table {part.config.source}.{part.config.table} was altered at SCN "
            f"{ddl.scn} ({ddl.statement[:120]}) and its snapshot has not followed the change yet",
            f"materialize the {part.asset} asset first (it re-reads the table), then this logical table; it "
            "reloads the part", asset=part.asset)


def _load_reason(target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart]) -> str | None:
    """Why the table must be loaded from the physical snapshots before it can follow the logs."""
    if not target.exists():
        return "the logical table does not exist yet"
    if target.layout_document() != layout.document():
        return "its parts, shard column or key changed since it was written"
    for part in parts:
        applied = target.applied_scn(part.label)
        if applied is None:
            return f"part {part.label} has not been loaded yet"
        absorbed = part.snap.absorbed_ddl_scn()
        if target.loaded_from(part.label) != absorbed:
            # A re-read (DDL, TRUNCATE, `databus bootstrap`) changed rows without row events, or the snapshot
            # evolved in place to a new schema: either way the part is loaded again from it.
            return (f"the snapshot of {part.config.source}.{part.config.table} was bootstrapped again or evolved "
                    f"(SCN {absorbed})")
        start = part.log.manifest().start_scn
        if start > applied:
            return (f"the change log of source {part.config.source!r} now starts after SCN {start}, past part "
                    f"{part.label}'s SCN {applied}")
    return None


def _applied(target: LogicalSnapshot, part: LogicalPart) -> Scn:
    scn = target.applied_scn(part.label)
    if scn is None:  # _load records every part; anything else is a bug worth a loud stop
        raise RuntimeError(f"logical table {target.name}: part {part.label} has no applied SCN after loading")
    return scn
