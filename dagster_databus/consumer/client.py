"""The Databus client: delivers the change log to consumer callbacks, window by window.

The callbacks are ``DatabusConsumer``'s (Databus's consumer callbacks, mapped in ``consumer.delivery``,
which also dispatches them and runs a window's rollback-and-retry; both names are this module's too).

Events arrive in SCN order, one consistency window at a time, grouped per table in the
subscription order. A callback that raises (or returns False) rolls the window back:
``on_rollback`` is called and the window is delivered again from its start. The checkpoint
moves only after ``on_end_data_event_sequence`` succeeds: at least once, never a gap.

``dedupe=`` puts an ``ordering.IdempotentSink`` in front of the consumer: events at or before the
position the sink already applied for their key (replays after a restart from an older
checkpoint, or after a crash between the consumer's commit and the checkpoint's) are discarded
before they reach a callback. A rolled-back window was not applied, so it is delivered again.
``group=`` makes this client one member of a consumer group split by key (``groups.KeyRouter``).

A checkpoint records what it covers (``coverage.Coverage``: the source, the tables, the partition filter
and the group member) and the change log it is a position of (its epoch and log id). A run refuses a
checkpoint that does not cover what the client subscribes to now (``SubscriptionMismatchError``: a table,
partition or member added would silently miss its bootstrap and its earlier changes; fewer is fine), and
one past the end of the log (``ConsumerPositionError``); ``start=``, the position a client without a
checkpoint starts after, is refused past the end too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster_databus.consumer.checkpoints import CheckpointStore, ConsumerCheckpoint, MemoryCheckpointStore
from dagster_databus.consumer.coverage import Coverage
from dagster_databus.consumer.delivery import (
    DatabusConsumer,
    DeliveryStats,
    ParallelDispatcher,
    SchemaAnnouncer,
    deliver_window,
    dispatcher,
    follow,
    log_end,
)
from dagster_databus.consumer.filters import PartitionFilter
from dagster_databus.consumer.groups import GroupMember
from dagster_databus.consumer.ordering import IdempotentSink, log_lineage
from dagster_databus.core.events import ChangeEvent, Op
from dagster_databus.core.scn import Scn
from dagster_databus.errors import (
    ConsumerError,
    ConsumerPositionError,
    SnapshotMissingError,
    SubscriptionMismatchError,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import Manifest
from dagster_databus.storage.lake import Lake, as_lake

# The consumer interface and its parallel dispatcher are imported from here by callers, as before the split.
__all__ = ["DatabusClient", "DatabusConsumer", "ParallelDispatcher", "RunStats"]

@dataclass(slots=True)
class RunStats(DeliveryStats):
    checkpoint: Scn | None = None  # the checkpoint saved last

    def add(self, run: DeliveryStats) -> None:
        DeliveryStats.add(self, run)  # (a slotted dataclass cannot use super() without arguments)
        if isinstance(run, RunStats) and run.checkpoint is not None:
            self.checkpoint = run.checkpoint


class DatabusClient:
    """Delivers one source's change log to a consumer (or to N consumers in parallel).

    ``start``: where a client whose store holds no checkpoint starts, after this SCN (as a checkpoint at
    it would; one before the log's start bootstraps, or is refused without ``bootstrap``); without it such
    a client bootstraps, or starts at the log's start without ``bootstrap``.
    """

    def __init__(self, lake: Lake | str | Path, source: str, consumer: DatabusConsumer | Callable[[], DatabusConsumer],
                 tables: Sequence[str] | None = None, partition_filter: PartitionFilter | str | None = None,
                 checkpoints: CheckpointStore[ConsumerCheckpoint] | None = None, workers: int = 1, max_retries: int = 3,
                 bootstrap: bool = True, bootstrap_batch_rows: int = 10_000,
                 dedupe: IdempotentSink | bool = False, group: GroupMember | str | None = None,
                 checkpoint_every_windows: int = 1, checkpoint_every_s: float | None = None,
                 start: Scn | None = None) -> None:
        self.lake = as_lake(lake)
        self.source = source
        self.log = ChangeLog(self.lake, source)
        self._shapes = SchemaAnnouncer(self.log.schemas)
        self.tables = list(tables) if tables else None
        self.filter = PartitionFilter.parse(partition_filter) if isinstance(partition_filter, str) else partition_filter
        self.checkpoints = checkpoints or MemoryCheckpointStore()
        self.max_retries = max_retries
        self.allow_bootstrap = bootstrap
        self.bootstrap_batch_rows = bootstrap_batch_rows
        self.sink = IdempotentSink() if dedupe is True else None if dedupe is False else dedupe
        self.group = GroupMember.parse(group) if isinstance(group, str) else group
        self.coverage = Coverage.of(source, self.tables, self.filter, self.group)  # recorded in each checkpoint
        self.start = start
        self.lineage = ""  # of the log being delivered; set by run()
        if checkpoint_every_windows < 1 or (checkpoint_every_s is not None and checkpoint_every_s < 0):
            raise ValueError("checkpoint_every_windows must be >= 1 and checkpoint_every_s >= 0")
        # A checkpoint is saved after this many delivered windows or this many seconds, whichever
        # comes first, and always at the end of a run and before a failure is raised: a crash
        # redelivers at most the windows since the last save (at least once, never lost).
        self.checkpoint_every_windows = checkpoint_every_windows
        self.checkpoint_every_s = checkpoint_every_s
        self.dispatcher = dispatcher(consumer, workers)

    # -- subscription ------------------------------------------------------------------

    def _order(self, present: Sequence[str]) -> list[str]:
        return [t for t in self.tables if t in present] if self.tables else sorted(present)

    def _keep(self, table: str, key_json: str) -> bool:
        if self.tables is not None and table not in self.tables:
            return False
        if self.group is not None and not self.group.owns_encoded(key_json):
            return False
        return self.filter is None or self.filter.accepts_encoded(key_json)

    # -- running -----------------------------------------------------------------------

    def run(self, until: Scn | None = None) -> RunStats:
        """Deliver everything committed now (bootstrapping first when needed), then return."""
        stats = RunStats()
        checkpoint = self.checkpoints.load()
        manifest = self.log.manifest()
        self.lineage = log_lineage(self.source, manifest)
        saved = checkpoint
        if checkpoint is None and self.start is not None:
            checkpoint, saved = self._start_at(self.start, manifest), None  # saved at the end of the run at least
        elif checkpoint is not None and checkpoint.covers is not None and checkpoint.covers.source != self.source:
            raise self._mismatch(checkpoint, checkpoint.covers.gaps(self.coverage))
        stale = checkpoint is not None and self._stale(checkpoint, manifest)
        if checkpoint is None or stale:
            if not self.allow_bootstrap:
                if checkpoint is not None:
                    what = (f"start position SCN {checkpoint.scn} is before the change log of {self.source!r} starts"
                            if saved is None else
                            f"consumer checkpoint {checkpoint.scn} ({self._where()}) is older than the change log "
                            f"of {self.source!r} retains, or of a log or epoch it no longer holds (the source was "
                            "bootstrapped)")
                    raise ConsumerPositionError(
                        f"{what} (the log holds every change after SCN {manifest.start_scn}): starting there "
                        "would skip the changes in between",
                        "allow the consumer to bootstrap from the snapshots (leave out --no-bootstrap), or start "
                        f"a new checkpoint knowingly at or after SCN {manifest.start_scn} (--from-scn)",
                        source=self.source)
                checkpoint = saved = self._checkpoint(manifest.start_scn, manifest, {})
            else:
                if self.sink is not None:
                    # The snapshot restates every key, and positions held from before it may belong to a
                    # log since restarted whose SCNs went back: start this source's positions afresh.
                    self.sink.forget(self.source)
                checkpoint = saved = self._bootstrap(stats, manifest)
        else:
            self._check_resume(checkpoint, manifest)
        since = checkpoint.scn
        # Fixed now: later commits wait for the next run. Never past the log's end, so a checkpoint never is.
        committed = self.log.committed_scn()
        bound = min(until, committed) if until is not None else committed
        unsaved, saved_at = 0, time.monotonic()
        for window in self.log.read_windows(since, bound, keep=self._keep):
            events = [e for e in window.events if e.scn.value > checkpoint.table_floors.get(e.table, -1)]
            if events:
                self._shapes.window(window)
                try:
                    self._deliver(window.scn, since, events, stats, self._shapes)
                except ConsumerError:
                    if checkpoint is not saved:  # every window before this one was delivered in full
                        self._commit(checkpoint, stats)
                    raise
            since = window.scn
            checkpoint = self._checkpoint(window.scn, manifest, checkpoint.table_floors)
            unsaved += 1
            if unsaved >= self.checkpoint_every_windows or (
                    self.checkpoint_every_s is not None and time.monotonic() - saved_at >= self.checkpoint_every_s):
                self._commit(checkpoint, stats)
                saved, unsaved, saved_at = checkpoint, 0, time.monotonic()
        if bound > checkpoint.scn:  # the rest was filtered out: don't scan it again
            checkpoint = self._checkpoint(bound, manifest, checkpoint.table_floors)
        if checkpoint is not saved:
            self._commit(checkpoint, stats)
        return stats

    def follow(self, interval_s: float = 1.0, stop: Callable[[], bool] = lambda: False) -> RunStats:
        """Keep delivering as the log grows until ``stop()`` says so."""
        return follow(self.run, RunStats(), interval_s, stop)

    # -- positions ---------------------------------------------------------------------

    def _checkpoint(self, scn: Scn, manifest: Manifest, floors: dict[str, int]) -> ConsumerCheckpoint:
        """A checkpoint at ``scn`` of the log ``manifest`` describes, covering this client's subscription."""
        return ConsumerCheckpoint(scn=scn, epoch=manifest.epoch, table_floors=floors,
                                  log_id=manifest.log_id or None, covers=self.coverage)

    def _where(self) -> str:
        describe = getattr(self.checkpoints, "describe", None)
        return str(describe()) if callable(describe) else type(self.checkpoints).__name__

    @staticmethod
    def _stale(checkpoint: ConsumerCheckpoint, manifest: Manifest) -> bool:
        """Whether the log no longer continues ``checkpoint``: it starts after it, or it is a position of an
        epoch the log does not know or of another log (a restarted one, whose SCNs may have gone back)."""
        # A failover switched epochs but kept the log: positions of earlier epochs still place.
        foreign = (checkpoint.epoch is not None and manifest.epoch is not None
                   and not manifest.knows_epoch(checkpoint.epoch))
        # A restarted log (databus bootstrap) begins where the source was; a position of the log before it is
        # the same place only at that start.
        other_log = (checkpoint.log_id is not None and bool(manifest.log_id) and checkpoint.log_id != manifest.log_id
                     and checkpoint.scn != manifest.start_scn)
        return checkpoint.scn < manifest.start_scn or foreign or other_log

    def _start_at(self, start: Scn, manifest: Manifest) -> ConsumerCheckpoint:
        """The checkpoint a client without one starts from at ``start``; refused past the log's end."""
        end = log_end(manifest)
        if start > end:
            raise ConsumerPositionError(
                f"start position SCN {start} is past the end of the change log of {self.source!r}, which has "
                f"reached SCN {end}: the changes after {end} up to {start} would never be delivered once they "
                "are captured",
                f"start at or before SCN {end} (--from-scn {end} starts with the next change; databus status shows "
                "where the log is), or leave the start out to bootstrap from the snapshots", source=self.source)
        return self._checkpoint(start, manifest, {})

    def _check_resume(self, checkpoint: ConsumerCheckpoint, manifest: Manifest) -> None:
        """Refuse to resume ``checkpoint`` (the log continues it) where it would skip changes in silence."""
        end = log_end(manifest)
        if checkpoint.scn > end:
            nothing = "" if self.log.exists() else f" (there is no change log of {self.source!r} in this lake)"
            raise ConsumerPositionError(
                f"consumer checkpoint {checkpoint.scn} ({self._where()}) is past the end of the change log of "
                f"{self.source!r}, which has reached SCN {end}{nothing}: resuming would skip every change up to "
                f"{checkpoint.scn} once they are captured",
                "check that this is the lake and source the checkpoint was made with; a checkpoint started past the "
                f"end (--from-scn): delete it and start at or before SCN {end}; a log restored from an older copy: "
                "start the consumer afresh with a new checkpoint (it bootstraps from the snapshots)",
                source=self.source)
        if checkpoint.covers is not None and (gaps := checkpoint.covers.gaps(self.coverage)):
            raise self._mismatch(checkpoint, gaps)

    def _mismatch(self, checkpoint: ConsumerCheckpoint, gaps: list[str]) -> SubscriptionMismatchError:
        assert checkpoint.covers is not None
        if checkpoint.covers.source != self.source:
            return SubscriptionMismatchError(
                f"the checkpoint {self._where()} belongs to a consumer of source {checkpoint.covers.source!r}, "
                f"not {self.source!r}", "give each source's consumer its own checkpoint (another --checkpoint file "
                "or --consumer name)", source=self.source)
        return SubscriptionMismatchError(
            f"the checkpoint {self._where()} was kept at SCN {checkpoint.scn} for {checkpoint.covers.describe()}; "
            f"this consumer subscribes to {self.coverage.describe()}: {'; '.join(gaps)}. Resuming would silently "
            f"skip what was added: its bootstrap and every change of it up to SCN {checkpoint.scn}",
            "give this subscription its own checkpoint (another --checkpoint file or --consumer name): it "
            "bootstraps every table it names; or resume with the checkpoint's subscription, or a narrower one "
            "(fewer tables, fewer partitions); or, to skip what came before knowingly, start a new checkpoint "
            f"with --no-bootstrap --from-scn {checkpoint.scn} (Python: bootstrap=False, start=)",
            source=self.source)

    def close(self) -> None:
        self.dispatcher.close()

    def _commit(self, checkpoint: ConsumerCheckpoint, stats: RunStats) -> None:
        self.checkpoints.save(checkpoint)
        self.dispatcher.broadcast("on_checkpoint", checkpoint.scn)
        stats.checkpoint = checkpoint.scn

    def _deliver(self, scn: Scn, start: Scn, events: list[ChangeEvent], stats: RunStats,
                 shapes: SchemaAnnouncer | None = None) -> None:
        def failure(exc: Exception, attempts: int) -> ConsumerError:
            return ConsumerError(
                f"window {scn} of source {self.source!r} failed {attempts} times in the consumer: {exc}",
                "fix the consumer; the next run redelivers this window from its start "
                f"(the checkpoint is still {start})", source=self.source)

        deliver_window(self.dispatcher, self.sink, self.lineage, scn, start, events, self._order,
                       self.max_retries, stats, failure, shapes)

    # -- bootstrap ---------------------------------------------------------------------

    def _bootstrap(self, stats: RunStats, manifest: Manifest) -> ConsumerCheckpoint:
        from dagster_databus.dataplane.delta import DeltaSnapshot

        available = self.lake.objects.folders(f"snapshot/{self.source}/")
        tables = self._order(self.tables or available)
        snapshots = {t: DeltaSnapshot(self.lake, self.source, t) for t in tables}
        floors: dict[str, int] = {}
        for table, snap in snapshots.items():
            applied = snap.applied_scn()
            if applied is None:
                known = sorted(set(available) | set(self.lake.objects.folders(self.log.schemas.prefix)))
                if table not in known:
                    raise SnapshotMissingError(
                        f"consumer of {self.source!r} subscribes to table {table!r}, which is neither in the change "
                        f"log of {self.source!r} nor in its snapshots (tables there: {', '.join(known) or 'none'})",
                        "check the table's name; a table must be one of the source's configured tables, "
                        "captured and materialized, before consumers can read it", source=self.source)
                raise SnapshotMissingError(
                    f"consumer of {self.source!r} must bootstrap, but table {table!r} has no snapshot",
                    f"materialize {self.source}/{table} first")
            floors[table] = applied.value
        start = Scn(min(floors.values(), default=0))
        self.dispatcher.broadcast("on_start_bootstrap", start)
        for table in tables:
            for batch in self._snapshot_batches(snapshots[table], table):
                scn = Scn(floors[table])
                self._deliver(scn, start, batch, stats)
                stats.bootstrap_rows += len(batch)
        self.dispatcher.broadcast("on_end_bootstrap", start)
        stats.bootstrapped = True
        checkpoint = self._checkpoint(start, manifest, floors)
        self._commit(checkpoint, stats)
        return checkpoint

    def _snapshot_batches(self, snap: Any, table: str) -> Iterator[list[ChangeEvent]]:
        data = snap.read(with_meta=True)
        schema = self.log.schemas.latest(table)
        key_columns = list(schema[1].primary_key) if schema else [data.column_names[0]]
        batch: list[ChangeEvent] = []
        # A row's seq is its place in the snapshot as read, counted before any filter or group drops rows:
        # every consumer of this snapshot gives the row the same (scn, seq), whatever it keeps.
        for seq, row in enumerate(schema[1].rows_from_arrow(data) if schema else data.to_pylist()):
            key = [row[k] for k in key_columns]
            if self.filter is not None and not self.filter.accepts(key):
                continue
            if self.group is not None and not self.group.owns(key):
                continue
            image = {k: v for k, v in row.items() if not k.startswith("__")}
            commit = row.get("__commit_ts")
            batch.append(ChangeEvent(scn=Scn(row["__scn"]), seq=seq, table=table, op=Op.INSERT,
                                     key=tuple(key), row=image,
                                     commit_ts_ms=int(commit.timestamp() * 1000) if commit else 0))
            if len(batch) >= self.bootstrap_batch_rows:
                yield batch
                batch = []
        if batch:
            yield batch
