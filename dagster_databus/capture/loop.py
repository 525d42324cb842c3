"""``run``: one capture run, the poll loop: a source's changes from its checkpoint to the bound fixed when the
run starts, appended to its change log in whole windows, with what the run did (``CaptureResult``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from dagster_databus.capture.failover import resume
from dagster_databus.capture.restart import restart
from dagster_databus.config import DatabusConfig
from dagster_databus.core.lag import scn_lag
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.errors import LogGapError, SourceUnavailableError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Failover, FailoverState, PollStats
from dagster_databus.storage.lake import require_writable_lake


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


def run(config: DatabusConfig, source: str, progress: Progress = lambda _: None) -> CaptureResult:
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
            restart(config, source)
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
    resume(src, log, progress)
    with src.stream.reading():  # a source that serves one reader at a time turns a second run away here
        src.setup.require_installed()  # checks the database and the config's tables first; writes nothing
        schemas = src.catalog.schemas()
        epoch = src.stream.epoch()
        with log.writer() as writer:
            manifest = log.manifest()  # one version: the checkpoint, epoch and lineage read together
            if manifest.checkpoint is None:
                start, state = src.stream.start_position()
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
            failover = FailoverState.of(checkpoint.state if checkpoint else {})
            lineage = manifest.lineage
            if failover.switched_ms is not None and lineage:
                result.failover = lineage[-1]
            # After a switch by commit time, windows up to the last commit captured before it are re-reads.
            reread_ms = None if failover.reread_through_s is None else failover.reread_through_s * 1000
            ddl = log.ddl
            poll_epoch = checkpoint.epoch if checkpoint else manifest.epoch
            for chunk in src.stream.poll(since, poll_epoch, stats, checkpoint.state if checkpoint else {}):
                # A chunk may follow a schema change: register what its events were written with.
                versions = writer.register_schemas(src.catalog.schemas().values(), guard)
                ddl.record(stats.ddl)  # before the checkpoint passes them
                info = chunk.counted(result.events_by_op).write(writer, epoch, dict(stats.state))
                window_commits = chunk.window_commits()
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
            versions = writer.register_schemas(src.catalog.schemas().values(), guard)  # as the poll left them
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
        src.stream.release(result.until)
    result.duration_s = time.monotonic() - started
    return result

