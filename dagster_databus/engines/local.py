"""The local engine: one process reads, reduces and MERGEs through delta-rs; no Spark.

For small single-machine setups: the source is read on one connection, the change log is decoded
in bulk and reduced to the newest change per key in bounded memory (``dataplane.reduce``, spilling
past ``merge.memory_mb``), and the reduced rows stream into delta-rs's MERGE.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, Transaction, write_deltalake

from dagster_databus.core.progress import Progress, Ticker
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import OPERATION_KEY
from dagster_databus.dataplane.delta import (
    DeltaFolder,
    DeltaSnapshot,
    MergeCounts,
    conform_changes,
    conform_rows,
    live,
    merge_clauses,
    merge_with_delta_rs,
    soft_deleted,
    with_meta,
)
from dagster_databus.dataplane.files import delta_writer
from dagster_databus.dataplane.reduce import ChangeStats, NewestPerKey
from dagster_databus.dataplane.results import (
    Bootstrapped,
    LogicalLoaded,
    LogicalMerged,
    Merged,
    Refreshed,
    range_rows,
    soft_deletes,
)
from dagster_databus.log.columns import change_schema, table_changes
from dagster_databus.storage.durable import crash_point, disk_errors

if TYPE_CHECKING:
    from dagster_databus.config import DatabusConfig
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.dataplane.logical import LogicalLayout, LogicalPart, LogicalSnapshot
    from dagster_databus.dataplane.slices import SliceRows
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import RowSelection, Source


class LocalEngine:
    name = "local"
    tables_at_once = 1  # its reduce and MERGE use this machine's memory and cores: one table at a time

    def __init__(self, config: DatabusConfig) -> None:
        self.config = config
        self.memory_bytes = config.merge.memory_mb * 2**20
        self.spill_dir = config.merge.spill_dir

    def bootstrap(self, snap: DeltaSnapshot, source: Source, table: str, progress: Progress) -> Bootstrapped:
        read = source.reads.read_table(table)
        progress(f"{table}: bootstrapping from the source at SCN {read.scn}, in this process")
        reading = Ticker(progress, f"{table}: bootstrapping", "rows")
        rows = write_snapshot(snap, read.schema, reading.counted(read.batches, lambda b: b.num_rows), read.scn)
        progress(f"{table}: bootstrapped {rows:,} rows at SCN {read.scn}")
        return Bootstrapped(read.scn, read.schema, rows)

    def merge(self, snap: DeltaSnapshot, log: ChangeLog, schema: TableSchema, since: Scn, until: Scn,
              progress: Progress) -> Merged | None:
        applied = snap.bootstrapped()[1]
        if until <= applied:
            return None
        since = max(since, applied)
        reduced = reduced_in_process(log, schema, since, until, self.memory_bytes, self.spill_dir, progress)
        with reduced as (rows, stats):
            counts = apply_changes(snap, schema, rows, until, soft=soft_deletes(self.config, snap))
        return None if counts is None else Merged(counts, stats)


    def refresh(self, snap: DeltaSnapshot, source: Source, table: str, rows: RowSelection,
                progress: Progress) -> Refreshed:
        """The key ranges read one after another in this process, their changes MERGEd in one delta-rs commit."""
        from dagster_databus.dataplane.commit import location
        from dagster_databus.dataplane.files import TableFiles
        from dagster_databus.dataplane.refresh import RangeChanges, finds_deletes

        snap.bootstrapped()  # refused, naming the fix, before the snapshot's bootstrap
        read = source.reads.ranges(table, range_rows(self.config, source), rows)
        schema = read.schema
        target = schema.arrow(with_meta=True)
        deletes = finds_deletes(schema, rows)
        changes = RangeChanges(change_schema(schema), target, schema.primary_key, deletes)
        files, where = TableFiles.of(snap.delta(), schema.primary_key, target), location(snap)
        progress(f"{table}: reading {rows.describe()} again in {len(read.ranges)} key range(s), in this process")
        ops = {"r": 0, "d": 0}

        def batches() -> Iterator[pa.RecordBatch]:
            for index in range(len(read.ranges)):
                for batch in changes.of(read, index, where, files):
                    ops[batch.column("__op")[0].as_py()] += batch.num_rows
                    yield from conform_changes(batch, target).to_batches()

        props = CommitProperties(custom_metadata={OPERATION_KEY: "refresh", "engine": self.name,
                                                  "databus.rows": rows.describe()})
        crash_point("delta_commit")
        with disk_errors(f"committing {snap.source}.{table} to Delta", snap.path):
            # Read here, not as delta-rs pulls: its threads may not use the source's connections (an embedded one's).
            counts = merge_with_delta_rs(snap, schema.primary_key, pa.Table.from_batches(list(batches()), target),
                                         props, reads=True, soft=soft_deletes(self.config, snap))
        return Refreshed(ops["r"], ops["d"], deletes, len(read.ranges), counts)

    def slice_digests(self, rows: SliceRows, progress: Progress) -> pa.Table:
        """The slice's files read one after another in this process."""
        return rows.digests_of(rows.paths)

    def compact(self, snap: DeltaFolder, table: Any, key: Sequence[str], groups: Sequence[Sequence[Any]],
                progress: Progress) -> int:
        """The groups read and written one after another in this process; one commit."""
        from dagster_databus.dataplane.commit import commit_merge, location, remove_uncommitted
        from dagster_databus.dataplane.files import FileWriter, run_prefix
        from dagster_databus.dataplane.reads import FileRead

        schema = pa.schema(table.schema().to_arrow())
        prefix, added, committed = run_prefix(), [], False
        try:
            for index, group in enumerate(groups):
                read = FileRead(location(snap), group[0].path, then=tuple(f.path for f in group[1:]),
                                order_by=tuple(key))
                writer = FileWriter(location(snap), schema, self.config.merge.file_rows, f"{prefix}-c{index:05d}")
                added += writer.write(read.read(schema).to_batches())
            crash_point("compact_commit")
            with disk_errors(f"compacting {snap.key} in Delta", snap.path):
                commit_merge(snap, table, schema, added, [f for g in groups for f in g], [],
                             {OPERATION_KEY: "compact", "engine": self.name}, data_change=False)
            committed = True
        finally:
            remove_uncommitted(snap, prefix, added if committed else ())
        return len(added)

    def evolve(self, snap: DeltaSnapshot, schema: TableSchema, scn: Scn, progress: Progress,
               fills: Mapping[str, pa.Scalar] | None = None) -> int:
        """The table read whole, conformed and overwritten in this process (the engine for small tables)."""
        table = snap.delta()
        rows = conform_rows(snap.dataset(table).to_table(), schema.arrow(with_meta=True), fills)
        crash_point("delta_commit")
        with disk_errors(f"evolving {snap.source}.{schema.table} in Delta", snap.path):
            write_deltalake(table, rows, mode="overwrite", schema_mode="overwrite", writer_properties=delta_writer(),
                            commit_properties=CommitProperties(
                                app_transactions=[Transaction(app_id=snap.evolved_app_id, version=scn.value)],
                                custom_metadata={OPERATION_KEY: "evolve", "engine": self.name}))
        return int(rows.num_rows)

    def start_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, target: pa.Schema, start: Scn,
                      based: Scn, progress: Progress) -> int:
        """The snapshot's rows at ``version`` read in this process and written as the history's first versions."""
        from dagster_databus.dataplane.history import from_snapshot

        rows = conform_rows(from_snapshot(live(snap.dataset(snap.delta(version)).to_table())), target)
        hist.prepare()
        crash_point("history_commit")
        with disk_errors(f"starting the history of {hist.source}.{hist.table} in Delta", hist.path):
            write_deltalake(hist.uri, rows, mode="overwrite", schema_mode="overwrite",
                            storage_options=hist.storage_options, commit_properties=CommitProperties(
                                app_transactions=[Transaction(app_id=hist.app_id, version=start.value),
                                                  Transaction(app_id=hist.start_app_id, version=start.value),
                                                  Transaction(app_id=hist.based_app_id, version=based.value)],
                                custom_metadata={OPERATION_KEY: "history-start", "engine": self.name}))
        return int(rows.num_rows)

    def merge_history(self, hist: HistoryTable, log: ChangeLog, schema: TableSchema, target: pa.Schema,
                      tracked: Sequence[str], since: Scn, until: Scn, progress: Progress) -> Merged | None:
        """The window's changes reduced per key and SCN in this process, folded into the changed keys' open
        versions, and MERGEd (on key and ``__start_scn``) in one delta-rs commit."""
        applied = hist.applied_scn()
        if applied is None or until <= applied:
            return None
        key, since = schema.primary_key, max(since, applied)
        reducer = NewestPerKey(change_schema(schema), [*key, "__scn"], self.memory_bytes, self.spill_dir,
                               at_commit=True)
        try:
            reducer.extend(table_changes(log, schema, since, until))
            stats = reducer.stats
            changes = pa.Table.from_batches(list(reducer.results()), reducer.schema)
        finally:
            reducer.close()
        progress(f"{schema.table}: history: folding {stats.events:,} events, SCN {since}..{until}")
        props = CommitProperties(app_transactions=[Transaction(app_id=hist.app_id, version=until.value)],
                                 custom_metadata={OPERATION_KEY: "history", "engine": self.name,
                                                  "databus.scn_range": f"{since}..{until}"})
        return Merged(fold_into_history(hist, changes, key, tracked, target, props), stats)

    def restate_history(self, hist: HistoryTable, snap: DeltaSnapshot, version: int, schema: TableSchema,
                        target: pa.Schema, tracked: Sequence[str], scn: Scn, progress: Progress) -> MergeCounts:
        """The snapshot's rows at ``version`` (a bootstrap at ``scn``) and deletes of the keys the history holds
        open that they lack, folded in this process (``dataplane.history.Restated``)."""
        from dagster_databus.dataplane.history import Restated, open_versions

        key = list(schema.primary_key)
        rows = live(snap.dataset(snap.delta(version)).to_table())
        held = open_versions(hist.dataset().to_table(columns=[*key, "__end_scn"]))
        gone = held.select(key).join(rows.select(key), keys=key, join_type="left anti")
        read_ms = snap.bootstrapped_ms() or int(time.time() * 1000)
        changes = pa.concat_tables([Restated(change_schema(schema)).of(rows),
                                    Restated(change_schema(schema), (scn.value, read_ms)).of(gone)])
        progress(f"{schema.table}: history: restating {rows.num_rows:,} rows of the read at SCN {scn} "
                 f"({gone.num_rows:,} keys it no longer has)")
        applied = hist.applied_scn()
        props = CommitProperties(
            app_transactions=[Transaction(app_id=hist.app_id, version=max(scn.value, applied.value if applied else 0)),
                              Transaction(app_id=hist.based_app_id, version=scn.value)],
            custom_metadata={OPERATION_KEY: "history-restate", "engine": self.name})
        return fold_into_history(hist, changes, key, tracked, target, props)

    def load_logical(self, target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart],
                     progress: Progress) -> LogicalLoaded:
        from dagster_databus.engines.local_logical import load_in_process

        return load_in_process(target, layout, parts)

    def merge_logical(self, target: LogicalSnapshot, layout: LogicalLayout,
                      ranges: Sequence[tuple[LogicalPart, Scn, Scn]],
                      progress: Progress) -> LogicalMerged:
        from dagster_databus.engines.local_logical import merge_in_process

        return merge_in_process(target, layout, ranges, self.memory_bytes, self.spill_dir, progress)


def fold_into_history(hist: HistoryTable, changes: pa.Table, key: Sequence[str], tracked: Sequence[str],
                      target: pa.Schema, props: CommitProperties) -> MergeCounts:
    """Fold ``changes`` into the open versions of their keys and MERGE the result (on key and
    ``__start_scn``) in one delta-rs commit carrying ``props``."""
    from dagster_databus.dataplane.history import fold, open_versions

    table = hist.delta()
    wanted = pc.field("__end_scn").is_null()
    # Keys of one column are looked up by value; a float's -0 is not its 0 to that lookup, though the same key.
    if len(key) == 1 and changes.num_rows and not pa.types.is_floating(target.field(key[0]).type):
        wanted = wanted & pc.field(key[0]).isin(pc.unique(changes[key[0]]).cast(target.field(key[0]).type))
    open_rows = conform_rows(open_versions(hist.dataset(table).to_table(filter=wanted)), target)
    folded = fold(open_rows, changes, key, tracked, target)
    rows = pa.concat_tables([folded.replaced, folded.opened])
    predicate, columns, _, _ = merge_clauses([*key, "__start_scn"], target.names)
    crash_point("history_commit")
    with disk_errors(f"committing the history of {hist.source}.{hist.table} to Delta", hist.path):
        if rows.num_rows:
            (table.merge(rows, predicate=predicate, source_alias="s", target_alias="t", merge_schema=True,
                         commit_properties=props)
             .when_matched_update(updates=columns).when_not_matched_insert(updates=columns).execute())
        else:
            write_deltalake(table, target.empty_table(), mode="append", schema_mode="merge",
                            commit_properties=props)
    crash_point("history_committed")
    return MergeCounts(folded.opened.num_rows, folded.closed, folded.deleted)


def write_snapshot(snap: DeltaSnapshot, schema: TableSchema, batches: Iterator[pa.RecordBatch], scn: Scn) -> int:
    """Overwrite the snapshot with ``batches`` (the source's rows at ``scn``) in one delta-rs commit."""
    now = int(time.time() * 1000)
    count = 0
    failure: list[BaseException] = []

    def stamped() -> Iterator[pa.RecordBatch]:
        nonlocal count
        try:
            for batch in batches:
                count += batch.num_rows
                yield with_meta(batch, scn, "r", now)
        except Exception as exc:  # delta-rs would wrap it in a DeltaError; keep the source's own error
            failure.append(exc)
            raise

    snap.prepare()
    txns = [Transaction(app_id=snap.app_id, version=scn.value), Transaction(app_id=snap.bootstrap_app_id,
                                                                            version=scn.value)]
    reader = pa.RecordBatchReader.from_batches(schema.arrow(with_meta=True), stamped())
    try:
        with disk_errors(f"bootstrapping {snap.source}.{snap.table} into Delta", snap.path):
            write_deltalake(snap.uri, reader, mode="overwrite", schema_mode="overwrite",
                            storage_options=snap.storage_options, writer_properties=delta_writer(),
                            commit_properties=CommitProperties(app_transactions=txns),
                            description=f"databus snapshot of {snap.source}.{snap.table}")
    except Exception:
        if failure:
            raise failure[0] from None
        raise
    return count


@contextmanager
def reduced_in_process(log: ChangeLog, schema: TableSchema, since: Scn, until: Scn, memory_bytes: int,
                       spill_dir: Path | None = None, progress: Progress = lambda _: None
                       ) -> Iterator[tuple[pa.RecordBatchReader, ChangeStats]]:
    """The newest change per key after ``since``, as a stream in the snapshot's columns; the stats are
    complete on entry (the reduce has read every change), the rows come as the stream is read."""
    reducer = NewestPerKey(change_schema(schema), schema.primary_key, memory_bytes, spill_dir, at_commit=True)
    expected = sum(s.tables.get(schema.table, 0) for s in log.manifest().between(since, until))
    try:
        reading = Ticker(progress, f"{schema.table}: reading and reducing changes", "events", expected)
        reducer.extend(reading.counted(table_changes(log, schema, since, until), lambda b: b.num_rows))
        reading.finish()
        stats = reducer.stats
        spilled = f", {stats.spilled_bytes / 2**20:,.0f} MiB spilled to disk" if stats.spilled_bytes else ""
        progress(f"{schema.table}: merging {stats.events} events in {stats.windows} windows, SCN {since}..{until}"
                 f"{spilled}")
        target = schema.arrow(with_meta=True)
        merging = Ticker(progress, f"{schema.table}: merging", "keys")
        batches = (b for reduced in reducer.results() for b in conform_changes(reduced, target).to_batches())
        with pa.RecordBatchReader.from_batches(target, merging.counted(batches, lambda b: b.num_rows)) as reader:
            yield reader, stats
        merging.finish()
    finally:
        reducer.close()


def apply_changes(snap: DeltaSnapshot, schema: TableSchema, changes: pa.Table | pa.RecordBatchReader,
                  until: Scn, soft: bool = False) -> MergeCounts | None:
    """MERGE reduced changes (one row per key, in the snapshot's columns) that bring the snapshot up to
    ``until``, in one delta-rs commit that records ``until``.

    A replay (``until`` at or below the applied SCN) changes nothing and returns None; rows at or
    below the applied SCN are dropped; per key, the MERGE applies only newer SCNs.
    """
    applied = snap.bootstrapped()[1]
    if until <= applied:
        return None
    if isinstance(changes, pa.Table):
        changes = changes.filter(pc.greater(changes["__scn"], applied.value))
    else:
        batches = (b.filter(pc.greater(b["__scn"], applied.value)) for b in changes)
        changes = pa.RecordBatchReader.from_batches(changes.schema, batches)
    crash_point("delta_commit")
    with disk_errors(f"committing {snap.source}.{snap.table} to Delta", snap.path):
        counts = merge_with_delta_rs(snap, schema.primary_key, changes, CommitProperties(
            app_transactions=[Transaction(app_id=snap.app_id, version=until.value)]), soft=soft)
    crash_point("delta_committed")
    return soft_deleted(snap, counts, applied.value) if soft else counts
