"""Consumers of a *logical* table: one table sharded over several sources, read as one stream (as Canal's
group event parser and sink read a database split into shards).

A logical table (``config.logical_tables``) names its parts: a physical table of a configured
source, each with a label. Its change stream is every part's change log, read for that part's
table only, with each event

* renamed to the logical table,
* given the shard column (``shard_column``) set to the part's label when the physical row has
  no such column (when it has one, its value is used),
* keyed ``(shard value, *primary key)`` (the primary key without the shard column when it is
  part of it, as the logical snapshot keys rows), so equal keys on different shards stay apart,
* wrapped in a ``LogicalEvent`` that also names the part, its source and physical table.

**Order.** Each part is delivered strictly in its own log's SCN order, one source window at a
time (the part table's events of one consistency window, whole). SCNs of different sources are
unrelated, so there is no true order across parts; the parts are interleaved by commit time for
readability with ``heapq.merge``, which only ever picks among the parts' next windows and so
never reorders a part, even when a source clock jumps back.

**Checkpoint.** A vector: per part, the SCN (and epoch) of the last window delivered
(``LogicalCheckpoint``, kept by any ``checkpoints.CheckpointStore``: a JSON file replaced atomically with
``FileLogicalCheckpointStore``, numbered versions in the lake with ``lake_logical_checkpoints``).
Each part resumes at its own position; a part moves only after ``on_end_data_event_sequence`` of
its window succeeded. At least once, never a gap: a killed consumer gets again at most the window
it was in. A callback that raises (or returns False) rolls the window back: ``on_rollback`` with
the part's checkpoint SCN, then the window again from its start, up to ``max_retries`` times.

The callbacks are ``delivery.DatabusConsumer``'s. ``on_start_data_event_sequence``,
``on_end_data_event_sequence``, ``on_checkpoint`` and ``on_rollback`` get the *part's* SCN;
``on_start_source``/``on_end_source`` get the logical table's name; ``event.part`` names the part.

``group=GroupMember(i, n)`` splits the stream over a consumer group by logical key
(``groups.KeyRouter``): each key reaches one member, in order. The checkpoint records the member,
and a run as another member its keys are not within is refused (``SubscriptionMismatchError``: it
would skip their changes up to the checkpoint), as ``coverage`` describes. ``dedupe=`` adds an
``ordering.IdempotentSink`` whose positions are per part lineage.

With ``bootstrap=True``, a consumer with no checkpoint, or one a part's log can no longer
continue, first gets the logical Delta table (``sync/logical/``) as inserts, every part at
the SCN that table holds it at (one table version), then each part's log after that SCN: no gap,
nothing twice. Without it, a part with no checkpoint starts at the oldest change its log holds,
or at ``start[label]``, and a part whose checkpoint is older than its log retains, or from a log
that was restarted since, raises ``LogicalCheckpointError``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_databus.config import DatabusConfig, LogicalTableConfig
from dagster_databus.consumer.checkpoints import (
    CheckpointStore,
    ConsumerCheckpoint,
    FileStore,
    LakeCheckpointStore,
    MemoryStore,
)
from dagster_databus.consumer.coverage import member_within
from dagster_databus.consumer.delivery import (
    DatabusConsumer,
    DeliveryStats,
    deliver_window,
    dispatcher,
    follow,
)
from dagster_databus.consumer.groups import GroupMember
from dagster_databus.consumer.ordering import IdempotentSink, log_lineage
from dagster_databus.core.events import ChangeEvent, Op
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConsumerError, LogicalCheckpointError, SubscriptionMismatchError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import Manifest
from dagster_databus.log.parts import PartLog
from dagster_databus.storage.lake import Lake, as_lake

FORMAT = 1


@dataclass(frozen=True, slots=True)
class LogicalEvent(ChangeEvent):
    """A change of a logical table: a part's ``ChangeEvent`` renamed, keyed and labelled, so consumers
    written for ``ChangeEvent`` work unchanged. ``table`` is the logical table, ``key`` is (shard value,
    *physical primary key), ``row`` has the shard column. ``scn`` is the part's own log SCN: compare it
    only with SCNs of the same ``part``.
    """

    part: str  # the part's label
    source: str
    physical_table: str


# -- checkpoints -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartPosition:
    """One part's place: every window of ``source``.``table`` at or below ``scn`` was delivered."""

    source: str
    table: str
    checkpoint: ConsumerCheckpoint

    @property
    def scn(self) -> Scn:
        return self.checkpoint.scn


@dataclass(frozen=True, slots=True)
class LogicalCheckpoint:
    """The checkpoint vector of a logical-table consumer: a position per part label, and the group member
    (``"index/size"``) it was kept for; None: no group, or a checkpoint written before members were recorded
    (it records the member at its next save)."""

    table: str
    parts: dict[str, PartPosition] = field(default_factory=dict)
    group: str | None = None

    def scns(self) -> dict[str, Scn]:
        return {label: p.scn for label, p in self.parts.items()}

    def to_json(self) -> dict[str, Any]:
        doc = {"format": FORMAT, "logical_table": self.table,
               "parts": {label: {"source": p.source, "table": p.table, **p.checkpoint.to_json()}
                         for label, p in sorted(self.parts.items())}}
        return doc | ({"group": self.group} if self.group is not None else {})

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str = "") -> LogicalCheckpoint:
        """The vector ``to_json`` wrote; ``where`` names the document in the error for another format."""
        if doc.get("format") != FORMAT:
            raise LogicalCheckpointError(
                f"logical checkpoint {where} has format {doc.get('format')!r}; this version reads {FORMAT}",
                "upgrade dagster-databus, or start the consumer afresh (a new checkpoint file, or a new consumer "
                "name for a checkpoint in the lake)")
        return cls(table=doc["logical_table"], parts={
            label: PartPosition(p["source"], p["table"], ConsumerCheckpoint.from_json(p))
            for label, p in doc["parts"].items()}, group=doc.get("group"))


class FileLogicalCheckpointStore(FileStore[LogicalCheckpoint]):
    """A logical-table consumer's checkpoint vector in a JSON file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, lambda doc: LogicalCheckpoint.from_json(doc, str(path)))


class MemoryLogicalCheckpointStore(MemoryStore[LogicalCheckpoint]):
    """A logical-table consumer's checkpoint vector in memory (the default: kept as long as its client)."""


def lake_logical_checkpoints(lake: Lake | str | Path, table: str, consumer: str) -> LakeCheckpointStore:
    """A logical-table consumer's checkpoint vector kept in the lake as numbered versions created only
    if absent (``LakeCheckpointStore``): a second instance of the consumer is fenced, on a local disk
    or in an object store alike."""
    return LakeCheckpointStore(as_lake(lake).objects, f"consumers/logical/{table}/{consumer}/checkpoint",
                               lambda doc: LogicalCheckpoint.from_json(doc, f"of consumer {consumer!r}"))


# -- the client --------------------------------------------------------------------------


@dataclass(slots=True)
class LogicalRunStats(DeliveryStats):  # windows: part windows delivered
    positions: dict[str, Scn] = field(default_factory=dict)  # the checkpoint vector after the run

    def add(self, run: DeliveryStats) -> None:
        DeliveryStats.add(self, run)  # (a slotted dataclass cannot use super() without arguments)
        if isinstance(run, LogicalRunStats):
            self.positions = run.positions


@dataclass(frozen=True, slots=True)
class _Part(PartLog):
    index: int  # config order: breaks commit-time ties between parts, stably


@dataclass(frozen=True, slots=True)
class _PartWindow:
    part: _Part
    scn: Scn
    events: tuple[LogicalEvent, ...]  # may be empty: the group member owns none of the window's keys
    commit_ts_ms: int


class LogicalTableClient:
    """Delivers a logical table's change stream to a consumer (or N consumers on N threads)."""

    def __init__(self, lake: Lake | str | Path, table: LogicalTableConfig,
                 consumer: DatabusConsumer | Callable[[], DatabusConsumer],
                 checkpoints: CheckpointStore[LogicalCheckpoint] | None = None, group: GroupMember | str | None = None,
                 dedupe: IdempotentSink | bool = False, workers: int = 1, max_retries: int = 3,
                 start: Mapping[str, Scn] | None = None, bootstrap: bool = False,
                 bootstrap_batch_rows: int = 10_000) -> None:
        self.lake = as_lake(lake)
        self.table = table
        self.parts = [_Part(p, ChangeLog(self.lake, p.source), i) for i, p in enumerate(table.parts)]
        self.checkpoints = checkpoints or MemoryLogicalCheckpointStore()
        self.group = GroupMember.parse(group) if isinstance(group, str) else group
        self.member = f"{self.group.index}/{self.group.size}" if self.group is not None else None  # as recorded
        self.sink = IdempotentSink() if dedupe is True else None if dedupe is False else dedupe
        self.max_retries = max_retries
        unknown = sorted(set(start or {}) - {p.label for p in self.parts})
        if unknown:
            raise LogicalCheckpointError(f"start names parts {unknown} that logical table {table.name!r} lacks",
                                         f"use part labels: {', '.join(p.label for p in self.parts)}")
        self.start = dict(start or {})
        self.bootstrap, self.bootstrap_batch_rows = bootstrap, bootstrap_batch_rows
        self._lineages: dict[str, str] = {}
        self._primary_keys: dict[str, tuple[str, ...]] = {}
        self.dispatcher = dispatcher(consumer, workers)

    @classmethod
    def from_config(cls, config: DatabusConfig, name: str,
                    consumer: DatabusConsumer | Callable[[], DatabusConsumer], **options: Any) -> LogicalTableClient:
        return cls(config.lake, config.logical_table(name), consumer, **options)

    # -- positions -------------------------------------------------------------------

    def _resume(self, part: _Part, held: PartPosition | None, manifest: Manifest) -> PartPosition:
        """Where ``part`` continues, refusing positions its log cannot continue from."""
        label, source, table = part.label, part.config.source, part.config.table
        if held is None:
            scn = self.start.get(label, manifest.start_scn)
            held = PartPosition(source, table, ConsumerCheckpoint(scn=scn, epoch=manifest.epoch))
        elif (held.source, held.table) != (source, table):
            raise LogicalCheckpointError(
                f"the checkpoint of part {label!r} of logical table {self.table.name!r} is for "
                f"{held.source}.{held.table}, but the part is now {source}.{table}",
                "the part was re-pointed: start this consumer with a new checkpoint file (and a fresh copy of "
                "the logical table), or restore the part's previous source and table in the config")
        epoch = held.checkpoint.epoch
        foreign = epoch is not None and manifest.epoch is not None and not manifest.knows_epoch(epoch)
        # A log only grows, so a checkpoint past its end means the log was restarted with lower SCNs.
        ahead = held.scn > manifest.last_scn
        if held.scn < manifest.start_scn or foreign or ahead:
            if foreign:
                why = f"belongs to epoch {epoch}, but the log of {source!r} was restarted (epoch {manifest.epoch})"
            elif ahead:
                why = (f"is SCN {held.scn}, past the end ({manifest.last_scn}) of the log of {source!r}: the log "
                       "was restarted")
            else:
                why = (f"is SCN {held.scn}, but the log of {source!r} now starts after {manifest.start_scn} "
                       "(retention or a bootstrap dropped what is between)")
            raise LogicalCheckpointError(
                f"part {label!r} ({source}.{table}) of logical table {self.table.name!r}: its checkpoint {why}; "
                "resuming would silently skip changes",
                f"rebuild this consumer's copy of {source}.{table} from its snapshot (DatabusClient bootstraps "
                f"one source), then set part {label!r} in the checkpoint file to the snapshot's SCN, or pass it "
                "as start= with a new checkpoint file", part=label, source=source)
        return held

    # -- the stream ------------------------------------------------------------------

    def _key_columns(self, part: _Part) -> tuple[str, ...]:
        if part.label not in self._primary_keys:
            latest = part.log.schemas.latest(part.config.table)
            self._primary_keys[part.label] = latest[1].primary_key if latest else ()
        return self._primary_keys[part.label]

    def _logical(self, part: _Part, event: ChangeEvent) -> LogicalEvent:
        column = self.table.shard_column
        if column in event.row:
            shard, row = event.row[column], event.row
        else:
            shard, row = part.label, {column: part.label, **event.row}
        # The logical key, as the logical snapshot keys its rows: the shard first, then the primary
        # key without the shard column when that is part of it.
        names = self._key_columns(part)
        rest = event.key if len(names) != len(event.key) else tuple(
            v for name, v in zip(names, event.key, strict=True) if name != column)
        return LogicalEvent(scn=event.scn, seq=event.seq, table=self.table.name, op=event.op,
                            key=(shard, *rest), row=row, commit_ts_ms=event.commit_ts_ms,
                            part=part.label, source=part.config.source, physical_table=part.config.table)

    def _windows(self, part: _Part, since: Scn, bound: Scn) -> Iterator[_PartWindow]:
        for window in part.log.read_windows(since, bound, tables=[part.config.table]):
            events = tuple(self._logical(part, e) for e in window.events)
            if self.group is not None:
                events = tuple(e for e in events if self.group.owns(e.key))
            yield _PartWindow(part, window.scn, events, window.events[-1].commit_ts_ms)

    def _stream(self, positions: Mapping[str, Scn], bounds: Mapping[str, Scn]) -> Iterator[_PartWindow]:
        """Each part's windows in (position, bound], merged by commit time without reordering a part:
        ``heapq.merge`` only compares the parts' next windows, so a part whose clock went back just
        comes out of commit-time order, never out of its own SCN order."""
        return heapq.merge(*(self._windows(p, positions[p.label], bounds[p.label]) for p in self.parts
                             if p.label in positions),
                           key=lambda w: (w.commit_ts_ms, w.part.index))

    # -- running ---------------------------------------------------------------------

    def run(self, until: Mapping[str, Scn] | None = None) -> LogicalRunStats:
        """Deliver everything committed now in every part's log (or up to ``until[label]``), then return."""
        stats = LogicalRunStats()
        saved = self.checkpoints.load()
        if saved is not None and saved.table != self.table.name:
            raise LogicalCheckpointError(
                f"the checkpoint is for logical table {saved.table!r}, not {self.table.name!r}",
                "give each logical table's consumer its own checkpoint file")
        if saved is not None and saved.group is not None and (
                self.member is None or not member_within(self.member, saved.group)):
            raise SubscriptionMismatchError(
                f"the checkpoint of logical table {self.table.name!r} was kept for group member {saved.group}; this "
                f"consumer is {'member ' + self.member if self.member else 'not in a group'}, so it owns keys the "
                f"checkpoint never covered: resuming would silently skip their changes up to it",
                f"run as member {saved.group} with this checkpoint (or a member within it: one of a group whose "
                "size it divides, with the same index modulo it); give another member its own checkpoint file "
                "(or consumer name)")
        vector: dict[str, PartPosition] = {}
        bounds: dict[str, Scn] = {}
        epochs: dict[str, str | None] = {}
        manifests = {part.label: part.log.manifest() for part in self.parts}
        for part in self.parts:
            self._lineages[part.label] = log_lineage(part.config.source, manifests[part.label])
            epochs[part.label] = manifests[part.label].epoch
        if self.bootstrap and saved is None:
            saved = self._bootstrap(manifests, stats)
        for part in self.parts:
            manifest = manifests[part.label]
            held = saved.parts.get(part.label) if saved else None
            if held is None and not part.log.exists():
                continue  # nothing captured yet: the part starts wherever its log will start
            try:
                vector[part.label] = self._resume(part, held, manifest)
            except LogicalCheckpointError:
                if not self.bootstrap or stats.bootstrapped:
                    raise
                saved = self._bootstrap(manifests, stats)  # the snapshot is the way past the gap
                vector[part.label] = self._resume(part, saved.parts[part.label], manifest)
            # Fixed now, per part: later commits wait for the next run.
            bounds[part.label] = (until or {}).get(part.label, manifest.last_scn)
        for window in self._stream({label: p.scn for label, p in vector.items()}, bounds):
            part = window.part
            if window.events:
                self._deliver(window, vector[part.label].scn, stats)
            vector[part.label] = PartPosition(part.config.source, part.config.table,
                                              ConsumerCheckpoint(scn=window.scn, epoch=epochs[part.label]))
            if window.events:
                self._commit(vector, window.scn)
        for label, bound in bounds.items():  # the rest of a part was other tables or other members' keys
            held = vector[label]
            if bound > held.scn:
                vector[label] = PartPosition(held.source, held.table,
                                             ConsumerCheckpoint(scn=bound, epoch=epochs[label]))
        if saved is None or vector != saved.parts or saved.group != self.member:
            self.checkpoints.save(LogicalCheckpoint(self.table.name, dict(vector), self.member))
        stats.positions = {label: p.scn for label, p in vector.items()}
        return stats

    def _bootstrap(self, manifests: Mapping[str, Manifest], stats: LogicalRunStats) -> LogicalCheckpoint:
        """Deliver the logical table as inserts, each part at its SCN there; return the checkpoint after it."""
        from dagster_databus.dataplane.logical import PART_COLUMN, LogicalSnapshot

        data, scns = LogicalSnapshot(self.lake, self.table.name).read_pinned([p.label for p in self.parts])
        first = min(scns.values())
        self.dispatcher.broadcast("on_start_bootstrap", first)
        latest = self.parts[0].log.schemas.latest(self.parts[0].config.table)  # every part has the same columns
        rows = latest[1].rows_from_arrow(data) if latest is not None else data.to_pylist()
        for part in self.parts:
            if self.sink is not None:  # the snapshot restates every key of the part
                self.sink.forget(part.config.source)
            scn, batch = scns[part.label], []
            # seq: the row's place among the part's rows as read, before the group drops any (as
            # DatabusClient numbers a snapshot's rows): every member gives a row the same (scn, seq).
            for seq, row in enumerate(r for r in rows if r[PART_COLUMN] == part.label):
                image = {k: v for k, v in row.items() if not k.startswith("__")}
                event = self._logical(part, ChangeEvent(
                    scn=Scn(row["__scn"]), seq=seq, table=part.config.table, op=Op.INSERT,
                    key=tuple(row[k] for k in self._key_columns(part)), row=image,
                    commit_ts_ms=int(row["__commit_ts"].timestamp() * 1000) if row.get("__commit_ts") else 0))
                if self.group is not None and not self.group.owns(event.key):
                    continue
                batch.append(event)
                if len(batch) >= self.bootstrap_batch_rows:
                    self._deliver(_PartWindow(part, scn, tuple(batch), 0), scn, stats)
                    stats.bootstrap_rows, batch = stats.bootstrap_rows + len(batch), []
            if batch:
                self._deliver(_PartWindow(part, scn, tuple(batch), 0), scn, stats)
                stats.bootstrap_rows += len(batch)
        self.dispatcher.broadcast("on_end_bootstrap", first)
        stats.bootstrapped = True
        checkpoint = LogicalCheckpoint(self.table.name, {
            p.label: PartPosition(p.config.source, p.config.table,
                                  ConsumerCheckpoint(scn=scns[p.label], epoch=manifests[p.label].epoch))
            for p in self.parts}, self.member)
        self.checkpoints.save(checkpoint)
        return checkpoint

    def follow(self, interval_s: float = 1.0, stop: Callable[[], bool] = lambda: False) -> LogicalRunStats:
        """Keep delivering as the parts' logs grow until ``stop()`` says so."""
        return follow(self.run, LogicalRunStats(), interval_s, stop)

    def close(self) -> None:
        self.dispatcher.close()

    def _commit(self, vector: dict[str, PartPosition], scn: Scn) -> None:
        self.checkpoints.save(LogicalCheckpoint(self.table.name, dict(vector), self.member))  # a copy: stores keep it
        self.dispatcher.broadcast("on_checkpoint", scn)

    def _deliver(self, window: _PartWindow, start: Scn, stats: LogicalRunStats) -> None:
        label = window.part.label

        def failure(exc: Exception, attempts: int) -> ConsumerError:
            return ConsumerError(
                f"window {window.scn} of part {label!r} ({window.part.config.source}.{window.part.config.table}) "
                f"of logical table {self.table.name!r} failed {attempts} times in the consumer: {exc}",
                "fix the consumer; the next run redelivers this window from its start (the part's "
                f"checkpoint is still {start})", part=label)

        deliver_window(self.dispatcher, self.sink, self._lineages[label], window.scn, start, window.events,
                       lambda tables: tables, self.max_retries, stats, failure)
