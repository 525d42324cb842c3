"""The capture loop: a source's changes since the checkpoint, appended to its change log.

Plain Python, no Dagster: the Dagster assets, the ``jobs/`` entry points and the tests all
call these functions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dagster_databus.config import DatabusConfig
from dagster_databus.core.batch import ChangeBatch, SpooledBatch
from dagster_databus.core.lag import scn_lag, time_lag
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError, DatabusError, LogGapError, SourceUnavailableError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import Manifest
from dagster_databus.log.retention import RetentionResult
from dagster_databus.sources import open_source
from dagster_databus.sources.base import ALL_ROWS, Drifting, Failover, InstallReport, PollStats, RowSelection, Source
from dagster_databus.sources.keys import selection_for
from dagster_databus.storage.lake import lake_problem, require_writable_lake


@dataclass(slots=True)
class CaptureResult:
    source: str
    epoch: str
    since: Scn
    until: Scn
    source_hwm: Scn
    windows: int = 0
    events: int = 0
    segments: int = 0
    chunks: int = 0
    events_by_op: dict[str, int] = field(default_factory=dict)
    events_by_table: dict[str, int] = field(default_factory=dict)
    newest_commit_ms: int | None = None
    duration_s: float = 0.0
    schema_versions: dict[str, int] = field(default_factory=dict)
    bootstrapped: bool = False  # the log was restarted because the source had purged its changes
    failover: dict[str, Any] | None = None  # the switch to another server this capture followed
    reread_windows: int = 0  # windows read again after a failover by commit time

    @property
    def lag_scn(self) -> int:
        return scn_lag(self.source_hwm, self.until)


def _resume(src: Source, log: ChangeLog, progress: Progress) -> None:
    """Sources with a standby read from the server their checkpoint names, failing over if it is down. The
    source decides the switch under the log's writer lock, and it is committed to the log (lineage and
    checkpoint) before any change is read from the new server: sources read the log, they do not write it."""
    checkpoint = log.checkpoint()
    if not isinstance(src, Failover) or checkpoint is None:
        return
    down = src.check_server(checkpoint.state, progress)
    if down is None:
        return
    with log.writer() as writer:
        checkpoint = log.checkpoint()  # again, under the lock: another run may have switched already
        assert checkpoint is not None
        plan = src.plan_switch(checkpoint, down, progress)
        if plan is not None:
            writer.switch_epoch(plan.resume, plan.epoch, plan.state, plan.record)


def install(config: DatabusConfig, source: str, progress: Progress = lambda _: None) -> InstallReport:
    """Create or update a source's capture objects (idempotent).

    A source whose log starts at its current position (a binlog) has that position recorded
    the first time, so every change after install is captured.
    """
    require_writable_lake(config.lake)  # before the source is touched: triggers without a log would fill the txlog
    src = open_source(config.source(source))
    log = ChangeLog(config.lake, source)
    _resume(src, log, progress)
    report = src.install()
    if log.checkpoint() is None:
        start, state = src.start_position()
        if not start.is_beginning:
            with log.writer() as writer:
                writer.start_at(start, report.epoch, state)
    return report


@dataclass
class Validation:
    """What ``databus validate`` found: per source (and ``lake``) its problems, each with its fix."""

    problems: dict[str, list[str]]
    notes: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())


def validate(config: DatabusConfig) -> Validation:
    """Every check install and capture make before they write, for every source, all reported at once;
    writes nothing. (The config itself, cron schedules included, was checked when it loaded.)"""
    problems: dict[str, list[str]] = {"lake": []}
    notes: dict[str, list[str]] = {}
    lake = lake_problem(config.lake)
    if lake is not None:
        problems["lake"].append(f"{lake}. Fix: point lake: at a folder this user can create and write, or give "
                                "credentials that may write the bucket (storage_options)")
    shared = _shared_databases(config)
    for source in config.sources:
        found = problems[source.name] = []
        if source.name in shared:
            found.append(shared[source.name])
        if lake is None:  # a lake that cannot be read holds nothing to check
            found += lake_damage(config, source.name, [t.name for t in source.tables])
        try:
            src = open_source(source, config.lake)
            tables = src.preflight()  # tables exist, keys are the primary keys, every column type is mapped
            notes[source.name] = [f"{source.kind}, tables: {', '.join(tables)}"]
            if not src.installed():
                notes[source.name].append(f"capture is not installed yet: run `databus install --source {source.name}`")
                continue
            # Capture objects, missing or out of date, are fixed by install; a server's settings and privileges
            # (MySQL's) are each stated with their own fix.
            install = f". Fix: run `databus install --source {source.name}`" if src.install_repairs else ""
            found += [f"{problem}{install}" for problem in src.verify()]
            checkpoint = ChangeLog(config.lake, source.name).checkpoint() if lake is None else None
            if checkpoint is not None and isinstance(src, Drifting):
                found += src.drift(checkpoint.scn, checkpoint.state)  # objects replaced since capture last read
            found += src.null_keys()  # tables whose key holds NULL, which capture refuses
            notes[source.name] += src.notes()  # what the source says of itself (version, settings, text scanned)
        except DatabusError as exc:
            found.append(f"{exc.problem}. Fix: {exc.fix}")
    return Validation(problems, notes)


def _shared_databases(config: DatabusConfig) -> dict[str, str]:
    """A problem for each source whose database another source of the config captures too, where the two would
    share its capture objects (``SourceBase.exclusive_database``: a SQLite file, by any path): one source's
    pruning would cut the other's changes."""
    owners: dict[str, str] = {}
    found = {}
    for source in config.sources:
        database = source.exclusive_database()
        if database is None:
            continue
        owner = owners.setdefault(database, source.name)
        if owner != source.name:
            found[source.name] = (f"database {database} is also captured by source {owner!r}: each database has one "
                                  f"source, whose txlog pruning would otherwise cut this one's changes. Fix: list this "
                                  f"source's tables under source {owner!r}, and remove this source")
    return found


def lake_damage(config: DatabusConfig, source: str, tables: Sequence[str]) -> list[str]:
    """What is damaged in a source's part of the lake, each with its fix: change-log segments missing or
    truncated, and data files a snapshot or history table names that are missing or not their recorded size."""
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.dataplane.history import HistoryTable

    found = []
    log = ChangeLog(config.lake, source)
    try:
        log_damage = log.damage() if log.checkpoint() is not None else []
    except DatabusError as exc:
        log_damage = [exc.problem]
    if log_damage:
        found.append(f"the change log of source {source!r} is damaged: {'; '.join(log_damage)}. Fix: restore the "
                     f"segments from a backup, or run `databus bootstrap --source {source}` to start the log and "
                     "snapshots afresh")
    for table in tables:
        for folder, fix in ((DeltaSnapshot(config.lake, source, table),
                             f"run `databus snapshot --source {source} --tables {table}`"),
                            (HistoryTable(config.lake, source, table),
                             f"run `databus bootstrap --source {source}` (a history table is rebuilt with its log)")):
            damaged = folder.damage()
            if damaged:
                found.append(f"{'; '.join(damaged)}. Fix: {fix}")
    return found


def bootstrap(config: DatabusConfig, source: str) -> str | None:
    """Start a source's change log and snapshots afresh at the source's current position.

    The recovery for epoch changes, gaps and schema drift. The old log and snapshots are
    moved to ``<lake>/trash/`` (where, returned), not deleted. The next run bootstraps every
    snapshot from the source at an SCN at or after the new checkpoint.
    """
    src = open_source(config.source(source), config.lake)  # the server the old log was reading
    log = ChangeLog(config.lake, source)
    src.require_installed()
    trash = f"trash/{source}-{time.strftime('%Y%m%dT%H%M%S')}"
    objects = config.lake.objects
    with log.writer(refuse_damage=False) as writer:  # a damaged log is exactly what this sets aside
        moved = False
        for folder, name in ((f"log/{source}/", "log"), (f"snapshot/{source}/", "snapshot"),
                             (f"bootstrap/{source}/", "bootstrap")):
            if config.lake.path is not None:  # a local lake: one rename per entry
                path = config.lake.path / folder
                if path.exists() and any(p.name != ".lock" for p in path.iterdir()):
                    (config.lake.path / trash / name).mkdir(parents=True)
                    for child in path.iterdir():
                        if child.name != ".lock":
                            child.rename(config.lake.path / trash / name / child.name)
                    moved = True
                continue
            for info in objects.list(folder):  # a store: a server-side copy per object
                objects.move(info.key, f"{trash}/{name}/{info.key[len(folder):]}")
                moved = True
        writer.adopt()
        start, state = src.start_position()
        if start.is_beginning:  # a txlog source: start after everything it holds now
            start, state = src.high_water_mark(), {}
        writer.start_at(start, src.epoch(), state)
    return config.lake.where(trash) if moved else None


def capture(config: DatabusConfig, source: str, progress: Progress = lambda _: None) -> CaptureResult:
    """Poll ``source`` from its checkpoint to the bound fixed at the start; append whole windows.

    A source configured with ``on_purged: bootstrap`` whose changes after the checkpoint are
    gone is bootstrapped (log restarted, snapshots re-read) instead of failing. A source with a
    standby that loses its server mid-run fails over (if the server stays down) and goes on.
    """
    require_writable_lake(config.lake)
    settings = config.source(source)
    adapter = open_source(settings)
    has_standby = isinstance(adapter, Failover) and adapter.has_standby()
    on_purged = settings.when_purged()
    for attempt in range(3):
        try:
            return _capture(config, source, progress)
        except LogGapError as exc:
            if on_purged != "bootstrap":
                raise
            progress(f"{source}: {exc.problem}; bootstrapping as configured (on_purged: bootstrap)")
            bootstrap(config, source)
            result = _capture(config, source, progress)
            result.bootstrapped = True
            return result
        except SourceUnavailableError as exc:
            # What was appended before the loss is durable; the next attempt resumes from it,
            # on the other server if this one stays down.
            if not has_standby or attempt == 2:
                raise
            progress(f"{source}: {exc.problem}; checking whether to fail over")
    raise AssertionError("unreachable")


def _capture(config: DatabusConfig, source: str, progress: Progress) -> CaptureResult:
    started = time.monotonic()
    src = open_source(config.source(source))
    log = ChangeLog(config.lake, source)
    _resume(src, log, progress)
    with src.reading():  # a MySQL binlog serves one reader per replica server id: a second run is turned away
        src.require_installed()  # checks the database and the config's tables first; writes nothing
        schemas = src.schemas()
        epoch = src.epoch()
        with log.writer() as writer:
            manifest = log.manifest()  # one version: the checkpoint, epoch and lineage read together
            if manifest.checkpoint is None:
                start, state = src.start_position()
                if not start.is_beginning:
                    writer.start_at(start, epoch, state)
                    manifest = log.manifest()
            checkpoint = manifest.checkpoint
            since = checkpoint.scn if checkpoint else Scn.BEGINNING
            guard = not src.sees_ddl
            versions = writer.register_schemas(schemas.values(), guard)
            stats = PollStats(until=since)
            result = CaptureResult(source=source, epoch=epoch, since=since, until=since, source_hwm=since,
                                   schema_versions=versions)
            start_state = checkpoint.state if checkpoint else {}
            lineage = manifest.lineage
            if "switched_ms" in start_state and lineage:
                result.failover = lineage[-1]
            # After a switch by commit time, windows up to the last commit captured before it are re-reads.
            reread_ms = int(start_state["reread_through"]) * 1000 if "reread_through" in start_state else None
            ddl = log.ddl
            poll_epoch = checkpoint.epoch if checkpoint else manifest.epoch
            for chunk in src.poll(since, poll_epoch, stats, checkpoint.state if checkpoint else {}):
                # A chunk may follow a schema change: register what its events were written with.
                versions = writer.register_schemas(src.schemas().values(), guard)
                ddl.record(stats.ddl)  # before the checkpoint passes them
                if isinstance(chunk, SpooledBatch):
                    info = writer.append_spooled(_counting_ops(chunk, result.events_by_op), epoch, dict(stats.state))
                    window_commits = np.array([chunk.commit_ms] * chunk.windows, np.int64)  # as if all the last's
                else:
                    batch = chunk if isinstance(chunk, ChangeBatch) else ChangeBatch.from_windows(chunk,
                                                                                                  writer.schemas())
                    info = writer.append_batch(batch, epoch, dict(stats.state))
                    window_commits = batch.window_ends()[1]
                    for op, count in batch.op_counts().items():
                        result.events_by_op[op] = result.events_by_op.get(op, 0) + count
                result.segments += 1
                result.windows += info.windows
                result.events += info.events
                if reread_ms is not None:
                    result.reread_windows += int((window_commits <= reread_ms).sum())
                for table, count in info.tables.items():
                    result.events_by_table[table] = result.events_by_table.get(table, 0) + count
                result.newest_commit_ms = int(window_commits[-1])
                elapsed = max(time.monotonic() - started, 1e-9)
                ahead = f", the source is at SCN {stats.source_hwm}" if stats.source_hwm.value > info.last_scn else ""
                progress(f"{source}: appended SCN {info.first_scn}..{info.last_scn} ({info.windows} windows, "
                         f"{info.events} events); {result.events:,} events in {elapsed:.1f}s, "
                         f"{result.events / elapsed:,.0f} events/s{ahead}")
            ddl.record(stats.ddl)
            versions = writer.register_schemas(src.schemas().values(), guard)  # the tables as the poll left them
            current = log.checkpoint()
            if current is None or stats.until > current.scn:
                # The poll read past its last window (other tables' transactions, DDL): don't read them again.
                writer.advance(stats.until, epoch, dict(stats.state))
            elif stats.restate and dict(stats.state) != current.state:
                writer.restate(epoch, dict(stats.state))
            result.until = stats.until
            result.schema_versions = versions
            result.source_hwm = max(stats.source_hwm, stats.until)
            result.chunks = stats.chunks
        src.release(result.until)
    result.duration_s = time.monotonic() - started
    return result


def capture_figures(result: CaptureResult, manifest: Manifest, now_ms: int | None = None) -> dict[str, Any]:
    """A capture run's figures, with the log as it stands after it (``manifest``)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return {
        "scn_range": f"{result.since}..{result.until}",
        "scn_from": str(result.since), "scn_to": str(result.until), "source_scn": str(result.source_hwm),
        "windows": result.windows, "events": result.events, "segments_written": result.segments,
        "inserts": result.events_by_op.get("i", 0), "updates": result.events_by_op.get("u", 0),
        "deletes": result.events_by_op.get("d", 0),
        "events_by_table": dict(result.events_by_table),
        "lag_scn": result.lag_scn,
        **capture_lag_seconds(result, now_ms),
        "log_segments": len(manifest.segments),
        "log_bytes": sum(s.bytes for s in manifest.segments),
        "epoch": result.epoch, "duration_s": round(result.duration_s, 3),
        **_failover(result, manifest),
    }


def capture_lag_seconds(result: CaptureResult, now_ms: int) -> dict[str, float]:
    """``commit_to_log_seconds``: from the newest captured commit to now, this run's capture delay;
    ``lag_seconds``: how far the log is behind the source in time (0 when it read all there was)."""
    figures: dict[str, float] = {}
    if result.newest_commit_ms:
        figures["commit_to_log_seconds"] = round(max(0, now_ms - result.newest_commit_ms) / 1000, 3)
    # Behind the source, the log lags by its newest commit's age: the source has newer ones.
    lag = time_lag(result.source_hwm, result.until, now_ms, result.newest_commit_ms)
    if lag is not None:
        figures["lag_seconds"] = round(lag, 3)
    return figures


def _failover(result: CaptureResult, manifest: Manifest) -> dict[str, Any]:
    """Which server capture reads, and the switch this run followed (if any)."""
    if not manifest.lineage and not manifest.state.get("server"):
        return {}
    out: dict[str, Any] = {"server": manifest.state.get("server", "primary"), "failovers": len(manifest.lineage)}
    if result.failover is not None:
        switch = result.failover
        out.update({
            "failover": dict(switch),
            "failover_to": str(switch.get("to_server", "")),
            "failover_method": str(switch.get("method", "")),
            "failover_position": f"{switch.get('resume_file')}:{switch.get('resume_offset')}",
            "reread_windows": result.reread_windows,
        })
    return out


def _counting_ops(spooled: SpooledBatch, counts: dict[str, int]) -> SpooledBatch:
    """``spooled`` with each piece's events counted by operation into ``counts`` as the writer reads it."""
    def pieces() -> Iterator[ChangeBatch]:
        for piece in spooled.pieces():
            for op, count in piece.op_counts().items():
                counts[op] = counts.get(op, 0) + count
            yield piece

    return replace(spooled, pieces=pieces)


def row_selection(config: DatabusConfig, source: str, tables: Sequence[str], after: Sequence[Any] | None = None,
                  through: Sequence[Any] | None = None, where: str | None = None) -> RowSelection:
    """The rows an on-demand snapshot reads again, from what a user typed: key bounds (one value per key
    column, in key order) and a filter in the source's SQL. Either needs exactly one table."""
    if after is None and through is None and where is None:  # a blank filter is refused, not widened to every row
        return ALL_ROWS
    if len(tables) != 1:
        raise ConfigError("snapshot.tables", f"a key range or a filter names rows of one table, but {len(tables)} "
                          f"tables were chosen ({', '.join(tables) or 'all of them'})", "choose exactly one table")
    schema = open_source(config.source(source)).schemas()[tables[0]]
    return selection_for(schema, after, through, where)


def enforce_retention(config: DatabusConfig, source: str) -> RetentionResult | None:
    """Apply the source's retention limits, keeping everything some snapshot has not absorbed."""
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.dataplane.logical import LogicalSnapshot
    from dagster_databus.log.retention import apply_retention

    source_cfg = config.source(source)
    limits = source_cfg.retention
    if limits.max_age_hours is None and limits.max_bytes is None:
        return None
    applied = [DeltaSnapshot(config.lake, source, t.name).applied_scn() for t in source_cfg.tables]
    snapshots = [scn for scn in applied if scn is not None]
    # A table without a snapshot has absorbed nothing yet: then nothing may go.
    absorbed = min(snapshots) if len(snapshots) == len(applied) else Scn.BEGINNING
    # Logical tables follow the log too; one not loaded yet will load from the snapshots instead.
    for logical in config.logical_tables:
        snap = LogicalSnapshot(config.lake, logical.name)
        for part in logical.parts:
            scn = snap.applied_scn(part.label) if part.source == source else None
            absorbed = min(absorbed, scn) if scn is not None else absorbed
    # A history table follows the log too; one not started yet will start from its snapshot.
    for table in source_cfg.tables:
        scn = HistoryTable(config.lake, source, table.name).applied_scn() if table.history else None
        absorbed = min(absorbed, scn) if scn is not None else absorbed
    log = ChangeLog(config.lake, source)
    with log.writer() as writer:
        return apply_retention(writer, absorbed,
                               max_age_s=limits.max_age_hours * 3600 if limits.max_age_hours else None,
                               max_bytes=limits.max_bytes)
