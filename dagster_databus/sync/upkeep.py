"""Upkeep of a snapshot table under frequent merges: small files compacted, old files vacuumed, the Delta log
checkpointed.

Every merge adds files (new keys, rewritten groups) and a log version; nothing else removes them, so over
thousands of merges reads slow down and storage grows. Compaction joins runs of small neighbouring files in
key order into files of about ``merge.file_rows`` rows, so the table keeps what merges route by: files in
key order whose key bounds do not overlap (``dataplane.files.TableFiles``). A file whose physical column types
differ from the table's (delta-rs's MERGE writes string views) is rewritten alone in the table's types. The
commit changes no data (``dataChange`` false) and moves no transaction id. VACUUM then deletes files the
table stopped naming more than ``retain_hours`` ago (time travel reaches back that far), but never one its
last bootstrap's version names: ``rebuild`` restores that version (``sync.merge.rebuild_from_bootstrap``),
so its files stay as long as it is the last.

A merge and a compaction of one table take the snapshot's lock in turn on a local lake; in a store, the
later of two commits against the same version fails (``ConcurrentRunError``) and nothing of it is kept,
so a compaction that loses to a merge gives way and the next upkeep run tries again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.core.progress import Progress
from dagster_databus.dataplane.files import TableFile, TableFiles

if TYPE_CHECKING:
    from dagster_databus.config import DatabusConfig
    from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot
    from dagster_databus.engines.contract import MergeEngine
    from dagster_databus.spark.runtime import SparkRuntime

SMALL = 0.5  # a file under this share of merge.file_rows is worth joining to a neighbour
TOMBSTONES = "delta.deletedFileRetentionDuration"


@dataclass(frozen=True, slots=True)
class UpkeepResult:
    table: str
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    compacted: int  # files joined into others
    written: int  # files the compaction wrote
    vacuumed: int  # files deleted by VACUUM
    retain_hours: int  # what VACUUM kept: files the table stopped naming less than this long ago
    checkpoint_version: int
    kind: str = "snapshot"  # or "history" (the table's history table), "logical" (``table`` names the logical table)
    retyped: int = 0  # files rewritten alone because their physical column types differed from the table's


def compaction_groups(files: TableFiles, file_rows: int) -> list[list[TableFile]]:
    """Runs of neighbouring files (by the first key column's lower bound) to join, each of two or more files
    and about ``file_rows`` rows: a file under ``SMALL`` of that joins the files next to it. Files without
    key bounds are left alone (a merge routes every key to them; joining would not change that)."""
    bounded = sorted((f for f in files.files if f.bounded()), key=lambda f: f.low)
    groups: list[list[TableFile]] = []
    run: list[TableFile] = []
    rows = 0
    for file in bounded:
        small = file.rows < SMALL * file_rows
        if run and (rows + file.rows > file_rows or not (small or all(f.rows < SMALL * file_rows for f in run))):
            groups.append(run)
            run, rows = [], 0
        run.append(file)
        rows += file.rows
    groups.append(run)
    return [g for g in groups if len(g) > 1 and any(f.rows < SMALL * file_rows for f in g)]


def mistyped(folder: DeltaFolder, files: TableFiles, schema: pa.Schema, joined: Sequence[Sequence[TableFile]]
             ) -> list[list[TableFile]]:
    """Files not in ``joined`` whose physical column types differ from the table's, each a group of one to
    rewrite in the table's types: delta-rs's MERGE writes strings as ``string_view``, and every read of such a
    file through the table casts them again (the local engine's one file read twice as slowly after 1,000 merges)."""
    from dagster_databus.dataplane.commit import location

    where = location(folder)
    taken = {f.path for g in joined for f in g}
    declared = {f.name: f.type for f in schema}
    return [[f] for f in files.files if f.path not in taken
            and any(declared.get(c.name, c.type) != c.type for c in where.schema(f.path))]


def upkeep_table(snap: DeltaSnapshot, key: Sequence[str], engine: MergeEngine, file_rows: int, retain_hours: int,
                 progress: Progress, history: bool = False) -> list[UpkeepResult]:
    """Compact, vacuum and checkpoint one snapshot table, and its history table (``history``) when it has one,
    holding the snapshot's lock (its merges, which write both, wait or fail)."""
    from dagster_databus.dataplane.history import HistoryTable

    lock = snap.lock(f"snapshot {snap.source}.{snap.table}", "wait for the upkeep of this table to finish")
    with lock:
        results = [upkeep_folder(snap, snap.table, key, key, engine, file_rows, retain_hours, snap.bootstrap_version(),
                                 progress)]
        hist = HistoryTable(snap.lake, snap.source, snap.table)
        if history and hist.existing() is not None:
            # A history starts again from the snapshot, never from its own old versions: no version to keep.
            results.append(upkeep_folder(hist, snap.table, key, (*key, "__start_scn"), engine, file_rows,
                                         retain_hours, None, progress, kind="history"))
        return results


def upkeep_folder(folder: DeltaFolder, label: str, key: Sequence[str], order: Sequence[str], engine: MergeEngine,
                  file_rows: int, retain_hours: int, keep: int | None, progress: Progress,
                  kind: str = "snapshot") -> UpkeepResult:
    """Compact ``folder``'s small files (bounds by ``key``, rows written in ``order``), vacuum what it stopped
    naming over ``retain_hours`` ago but what version ``keep`` names, and checkpoint; the caller holds its lock."""
    table = folder.delta()
    before = _sizes(table)
    files = TableFiles.of(table, key, folder.arrow_schema())
    joined = compaction_groups(files, file_rows)
    retyped = mistyped(folder, files, pa.schema(table.schema().to_arrow()), joined)
    groups = joined + retyped
    written = 0
    what = f"{label}" if kind == "snapshot" else f"{label} ({kind})"
    if groups:
        progress(f"{what}: joining {sum(len(g) for g in joined)} small files in {len(joined)} run(s), rewriting "
                 f"{len(retyped)} file(s) in the table's column types")
        written = engine.compact(folder, table, order, groups, progress)
    table = folder.delta()
    # Removed files' tombstones stay in every checkpoint for this long (a week by default): past VACUUM they serve
    # nothing, and thousands of them slow every load of a table that merges every few minutes.
    tombstones = f"interval {retain_hours} hours"
    if table.metadata().configuration.get(TOMBSTONES) != tombstones:
        table.alter.set_table_properties({TOMBSTONES: tombstones}, raise_if_not_exists=False)
        table = folder.delta()
    vacuumed = table.vacuum(retention_hours=retain_hours, enforce_retention_duration=False, dry_run=False,
                            keep_versions=[keep] if keep is not None else None)
    table = folder.delta()
    table.create_checkpoint()
    after = _sizes(table)
    result = UpkeepResult(label, before[0], after[0], before[1], after[1], sum(len(g) for g in joined), written,
                          len(vacuumed), retain_hours, table.version(), kind, len(retyped))
    kept = f" and by version {keep}, the last bootstrap's" if keep is not None else ""
    progress(f"{what}: {result.files_before} -> {result.files_after} files, {result.bytes_before:,} -> "
             f"{result.bytes_after:,} bytes; {result.vacuumed} removed file(s) vacuumed (kept those named within "
             f"{retain_hours:g} h{kept}); checkpoint at version {result.checkpoint_version}")
    return result


def _sizes(table: object) -> tuple[int, int]:
    actions = pa.table(table.get_add_actions(flatten=True))  # type: ignore[attr-defined]
    return actions.num_rows, int(sum(actions["size_bytes"].to_pylist()))


def upkeep_source(config: DatabusConfig, source: str, spark: SparkRuntime, tables: Sequence[str] | None = None,
                  progress: Progress = lambda _: None) -> list[UpkeepResult]:
    """``upkeep_table`` for each (or each named) snapshot of ``source`` that exists, by ``merge.engine`` (on
    ``spark``, started only if that engine runs a job)."""
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.engines import open_engine

    source_cfg = config.source(source)
    engine = open_engine(config, spark)
    results = []
    for table in tables if tables is not None else [t.name for t in source_cfg.tables]:
        snap = DeltaSnapshot(config.lake, source, table)
        if snap.existing() is None:
            progress(f"{table}: no snapshot yet, nothing to keep up")
            continue
        options = source_cfg.table(table)
        results += upkeep_table(snap, options.primary_key, engine, config.merge.file_rows,
                                source_cfg.upkeep.retain_hours, progress, history=options.history)
    return results


def upkeep_logical(config: DatabusConfig, name: str, spark: SparkRuntime, progress: Progress = lambda _: None
                   ) -> UpkeepResult | None:
    """Upkeep of logical table ``name`` (``upkeep_folder``), holding its lock; None before its first load. A
    logical table loads again from its parts' snapshots, so VACUUM keeps no version of its own for that."""
    from dagster_databus.dataplane.logical import PART_COLUMN, LogicalSnapshot
    from dagster_databus.engines import open_engine

    logical = config.logical_table(name)
    target = LogicalSnapshot(config.lake, name)
    if target.existing() is None:
        progress(f"logical {name}: not loaded yet, nothing to keep up")
        return None
    key = [PART_COLUMN, *config.source(logical.parts[0].source).table(logical.parts[0].table).primary_key]
    with target.lock(f"logical table {name}", "wait for the upkeep of this logical table to finish"):
        return upkeep_folder(target, name, key, key, open_engine(config, spark), config.merge.file_rows,
                             logical.upkeep.retain_hours, None, progress, kind="logical")
