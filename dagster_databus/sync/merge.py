"""Bring Delta snapshots up to the change log: bootstrap a table once, then merge windows.

The merge takes the committed log after the snapshot's applied SCN, reduces it to the newest event
per key (``sequence_by`` = SCN, then position in the window), and applies it: deletes remove the
key (``apply_as_deletes``), newer images replace older ones (SCD type 1), and nothing older than
what the snapshot holds is ever applied. The engine ``merge.engine`` names does the work
(``engines/``: Spark tasks by default); this module decides what a table needs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.lag import scn_lag, time_lag
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import commit_absorbed, set_change_feed
from dagster_databus.dataplane.delta import DeltaSnapshot, MergeCounts
from dagster_databus.dataplane.results import FileCounts, RangeCounts, Refreshed
from dagster_databus.engines import open_engine
from dagster_databus.engines.contract import MergeEngine
from dagster_databus.errors import SchemaDriftError, SnapshotMissingError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import ALL_ROWS, RowSelection
from dagster_databus.sources.registry import source_kind
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.properties import with_spark_properties
from dagster_databus.storage.durable import disk_errors
from dagster_databus.sync.evolve import plan

if TYPE_CHECKING:
    from dagster_databus.spark.runtime import SparkRuntime



@dataclass(frozen=True, slots=True)
class TableSyncResult:
    source: str
    table: str
    engine: str
    bootstrapped_at: Scn | None
    bootstrap_rows: int
    from_scn: Scn
    to_scn: Scn
    events: int
    windows: int
    events_by_op: Mapping[str, int]  # events merged, by operation ('i', 'u', 'd')
    counts: MergeCounts
    snapshot_rows: int
    log_scn: Scn
    delta_version: int | None
    duration_s: float
    # Source commit times (ms) of the last transaction the snapshot reflects and of the log's newest.
    applied_commit_ms: int | None = None
    log_commit_ms: int | None = None
    data_files: FileCounts | None = None  # the files the merge touched (the spark engine counts them)
    evolved: str | None = None  # the schema change applied in place this run, described
    key_ranges: RangeCounts | None = None  # the bootstrap's key ranges (an engine that reads them in ranges)
    refreshed: Refreshed | None = None  # mode refresh: what reading the chosen rows again found and changed
    history: HistorySynced | None = None  # the table's history table, when it has one (``history: true``)

    @property
    def lag_scn(self) -> int:
        return scn_lag(self.log_scn, self.to_scn)

    @property
    def lag_seconds(self) -> float | None:
        """How much older the snapshot's newest change is than the log's, in source commit time."""
        return time_lag(self.log_scn, self.to_scn, self.log_commit_ms, self.applied_commit_ms)


def engine_for(spark: SparkRuntime, config: DatabusConfig) -> MergeEngine:
    """The engine ``config.merge.engine`` names, on ``spark``, which starts only if that engine runs a job."""
    return open_engine(config, spark)


SyncMode = Literal["merge", "bootstrap", "rebuild", "refresh"]


def spark_ahead(config: DatabusConfig, source: str, tables: Sequence[str], mode: SyncMode = "merge") -> bool:
    """Whether a sync of ``tables`` will run Spark jobs as far as can be told before capture: so whether to start
    Spark now, while capture runs. Not for the local engine, nor for a merge that ``merge.in_driver_mib`` keeps in
    this process: every table bootstrapped and no table with more of the log to merge than that. A merge larger
    than it turns out (capture brought more) starts Spark at its first job."""
    if config.merge.engine == "local" or not tables:
        return False
    if mode != "merge" or config.merge.in_driver_mib == 0:
        return True
    manifest = ChangeLog(config.lake, source).manifest()
    for table in tables:
        applied = DeltaSnapshot(config.lake, source, table).applied_scn()
        if applied is None or manifest.table_bytes(table, applied) > config.merge.in_driver_bytes:
            return True
    return False


def sync_table(config: DatabusConfig, source_cfg: SourceConfig, table: str, engine: MergeEngine,
               progress: Progress = lambda _: None, mode: SyncMode = "merge",
               rows: RowSelection = ALL_ROWS) -> TableSyncResult:
    """Bring ``table``'s snapshot up to the log's high watermark.

    ``merge``: bootstrap if there is no snapshot (or DDL since the last bootstrap), then merge.
    ``bootstrap``: read the table afresh from the source first, whatever the snapshot holds.
    ``rebuild``: restore the snapshot as its last bootstrap left it (Delta time travel) and replay
    the retained log from there; refused if the log no longer reaches back that far.
    ``refresh``: merge, then read ``rows`` again from the source and fold them in (``dataplane.refresh``):
    repairs rows without replacing the table.
    """
    started = time.monotonic()
    log = ChangeLog(config.lake, source_cfg.name)
    snap = DeltaSnapshot(config.lake, source_cfg.name, table)
    # Opened where the source is read: a refresh (its filter refused before anything is written) or a bootstrap.
    source = open_source(source_cfg, config.lake) if mode == "refresh" else None
    if source is not None:
        source.setup.require_installed()  # a read of the source needs its capture objects (a position to pin it to)
        source.reads.check_selection(table, rows)
    lock = snap.lock(f"snapshot {source_cfg.name}.{table}", "wait for the other merge of this table to finish")
    repair = (f"run `databus snapshot --source {source_cfg.name} --tables {table}`: it reads the table afresh from "
              "the source into a new version (the change log is kept)")
    with lock, snap.damage_named(repair):
        log.require_intact()
        bootstrapped_at: Scn | None = None
        bootstrap_rows, ranges = 0, None
        if mode == "rebuild":
            bootstrapped_at = rebuild_from_bootstrap(snap, log, progress)
            bootstrap_rows = snap.row_count()
        applied = snap.applied_scn() if mode != "bootstrap" else None
        evolved = None
        if applied is not None:
            applied, evolved = apply_schema_changes(snap, log, source_cfg, table, engine, progress)
        registered = log.schemas.latest(table)
        retyped = snap.type_differences(registered[1]) if applied is not None and registered is not None else []
        if retyped:
            # Never mix types in one column: read the table afresh in the types the log now holds.
            progress(f"{table}: re-bootstrapping, the snapshot holds columns in other types: {'; '.join(retyped)}")
            applied = None
        if applied is None:
            if source is None:
                source = open_source(source_cfg, config.lake)
                source.setup.require_installed()
            # The schema changes recorded before the read begins are in what it reads, whatever SCN it is stamped
            # with (a change found with no row events is recorded where capture stood, past the read's stamp).
            recorded = max((r.scn for r in log.ddl.records() if r.table == table), default=None)
            with disk_errors(f"bootstrapping {source_cfg.name}.{table} into Delta", snap.path):
                done = engine.bootstrap(snap, source, table, progress)
                if recorded is not None and recorded > done.scn:
                    commit_absorbed(snap, recorded, engine.name)
            log.schemas.register(done.schema)
            applied = bootstrapped_at = done.scn
            bootstrap_rows, ranges = done.rows, done.ranges
        set_change_feed(snap, source_cfg.change_data_feed)
        latest = log.schemas.latest(table)
        until = log.committed_scn()
        events, windows, counts = 0, 0, MergeCounts()
        by_op: Mapping[str, int] = {}
        files: FileCounts | None = None
        to_scn = applied
        if until > applied and latest is not None:
            with disk_errors(f"merging changes into the Delta snapshot {source_cfg.name}.{table}", snap.path):
                merged = engine.merge(snap, log, latest[1], applied, until, progress)
            if merged is not None:
                counts, files = merged.counts, merged.files
                by_op, events, windows = merged.stats.events_by_op, merged.stats.events, merged.stats.windows
            to_scn = until
        refreshed = None
        if mode == "refresh" and bootstrapped_at is not None:
            progress(f"{table}: not reading {rows.describe()} again: the table was just read whole")
        elif mode == "refresh" and source is not None:
            with disk_errors(f"reading rows of {source_cfg.name}.{table} again into Delta", snap.path):
                refreshed = engine.refresh(snap, source, table, rows, progress)
        history = None
        if source_cfg.table(table).history:
            history = sync_history(config, source_cfg, table, snap, log, engine, to_scn, progress, mode)
        with snap.one_version():  # the last write is done: one reading of the log answers the figures
            return TableSyncResult(
                source=source_cfg.name, table=table, engine=engine.name, bootstrapped_at=bootstrapped_at,
                bootstrap_rows=bootstrap_rows, from_scn=applied,
                to_scn=to_scn, events=events, windows=windows, events_by_op=by_op, counts=counts,
                snapshot_rows=snap.row_count(), log_scn=until, delta_version=snap.version(),
                duration_s=time.monotonic() - started,
                applied_commit_ms=applied_commit_ms(snap, log, to_scn), log_commit_ms=log.commit_ms_through(until),
                data_files=files, evolved=evolved, key_ranges=ranges, refreshed=refreshed, history=history,
            )


@dataclass(frozen=True, slots=True)
class HistorySynced:
    """What a sync did to a table's history table (``dataplane.history``)."""

    started_at: Scn | None  # the SCN the history (re)started from this run (its snapshot's bootstrap), if it did
    from_scn: Scn
    to_scn: Scn
    counts: MergeCounts  # versions opened (inserted), versions ended (updated), of those ended by deletes
    versions: int  # rows of the history table
    delta_version: int | None


def sync_history(config: DatabusConfig, source_cfg: SourceConfig, table: str, snap: DeltaSnapshot, log: ChangeLog,
                 engine: MergeEngine, until: Scn, progress: Progress, mode: SyncMode = "merge") -> HistorySynced | None:
    """Bring ``table``'s history up to ``until`` (the snapshot's applied SCN), by the snapshot's engine.

    A history starts from the snapshot's last bootstrap when the log reaches back to it, else from the
    snapshot as it is now. It starts again on a rebuild, when the log holds its columns in other types,
    and on a bootstrap of a history the log no longer reaches; otherwise such a history is refused
    (``HistoryGapError``) rather than given a silent gap. When the snapshot was read again since (a TRUNCATE
    or DDL without row events, a bootstrap), the read is folded in as changes at its SCN (``restate_history``).
    """
    from dagster_databus.dataplane.history import HistoryTable, history_schema, tracked_columns
    from dagster_databus.errors import HistoryGapError

    latest = log.schemas.latest(table)
    if latest is None:
        return None
    schema = latest[1]
    options = source_cfg.table(table)
    tracked = tracked_columns(source_cfg.name, table, schema, options.track_history_columns,
                              options.track_history_except_columns)
    hist = HistoryTable(config.lake, source_cfg.name, table)
    target = history_schema(schema)
    applied = hist.applied_scn()
    retyped = hist.type_differences(schema) if applied is not None else []
    log_start = log.manifest().start_scn
    gap = applied is not None and log_start > applied
    if gap and mode not in ("rebuild", "bootstrap") and not retyped:
        raise HistoryGapError(
            f"the history of {source_cfg.name}.{table} reached SCN {applied}, but the change log now starts at SCN "
            f"{log_start}: the changes in between are gone, so the history cannot go on without a gap",
            f"start the history again with a bootstrap of {source_cfg.name}/{table} (mode: bootstrap), which replaces "
            "the versions it held; retention keeps what a history table has not absorbed while its table has "
            "history: true, so this follows turning history off for a while or a new change log",
            source=source_cfg.name, table=table, scn=applied.value if applied else None)
    restart = mode == "rebuild" or gap
    started = None
    boot = snap.bootstrap_scn()
    counts = MergeCounts()
    if applied is None or restart or retyped:
        if boot is not None and log_start <= boot:
            version, applied = snap.bootstrap_version(), boot
        else:
            version, applied = snap.version(), snap.applied_scn()
        why = (f"its columns changed type ({'; '.join(retyped)})" if retyped else "the log no longer reaches it" if gap
               else "rebuild" if restart else "new")
        progress(f"{table}: history: starting from the snapshot at SCN {applied} (Delta version {version}; {why})")
        assert version is not None and applied is not None  # the snapshot was synced just before
        engine.start_history(hist, snap, version, target, applied, boot or applied, progress)
        started = applied
    elif boot is not None and hist.based_scn() != boot:
        # The snapshot was read again since (a TRUNCATE or DDL the log has no row events for, a bootstrap): the
        # log up to that read first, then the read itself, folded in as a change at its SCN.
        if boot > applied:
            with disk_errors(f"merging changes into the history of {source_cfg.name}.{table}", hist.path):
                engine.merge_history(hist, log, schema, target, tracked, applied, boot, progress)
        version = snap.bootstrap_version()
        assert version is not None
        with disk_errors(f"restating the history of {source_cfg.name}.{table}", hist.path):
            counts = engine.restate_history(hist, snap, version, schema, target, tracked, boot, progress)
        applied = max(applied, boot)
    if until > applied:
        with disk_errors(f"merging changes into the history of {source_cfg.name}.{table}", hist.path):
            merged = engine.merge_history(hist, log, schema, target, tracked, applied, until, progress)
        if merged is not None:
            counts = MergeCounts(counts.inserted + merged.counts.inserted, counts.updated + merged.counts.updated,
                                 counts.deleted + merged.counts.deleted)
    return HistorySynced(started, applied, max(until, applied), counts, hist.row_count(), hist.version())


def apply_schema_changes(snap: DeltaSnapshot, log: ChangeLog, source_cfg: SourceConfig, table: str,
                         engine: MergeEngine, progress: Progress) -> tuple[Scn | None, str | None]:
    """Schema changes the log recorded since the snapshot last absorbed one, under the table's
    ``schema_changes`` policy (``sync.evolve``): (the applied SCN, None for "read the table again";
    what was evolved in place, if anything). ``stop`` raises, holding the snapshot where it is."""
    applied = snap.applied_scn()
    pending = [r for r in log.ddl.records() if r.table == table and r.scn > snap.absorbed_ddl_scn()]
    if not pending:
        return applied, None
    policy = source_cfg.schema_policy(table)
    latest = log.schemas.latest(table)
    last = pending[-1]
    statements = "; ".join(r.statement.strip()[:120] for r in pending)
    change = None
    if latest is not None:
        versions = [log.schemas.load(table, v) for v in log.schemas.versions(table)]
        before = versions[-2] if len(versions) > 1 else latest[1]
        change = plan(snap.arrow_schema(), versions, before.primary_key, pending,
                      source_kind(source_cfg.kind).keeps_values())
        if change.changes_nothing:
            return applied, None  # statements that touch no column (an index, a table option): nothing to follow
    if policy == "stop":
        raise SchemaDriftError(
            f"table {table!r} of source {source_cfg.name!r} changed at SCN {pending[0].scn} ({statements}) and its "
            "schema_changes policy is stop: the snapshot stays at SCN "
            f"{applied} (the change log keeps capturing)",
            f"set schema_changes: evolve or resnapshot for the table (or the source) and run again, or read the "
            f"table afresh with a bootstrap materialization of {source_cfg.name}/{table}",
            source=source_cfg.name, table=table, scn=pending[0].scn.value)
    if policy == "evolve" and change is not None and latest is not None:
        if change.in_place:
            rows = engine.evolve(snap, latest[1], last.scn, progress, change.filled)
            progress(f"{table}: evolved in place at SCN {last.scn} ({change.describe()}; {rows:,} rows rewritten)")
            return applied, change.describe()
        progress(f"{table}: reading the table again: the change at SCN {last.scn} cannot evolve in place: "
                 f"{'; '.join(change.refused)}")
        return None, None
    progress(f"{table}: reading the table again after the change at SCN {last.scn} ({policy}): {statements}")
    return None, None


def applied_commit_ms(snap: DeltaSnapshot, log: ChangeLog, applied: Scn) -> int | None:
    """The source commit time the snapshot is current to (ms): its last merged window's, or, when nothing
    was merged since its bootstrap, the bootstrap's (it read every commit before it)."""
    if applied == snap.bootstrap_scn():
        return snap.bootstrapped_ms()
    return log.commit_ms_through(applied)


def sync_tables(config: DatabusConfig, source_cfg: SourceConfig, tables: Sequence[str], engine: MergeEngine,
                progress: Progress = lambda _: None, mode: SyncMode = "merge",
                rows: RowSelection = ALL_ROWS) -> Iterator[tuple[str, TableSyncResult | Exception]]:
    """``sync_table`` for each of ``tables``, ``engine.tables_at_once`` at a time, reported in ``tables``' order
    as each is done: its result, or the error it failed with (a table that fails does not stop the others;
    each table commits on its own)."""
    at_once = min(engine.tables_at_once, len(tables))

    def one(table: str) -> TableSyncResult | Exception:
        try:
            return sync_table(config, source_cfg, table, engine, progress, mode, rows)
        except Exception as exc:
            return exc

    if at_once <= 1:
        for table in tables:
            yield table, one(table)
        return
    pool = ThreadPoolExecutor(at_once, thread_name_prefix=f"databus-sync-{source_cfg.name}")
    try:
        # Wrapped here, in the caller's thread: each table's Spark jobs carry the caller's job properties.
        futures = [(table, pool.submit(with_spark_properties(one), table)) for table in tables]
        for table, future in futures:
            yield table, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def sync_source(spark: SparkRuntime, config: DatabusConfig, source: str, tables: Sequence[str] | None = None,
                progress: Progress = lambda _: None, mode: SyncMode = "merge",
                rows: RowSelection = ALL_ROWS) -> list[TableSyncResult]:
    """Every (or each named) table of ``source`` synced, by the engine ``config.merge.engine`` names on ``spark``
    (started only if that engine runs a job); the first table's error, in table order, is raised once all are
    done."""
    source_cfg = config.source(source)
    engine = engine_for(spark, config)
    names = source_cfg.chosen_tables(tables) if tables is None or tables else []
    with task_errors():
        results, failed = [], None
        for _, outcome in sync_tables(config, source_cfg, names, engine, progress, mode, rows):
            if isinstance(outcome, Exception):
                failed = failed or outcome
            else:
                results.append(outcome)
        if failed is not None:
            raise failed
        return results


def rebuild_from_bootstrap(snap: DeltaSnapshot, log: ChangeLog, progress: Progress) -> Scn:
    """Restore the snapshot to the version its last bootstrap committed (a metadata-only commit: the
    bootstrap's data files are named again) with the bootstrap's SCN as its applied SCN."""
    from deltalake import CommitProperties, Transaction

    boot, lo = snap.bootstrap_scn(), snap.bootstrap_version()
    if boot is None or lo is None:
        raise SnapshotMissingError(f"snapshot {snap.source}.{snap.table} has no bootstrap to rebuild from",
                                   "run a bootstrap of the table instead (mode: bootstrap)")
    start = log.manifest().start_scn
    if start > boot:
        raise SnapshotMissingError(
            f"cannot rebuild {snap.source}.{snap.table}: the change log now starts after SCN {start}, but the "
            f"snapshot's last bootstrap was at SCN {boot}, so the changes in between are gone",
            "run a bootstrap of the table instead (mode: bootstrap)")
    current = snap.delta()
    if current.version() == lo:  # nothing committed since the bootstrap: the table is what a restore would make it
        progress(f"{snap.table}: already at version {lo}, its bootstrap's (SCN {boot}); replaying the log")
        return boot
    txns = [Transaction(app_id=snap.app_id, version=boot.value),
            Transaction(app_id=snap.bootstrap_app_id, version=boot.value)]
    try:
        current.restore(lo, commit_properties=CommitProperties(app_transactions=txns))
    except Exception as exc:
        gone = snap.damage(lo)  # why, when it is that the version's files are no longer there
        raise SnapshotMissingError(
            f"version {lo} of {snap.source}.{snap.table} (its last bootstrap) cannot be restored: {exc}",
            "run a bootstrap of the table instead (mode: bootstrap)"
            + (f"; {len(gone)} of the bootstrap's data files are gone (VACUUM or upkeep removed them)" if gone
               else "")) from exc
    progress(f"{snap.table}: restored version {lo} ({snap.row_count()} rows, bootstrap SCN {boot}); replaying the log")
    return boot
