"""Per-key ordering across consumers, and a sink that discards stale or duplicate changes.

A Canal + Kafka pipeline keeps a key's changes in order in two steps, and so does this module:

1. **Route by key.** Every change of one primary key goes to the same member of a consumer
   group, so the member sees that key's changes in log order. ``KeyRouter`` (in ``consumer.groups``
   with ``GroupMember``, and named here too) is the one hash the product uses for this:
   ``crc32(encoded key) % N`` (``core.events.key_partition`` over ``core.events.encode_key``).
   ``ParallelDispatcher`` and the crc32 branch of ``mod`` partition filters use the same function,
   so a key lands on the same member in every run, process and Python version (no ``hash()``,
   which is salted per process).

2. **Guard the sink.** Redelivery is normal: at-least-once restarts, a pull consumer's
   rollback of batches it had already written, windows replayed out of order. ``IdempotentSink``
   keeps, per ``(table, key)``, the position of the last change it applied and discards a change
   at or before that position: *duplicate* when equal, *stale* when older. Discards are counted
   by reason. The held positions are persisted (``FilePositionStore``: JSON, fsync + atomic
   rename) so a restarted sink still recognises replays.

**What a position is, and why not commit time.** That pipeline orders by (commit time, log offset):
commit time first, the binlog offset only to break ties. Commit time comes from the source's
clock, which can go backwards (NTP steps, a VM resumed, a failover to a server whose clock is
behind); ordering by it would discard *new* changes as stale, silently. This product has a
better order: within one change log the SCN is the commit order (the log refuses to append out
of SCN order), and it stays monotone across a failover, where SCNs after the switch carry a
higher era in their high bits. So ``SinkPosition`` orders by ``(scn, seq)`` (``seq`` places the
events of one window that share an SCN, as a binlog's do) within one *lineage*; ``commit_ts_ms``
travels along as metadata and never decides anything.

A lineage is one change log that has never been restarted: ``"<source>@<first epoch>"``.
Failovers keep it (the manifest records the epochs the log switched from); ``databus
bootstrap`` starts a new one, whose SCNs cannot be compared with the old. Comparing positions
of different lineages raises instead of guessing (``EpochMismatchError`` for two lineages of
one source, ``OrderingError`` for two sources). ``DatabusClient`` drops a source's positions
itself when it bootstraps a consumer from the snapshots: the snapshot restates every key, and
positions from before it may belong to a log that was restarted since.

Two ways to use the sink:

* write-through: ``sink.offer(change, lineage)`` applies the change with the sink's ``apply``
  function when it is new and holds its position at once (the change *was* applied);
  ``sink.commit()`` persists what is held.
* windowed (what ``DatabusClient(dedupe=...)`` and ``LogicalTableClient`` do): ``admit`` during a
  window, ``commit`` when the consumer's ``on_end_data_event_sequence`` succeeded, ``rollback``
  when the window was rolled back. A rolled-back window was not applied, so its redelivery is
  delivered again, not discarded.

Positions of deleted keys are kept (tombstones): they are what makes a late insert of a deleted
key stale. The file store rewrites the whole map on each commit; for very many keys, plug in a
store of your own (any object with ``load``/``save``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_databus.consumer.checkpoints import CheckpointStore, FileStore, MemoryStore
from dagster_databus.consumer.groups import Change, GroupMember, KeyRouter
from dagster_databus.core.events import encode_key
from dagster_databus.core.scn import Scn
from dagster_databus.errors import EpochMismatchError, OrderingError

# Routing (step 1) lives in ``consumer.groups``; its names are also this module's, as they always were.
__all__ = [
    "DUPLICATE", "FORMAT", "STALE", "Change", "FilePositionStore", "GroupMember", "IdempotentSink", "KeyRouter",
    "MemoryPositionStore", "SinkKey", "SinkPosition", "SinkState", "log_lineage",
]

DUPLICATE = "duplicate"  # the same change again
STALE = "stale"  # an older change of a key the sink already holds a newer change of
FORMAT = 1


# -- positions ---------------------------------------------------------------------------


def log_lineage(source: str, manifest: Any) -> str:
    """The lineage of a source's change log: its name and the log's id.

    ``manifest`` is ``log.manifest.Manifest``. Every log started (``start_at``: an install or a
    ``databus bootstrap``) gets a new ``log_id``; failovers and retention keep it. Logs written
    before ids existed are named by the epoch they started in (a failover adds an entry to
    ``manifest.lineage`` and keeps the SCNs growing, so the first epoch names them).
    """
    if getattr(manifest, "log_id", ""):
        return f"{source}@{manifest.log_id}"
    history = getattr(manifest, "lineage", ()) or ()
    first = history[0]["epoch"] if history else manifest.epoch
    return f"{source}@{first or ''}"


def _source_of(lineage: str) -> str:
    return lineage.partition("@")[0]


@dataclass(frozen=True, slots=True)
class SinkPosition:
    """Where a change sits in its change log: ordered by ``(scn, seq)`` within one lineage.

    ``commit_ts_ms`` is carried for people reading the state; it takes no part in ordering or
    equality (see the module docstring for why).
    """

    lineage: str
    scn: Scn
    seq: int
    commit_ts_ms: int = field(default=0, compare=False)

    @classmethod
    def of(cls, change: Change, lineage: str) -> SinkPosition:
        return cls(lineage, change.scn, change.seq, change.commit_ts_ms)

    def _order(self, other: SinkPosition) -> tuple[tuple[int, int], tuple[int, int]]:
        if self.lineage != other.lineage:
            if _source_of(self.lineage) == _source_of(other.lineage):
                raise EpochMismatchError(
                    f"positions {self} and {other} belong to two lineages of one change log: the source was "
                    "bootstrapped in between, and SCNs of the new log cannot be compared with the old",
                    "re-bootstrap the sink from the snapshots (DatabusClient does this, and drops the old "
                    "positions itself); by hand, call IdempotentSink.forget(source, keep=<new lineage>) first",
                    ours=self.lineage, theirs=other.lineage)
            raise OrderingError(
                f"positions {self} and {other} come from two different change logs, whose SCNs are unrelated",
                "route each key through one log: for a logical table, give every part its own shard value so "
                "keys of different sources never coincide; otherwise use one sink per source")
        return (self.scn.value, self.seq), (other.scn.value, other.seq)

    def __lt__(self, other: SinkPosition) -> bool:
        a, b = self._order(other)
        return a < b

    def __le__(self, other: SinkPosition) -> bool:
        a, b = self._order(other)
        return a <= b

    def __gt__(self, other: SinkPosition) -> bool:
        a, b = self._order(other)
        return a > b

    def __ge__(self, other: SinkPosition) -> bool:
        a, b = self._order(other)
        return a >= b

    def __str__(self) -> str:
        return f"{self.lineage}:{self.scn}.{self.seq}"


# -- persistence -------------------------------------------------------------------------

SinkKey = tuple[str, str]  # (table, key as encode_key's JSON)


@dataclass(slots=True)
class SinkState:
    """What a sink holds: the last applied position per (table, key), and discards so far."""

    positions: dict[SinkKey, SinkPosition] = field(default_factory=dict)
    discards: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        lineages = sorted({p.lineage for p in self.positions.values()})
        index = {lineage: i for i, lineage in enumerate(lineages)}
        tables: dict[str, dict[str, list[Any]]] = {}
        for (table, key), p in self.positions.items():
            # SCNs as strings, like every other position the product writes (64-bit safe in any reader).
            tables.setdefault(table, {})[key] = [index[p.lineage], str(p.scn), p.seq, p.commit_ts_ms]
        return {"format": FORMAT, "lineages": lineages, "discards": dict(self.discards), "positions": tables}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str = "sink positions") -> SinkState:
        if doc.get("format") != FORMAT:
            raise OrderingError(f"{where} have format {doc.get('format')!r}; this version reads format {FORMAT}",
                                "upgrade dagster-databus, or delete the file and re-bootstrap the sink")
        lineages = doc["lineages"]
        positions = {(table, key): SinkPosition(lineages[i], Scn.parse(scn), seq, ts)
                     for table, keys in doc["positions"].items() for key, (i, scn, seq, ts) in keys.items()}
        return cls(positions=positions, discards=dict(doc.get("discards", {})))

    def copy(self) -> SinkState:
        return SinkState(dict(self.positions), dict(self.discards))


class FilePositionStore(FileStore[SinkState]):
    """A sink's positions in a JSON file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, lambda doc: SinkState.from_json(doc, str(path)))


class MemoryPositionStore(MemoryStore[SinkState]):
    """Holds the state in memory: replays are discarded within one process only. Keeps its own copy: the
    sink goes on changing the maps it saved."""

    def __init__(self) -> None:
        super().__init__(copy=SinkState.copy)


# -- the sink guard ----------------------------------------------------------------------


class IdempotentSink:
    """Applies each change at most once per key position, and never an older change over a newer one.

    ``apply`` is called by ``offer`` for changes that pass; the windowed methods (``admit``,
    ``commit``, ``rollback``) leave applying to the caller. ``discards`` counts what was dropped,
    by reason (``"duplicate"``, ``"stale"``), as persisted: counts of a rolled-back window are
    dropped with it, so a redelivered window is not counted twice.
    """

    def __init__(self, apply: Callable[[Any], Any] | None = None,
                 store: CheckpointStore[SinkState] | None = None) -> None:
        self.apply = apply
        self.store: CheckpointStore[SinkState] = store or MemoryPositionStore()
        state = self.store.load() or SinkState()
        self._held = state.positions
        self._discards = state.discards
        # The open window: admitted positions and discards, held only once the window commits.
        self._pending: dict[SinkKey, SinkPosition] = {}
        self._pending_discards: dict[str, int] = {}
        self._dirty = False

    # -- reading ---------------------------------------------------------------------

    @property
    def discards(self) -> dict[str, int]:
        return {DUPLICATE: self._discards.get(DUPLICATE, 0), STALE: self._discards.get(STALE, 0)}

    @property
    def discarded(self) -> int:
        return sum(self._discards.values())

    def held(self, table: str, key: Sequence[Any]) -> SinkPosition | None:
        """The position of the last applied change of ``key`` (committed or in the open window)."""
        k = (table, encode_key(key))
        return self._pending.get(k) or self._held.get(k)

    @property
    def keys_held(self) -> int:
        """How many (table, key) positions the sink holds. (Not ``__len__``: an empty sink must stay truthy.)"""
        return len(self._held.keys() | self._pending.keys())

    # -- deciding --------------------------------------------------------------------

    def _verdict(self, k: SinkKey, position: SinkPosition) -> str | None:
        """None when ``position`` is newer than what is held for ``k``, else the discard reason."""
        held = self._pending.get(k) or self._held.get(k)
        if held is None or position > held:
            return None
        return DUPLICATE if position == held else STALE

    def admit(self, change: Change, lineage: str) -> bool:
        """Windowed use: True when ``change`` is newer than what the sink holds for its key (it is
        then held as pending until ``commit``); False, and counted, when stale or a duplicate."""
        k = (change.table, encode_key(change.key))
        position = SinkPosition.of(change, lineage)
        reason = self._verdict(k, position)
        if reason is not None:
            self._pending_discards[reason] = self._pending_discards.get(reason, 0) + 1
            return False
        self._pending[k] = position
        return True

    def offer(self, change: Change, lineage: str) -> bool:
        """Write-through use: apply ``change`` if it is new (True), else discard it (False).

        The position is held once ``apply`` returns; if ``apply`` raises, nothing is held, so a
        redelivery is applied again. Call ``commit`` to persist (after your sink's own commit).
        """
        k = (change.table, encode_key(change.key))
        position = SinkPosition.of(change, lineage)
        reason = self._verdict(k, position)
        if reason is not None:
            self._discards[reason] = self._discards.get(reason, 0) + 1
            self._dirty = True
            return False
        if self.apply is not None:
            self.apply(change)
        self._held[k] = position
        self._dirty = True
        return True

    def commit(self) -> None:
        """Hold the open window's positions and persist everything held. Nothing changes in memory
        unless the store saved, so a failed save can be rolled back and the window redelivered."""
        if not (self._pending or self._pending_discards or self._dirty):
            return
        positions = {**self._held, **self._pending}
        discards = dict(self._discards)
        for reason, n in self._pending_discards.items():
            discards[reason] = discards.get(reason, 0) + n
        self.store.save(SinkState(positions, discards))
        self._held, self._discards = positions, discards
        self._pending, self._pending_discards, self._dirty = {}, {}, False

    def rollback(self) -> None:
        """Forget the open window: its changes were not applied, so their redelivery must pass."""
        self._pending, self._pending_discards = {}, {}

    def forget(self, source: str, keep: str | None = None) -> int:
        """Drop the positions of ``source``'s lineages other than ``keep`` (all of them when None);
        returns how many. For after a source was bootstrapped and the sink re-read its snapshot."""
        gone = [k for k, p in self._held.items() if _source_of(p.lineage) == source and p.lineage != keep]
        for k in gone:
            del self._held[k]
        self._pending = {k: p for k, p in self._pending.items()
                         if not (_source_of(p.lineage) == source and p.lineage != keep)}
        if gone:
            self._dirty = True
        return len(gone)
