"""The Databus client: delivers the change log to consumer callbacks, window by window.

Callbacks (Databus's consumer callbacks → here): onStartDataEventSequence → ``on_start_data_event_sequence``,
onStartSource → ``on_start_source``, onDataEvent → ``on_data_event``, onEndSource →
``on_end_source``, onEndDataEventSequence → ``on_end_data_event_sequence``, onCheckpoint →
``on_checkpoint``, onRollback → ``on_rollback``, onError → ``on_error``. Before a table's first event
in a run, and before its first event in a new schema version (a column added, a type widened),
``on_schema_change(table, version, schema)`` says the shape of the rows that follow.

Events arrive in SCN order, one consistency window at a time, grouped per table in the
subscription order. A callback that raises (or returns False) rolls the window back:
``on_rollback`` is called and the window is delivered again from its start. The checkpoint
moves only after ``on_end_data_event_sequence`` succeeds: at least once, never a gap.

``dedupe=`` puts an ``ordering.IdempotentSink`` in front of the consumer: events at or before the
position the sink already applied for their key (replays after a restart from an older
checkpoint, or after a crash between the consumer's commit and the checkpoint's) are discarded
before they reach a callback. A rolled-back window was not applied, so it is delivered again.
``group=`` makes this client one member of a consumer group split by key (``ordering.KeyRouter``).

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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dagster_databus.consumer.checkpoints import CheckpointStore, ConsumerCheckpoint, MemoryCheckpointStore
from dagster_databus.consumer.coverage import Coverage
from dagster_databus.consumer.filters import PartitionFilter
from dagster_databus.consumer.ordering import Change, GroupMember, IdempotentSink, KeyRouter, log_lineage
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import (
    CallbackFailed,
    ConsumerError,
    ConsumerPositionError,
    SnapshotMissingError,
    SubscriptionMismatchError,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import Manifest
from dagster_databus.storage.lake import Lake, as_lake


class DatabusConsumer:
    """Override the callbacks you need. Raise, or return False, to roll the current window back."""

    def on_start_bootstrap(self, scn: Scn) -> Any: ...
    def on_end_bootstrap(self, scn: Scn) -> Any: ...
    def on_start_data_event_sequence(self, scn: Scn) -> Any: ...
    def on_start_source(self, table: str) -> Any: ...
    def on_schema_change(self, table: str, version: int, schema: TableSchema) -> Any: ...
    def on_data_event(self, event: ChangeEvent) -> Any: ...
    def on_end_source(self, table: str) -> Any: ...
    def on_end_data_event_sequence(self, scn: Scn) -> Any: ...
    def on_checkpoint(self, scn: Scn) -> Any: ...
    def on_rollback(self, scn: Scn) -> Any: ...
    def on_error(self, error: BaseException) -> Any: ...


def _call(consumer: DatabusConsumer, name: str, *args: Any) -> None:
    if getattr(consumer, name)(*args) is False:
        raise CallbackFailed(f"{type(consumer).__name__}.{name} returned False")


class SequentialDispatcher:
    def __init__(self, consumer: DatabusConsumer) -> None:
        self.consumer = consumer

    def broadcast(self, name: str, *args: Any) -> None:
        _call(self.consumer, name, *args)

    def data(self, event: Change) -> None:
        _call(self.consumer, "on_data_event", event)

    def drain(self) -> None:
        """Nothing is ever pending."""

    def close(self) -> None:
        """No threads to stop."""


def dispatcher(consumer: DatabusConsumer | Callable[[], DatabusConsumer],
               workers: int) -> SequentialDispatcher | ParallelDispatcher:
    """The consumer called in order on the caller's thread, or ``workers`` consumers from the factory
    ``consumer`` on threads of their own."""
    if workers <= 1:
        return SequentialDispatcher(consumer if isinstance(consumer, DatabusConsumer) else consumer())
    if not callable(consumer) or isinstance(consumer, DatabusConsumer):
        raise ValueError("parallel dispatch needs a consumer factory (one consumer per worker)")
    return ParallelDispatcher([consumer() for _ in range(workers)])


class ParallelDispatcher:
    """N consumers on N threads (Databus's parallel consumer execution): data events are dispatched by key, so
    each key's events stay in order on one worker; boundaries are broadcast with barriers:

    ====================  ===========  =============
    callback              delivery     barrier
    ====================  ===========  =============
    start sequence        broadcast    before/after
    start source          broadcast    before
    data event            dispatch     none
    checkpoint, error     broadcast    before/after
    end source, sequence  broadcast    before/after
    rollback              broadcast    after
    ====================  ===========  =============
    """

    AFTER = {"on_start_data_event_sequence", "on_checkpoint", "on_error", "on_end_source", "on_schema_change",
             "on_end_data_event_sequence", "on_rollback", "on_start_bootstrap", "on_end_bootstrap"}

    def __init__(self, consumers: Sequence[DatabusConsumer]) -> None:
        self.consumers = list(consumers)
        self.workers = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"databus-worker-{i}")
                        for i in range(len(consumers))]
        self.pending: list[Future[None]] = []
        self.router = KeyRouter(len(self.consumers))

    def _wait(self, futures: list[Future[None]]) -> None:
        errors = [f.exception() for f in futures]
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed

    def drain(self) -> None:
        pending, self.pending = self.pending, []
        self._wait(pending)

    def broadcast(self, name: str, *args: Any) -> None:
        if name != "on_rollback":
            self.drain()  # barrier before
        else:
            for future in self.pending:  # let in-flight work finish, whatever its outcome
                future.exception()
            self.pending = []
        futures = [w.submit(_call, c, name, *args) for w, c in zip(self.workers, self.consumers, strict=True)]
        if name in self.AFTER:
            self._wait(futures)
        else:
            self.pending += futures

    def data(self, event: Change) -> None:
        i = self.router.member(event.key)  # the product's one key hash: the same worker for a key, always
        self.pending.append(self.workers[i].submit(_call, self.consumers[i], "on_data_event", event))

    def close(self) -> None:
        for worker in self.workers:
            worker.shutdown(wait=True)


@dataclass(slots=True)
class DeliveryStats:
    """What a run delivered; ``follow`` adds its runs' up."""

    windows: int = 0
    events: int = 0
    rollbacks: int = 0
    discarded: int = 0  # events the dedupe sink dropped as stale or duplicate
    bootstrapped: bool = False
    bootstrap_rows: int = 0

    def add(self, run: DeliveryStats) -> None:
        """Count a later run into these totals."""
        self.windows += run.windows
        self.events += run.events
        self.rollbacks += run.rollbacks
        self.discarded += run.discarded
        self.bootstrapped = self.bootstrapped or run.bootstrapped
        self.bootstrap_rows += run.bootstrap_rows


Stats = TypeVar("Stats", bound=DeliveryStats)


def follow(run: Callable[[], Stats], total: Stats, interval_s: float, stop: Callable[[], bool]) -> Stats:
    """The consumers' follow loop: ``run`` until ``stop()`` says so, pausing ``interval_s`` after a run that
    found nothing new; returns ``total`` with every run added."""
    while not stop():
        stats = run()
        total.add(stats)
        if not stats.windows:
            time.sleep(interval_s)
    return total


class SchemaAnnouncer:
    """Tells consumers the shape of a table's rows before the first row in it: ``on_schema_change`` (table,
    schema version, ``TableSchema``) once per table per run, and again whenever the columns change (two
    versions with the same columns, which a capture restart can register, are one shape)."""

    def __init__(self, log: ChangeLog) -> None:
        self.log = log
        self.told: dict[str, str] = {}  # table -> fingerprint of the shape last announced
        self.last: dict[str, int] = {}  # table -> the version of its last event (the common case: unchanged)
        self.versions: dict[int, int] = {}  # id(event) -> its schema version, for the window being delivered

    def window(self, window: Window) -> None:
        self.versions = ({id(e): v for e, v in zip(window.events, window.schema_versions, strict=True)}
                         if window.schema_versions else {})

    def before(self, dispatcher: Any, event: Change) -> None:
        version = self.versions.get(id(event))
        if version is None or self.last.get(event.table) == version:
            return
        self.last[event.table] = version
        schema = self.log.schemas.load(event.table, version)
        if self.told.get(event.table) != schema.fingerprint():
            dispatcher.broadcast("on_schema_change", event.table, version, schema)
            self.told[event.table] = schema.fingerprint()


def deliver_window(dispatcher: Any, sink: IdempotentSink | None, lineage: str, scn: Scn, start: Scn,
                   events: Sequence[Change], order: Callable[[list[str]], list[str]], max_retries: int,
                   stats: DeliveryStats, failure: Callable[[Exception, int], ConsumerError],
                   shapes: SchemaAnnouncer | None = None) -> None:
    """Deliver one window, grouped per table in ``order``, with the rollback-and-retry protocol.

    A callback that raises rolls the window back (``on_rollback``) and it is delivered again from
    its start, up to ``max_retries`` times; then ``on_error`` and the error ``failure`` builds. With
    a dedupe ``sink``, events are admitted afresh on every attempt (a rollback forgets the failed
    one's) and held only once ``on_end_data_event_sequence`` succeeded, before the checkpoint moves:
    a crash in between redelivers a window the sink then discards. With ``shapes``, a table's events in a
    schema version the consumer was not told of yet are preceded by ``on_schema_change``.
    """
    for attempt in range(max_retries + 1):
        admitted = list(events) if sink is None else [e for e in events if sink.admit(e, lineage)]
        if not admitted:  # all already applied by this sink: nothing to redo
            _commit_sink(sink, stats)
            return
        by_table: dict[str, list[Change]] = {}
        for event in admitted:
            by_table.setdefault(event.table, []).append(event)
        try:
            dispatcher.broadcast("on_start_data_event_sequence", scn)
            for table in order(list(by_table)):
                dispatcher.broadcast("on_start_source", table)
                for event in by_table[table]:
                    if shapes is not None:
                        shapes.before(dispatcher, event)
                    dispatcher.data(event)
                dispatcher.broadcast("on_end_source", table)
            dispatcher.broadcast("on_end_data_event_sequence", scn)
            _commit_sink(sink, stats)
            stats.windows += 1
            stats.events += len(admitted)
            return
        except Exception as exc:
            if sink is not None:
                sink.rollback()
            stats.rollbacks += 1
            dispatcher.broadcast("on_rollback", start)
            if attempt == max_retries:
                dispatcher.broadcast("on_error", exc)
                raise failure(exc, attempt + 1) from exc


def _commit_sink(sink: IdempotentSink | None, stats: DeliveryStats) -> None:
    if sink is None:
        return
    before = sink.discarded
    sink.commit()
    stats.discarded += sink.discarded - before


def log_end(manifest: Manifest) -> Scn:
    """The last position a change log has reached: its checkpoint, which polls that found nothing for it move
    past the last event (``last_scn``). Every change up to it is in the log, so a consumer may start or stand
    anywhere up to it; a position after it is one the log has not reached."""
    checkpoint = manifest.checkpoint
    return max(manifest.last_scn, checkpoint.scn) if checkpoint is not None else manifest.last_scn


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
        self._shapes = SchemaAnnouncer(self.log)
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
