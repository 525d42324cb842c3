"""Rolling verification: every sync compares a slice of each table's keys with the source at one SCN and repairs
what differs (``verify: repair``), so that no difference outlives a rotation of the table's keys.

A run reads its slices first, before capture: per table one key range in the source's key order (after where the
last slice ended), in its own consistent read at a position P, and it pins the snapshot's Delta version (applied
SCN A <= P). Once capture has logged past P and the merge is done, the pinned snapshot is brought to P (the log's
events in (A, P] reduced per key, deleted and soft-deleted rows left out) and compared with the read row by row,
by the canonical texts reconciliation hashes (``core.fingerprint``): equal values in the source's type never
differ. A key that differs and has no event after P is repaired with the source's image at P, folded into the
snapshot and its history in one commit each. Keys with events after P took those events' full images; the next
pass looks at them again.

Extra rows (in the snapshot, not in the source) are looked for where this process orders keys as the source does
(numbers, dates, timestamps: ``dataplane.refresh.ORDERED_ALIKE``); a string key's range is the source's collation's,
so there only the keys the source read returned are compared, and the full ``reconcile`` finds extra rows.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.fingerprint import digests, row_texts
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.snapshot.reconcile import RowDifference, compare_tables
from dagster_databus.sources.base import KeyRange, RowSelection

if TYPE_CHECKING:
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import Source

MAX_NAMED = 10  # differing keys named in a result (all are repaired)


@dataclass
class VerifyState:
    """Where a table's rotation stands, kept in the lake (``verify/<source>/<table>.json``) between runs."""

    cursor: list[Any] | None = None  # the last key verified (tagged JSON, ``_encode``); None: from the start
    pass_started_ms: int | None = None
    pass_runs: int = 0  # runs of the current pass so far
    last_full_ms: int | None = None  # when the last whole pass over the table ended
    last_full_runs: int | None = None  # and how many runs it took
    runs: int = 0
    repairs: int = 0  # differing keys found in all (repaired, or only reported under ``verify: report``)
    last_repair_ms: int | None = None
    rows_per_s: float | None = None  # what verifying cost last time, to size the next slice
    run_s: float | None = None  # how long the last run's capture and merge took (the share is of that)

    @staticmethod
    def key(source: str, table: str) -> str:
        return f"verify/{source}/{table}.json"

    @classmethod
    def load(cls, config: DatabusConfig, source: str, table: str) -> VerifyState:
        data = config.lake.objects.read(cls.key(source, table))
        if data is None:
            return cls()
        fields = json.loads(data)
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    def save(self, config: DatabusConfig, source: str, table: str) -> None:
        config.lake.objects.write(self.key(source, table), json.dumps(asdict(self), sort_keys=True).encode())


@dataclass(frozen=True)
class Verified:
    """One table's verification in one run."""

    table: str
    policy: str
    scn: Scn | None = None  # where the source was read (None: not compared, ``skipped`` says why)
    keys: str = ""  # the slice, described
    rows: int = 0  # source rows compared
    different: int = 0  # keys that differed (and had no later event)
    repaired: int = 0
    moved_on: int = 0  # differing keys that events after the read changed again: left to them
    differences: tuple[RowDifference, ...] = ()  # the first few
    seconds: float = 0.0
    skipped: str | None = None
    failed: bool = False  # ``skipped`` is an error, not a reason to wait (the check warns)
    state: VerifyState = field(default_factory=VerifyState)

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(c for d in self.differences for c in d.columns))


def slice_rows(state: VerifyState, table_rows: int, cfg: SourceConfig) -> int:
    """How many rows this run verifies: enough to cover the table in ``every_runs`` runs, up to four times that
    while verifying costs less than ``share`` of a run, and fewer (a longer rotation) when it would cost more."""
    v = cfg.verify
    target = max(1, math.ceil(table_rows / v.every_runs))
    rows = target
    if state.rows_per_s and state.run_s:
        afford = int(state.rows_per_s * state.run_s * v.share)
        rows = min(afford, 4 * target) if afford >= target else afford
    return max(v.min_rows, min(v.max_rows, rows))


@dataclass
class _Slice:
    table: str
    schema: TableSchema
    state: VerifyState
    bounds: KeyRange
    scn: Scn
    rows: pa.Table  # the source's, in ``schema``'s columns
    version: int  # the snapshot's Delta version pinned at the read
    applied: Scn
    read_s: float
    last: bool  # the slice runs to the end of the key space: the pass ends with it


class RollingVerification:
    """One run's verification of a source: ``read`` before capture, ``settle`` after the merge."""

    def __init__(self, config: DatabusConfig, source_cfg: SourceConfig, tables: Sequence[str],
                 progress: Progress = quiet) -> None:
        self.config, self.source_cfg, self.progress = config, source_cfg, progress
        self.tables = [t for t in tables if source_cfg.verify_policy(t) != "off"]
        self.slices: dict[str, _Slice] = {}
        self.outcomes: dict[str, Verified] = {}
        self.started = time.monotonic()
        self.verify_s = 0.0

    def read(self) -> None:
        """Each table's slice read from the source (skipped, with the reason, where it cannot be)."""
        if not self.tables:
            return
        from dagster_databus.sources import open_source

        source: Source | None = None
        for table in self.tables:
            began = time.monotonic()
            try:
                source = source or open_source(self.source_cfg, self.config.lake)
                found = self._read(source, table)
            except Exception as exc:  # verification never stops the sync: the check warns with the error
                found = Verified(table, self.source_cfg.verify_policy(table), skipped=f"the slice could not be read: "
                                 f"{exc}", failed=True)
            if isinstance(found, _Slice):
                self.slices[table] = found
            else:
                self.outcomes[table] = found
            self.verify_s += time.monotonic() - began

    def _read(self, source: Source, table: str) -> _Slice | Verified:
        from dagster_databus.dataplane.delta import DeltaSnapshot
        from dagster_databus.sources import read_range

        policy = self.source_cfg.verify_policy(table)
        snap = DeltaSnapshot(self.config.lake, self.source_cfg.name, table)
        try:
            # The version pinned and the SCN it reflects from one load of the Delta log: read apart, a merge
            # committing in between pairs the version with the next one's SCN, and the pinned rows lack its events.
            delta, applied = snap.bootstrapped()
        except SnapshotMissingError:
            return Verified(table, policy, skipped="the snapshot is not bootstrapped yet")
        version = delta.version()
        state = VerifyState.load(self.config, self.source_cfg.name, table)
        schema = source.schemas()[table]
        after = _decode(schema, state.cursor)
        rows = slice_rows(state, snap.row_count(), self.source_cfg)
        started = time.monotonic()
        read = source.ranges(table, rows, RowSelection(KeyRange(after, None)), first=1)
        bounds = read.ranges[0]
        got = read_range(read, 0)
        target = schema.arrow(with_meta=False)
        data = pa.Table.from_batches([b.select(schema.column_names).cast(target) for b in got.batches], target)
        self.progress(f"{table}: verifying {data.num_rows:,} rows ({RowSelection(bounds).describe()}) read at "
                      f"SCN {got.scn}")
        return _Slice(table, schema, state, bounds, got.scn, data, version, applied, time.monotonic() - started,
                      bounds.through is None)

    def settle(self) -> list[Verified]:
        """Compare each slice read with the snapshot at its SCN, repair (policy ``repair``), record the rotation."""
        run_s = time.monotonic() - self.started - self.verify_s
        for table, piece in self.slices.items():
            began = time.monotonic()
            try:
                outcome = self._settle(piece)
            except Exception as exc:
                outcome = Verified(table, self.source_cfg.verify_policy(table),
                                   skipped=f"the comparison failed: {exc}", failed=True)
            seconds = piece.read_s + time.monotonic() - began
            state = outcome.state if outcome.scn is not None else piece.state
            state = replace(state, run_s=round(run_s, 3),
                            rows_per_s=round(max(piece.rows.num_rows, 1) / max(seconds, 1e-3), 1))
            state.save(self.config, self.source_cfg.name, table)
            self.outcomes[table] = replace(outcome, seconds=round(seconds, 3), state=state)
        return [self.outcomes[t] for t in self.tables if t in self.outcomes]

    def _settle(self, piece: _Slice) -> Verified:
        from dagster_databus.dataplane.delta import DeltaSnapshot
        from dagster_databus.log.changelog import ChangeLog

        policy = self.source_cfg.verify_policy(piece.table)
        log = ChangeLog(self.config.lake, self.source_cfg.name)
        until = log.committed_scn()
        described = RowSelection(piece.bounds).describe()
        if until < piece.scn:
            return Verified(piece.table, policy, keys=described, skipped=(
                f"the change log reaches SCN {until}, not yet the read's SCN {piece.scn}: compared next run"))
        ddl = [r for r in log.ddl.records() if r.table == piece.table and piece.applied < r.scn]
        if ddl:
            return Verified(piece.table, policy, keys=described, skipped=(
                f"a schema change at SCN {ddl[0].scn} since the slice's snapshot: compared next run"))
        snap = DeltaSnapshot(self.config.lake, self.source_cfg.name, piece.table)
        side = _SnapshotSlice(self.config, log, snap, piece)
        theirs = side.rows()
        found = _differing(piece.schema, piece.rows, theirs, extras=side.ordered)
        later = side.changed_after(until)
        moved_on = [d for d in found if d.key_text in later]
        found = [d for d in found if d.key_text not in later]
        repaired = 0
        if found and policy == "repair":
            repaired = _repair(self.config, snap, piece, theirs, found)
        first = found[:MAX_NAMED]
        named = compare_tables(piece.schema, piece.rows.take(_indices(d.source_index for d in first)),
                               theirs.take(_indices(d.snapshot_index for d in first)))
        if found:
            self.progress(f"{piece.table}: verification found {len(found):,} differing key(s) at SCN {piece.scn}"
                          f"{', repaired' if repaired else ' (verify: report: left as they are)'}: "
                          + "; ".join(d.describe() for d in named[:3]))
        now_ms = int(time.time() * 1000)
        state = piece.state
        state = replace(state, runs=state.runs + 1, pass_runs=state.pass_runs + 1,
                        pass_started_ms=state.pass_started_ms or now_ms,
                        repairs=state.repairs + len(found),
                        last_repair_ms=now_ms if found else state.last_repair_ms,
                        cursor=_encode(piece.bounds.through) if not piece.last else None)
        if piece.last:
            state = replace(state, last_full_ms=now_ms, last_full_runs=state.pass_runs, pass_runs=0,
                            pass_started_ms=None)
        return Verified(piece.table, policy, piece.scn, described, piece.rows.num_rows, len(found), repaired,
                        len(moved_on), named, state=state)


class _SnapshotSlice:
    """The snapshot's rows of a slice as of the slice's SCN: the pinned version's rows in the range, the keys the
    log changed in (applied, SCN] replaced by their newest images (gone where deleted)."""

    def __init__(self, config: DatabusConfig, log: ChangeLog, snap: DeltaSnapshot, piece: _Slice) -> None:
        from dagster_databus.dataplane.refresh import ORDERED_ALIKE

        self.config, self.log, self.snap, self.piece = config, log, snap, piece
        self.schema = piece.schema
        self.key = list(self.schema.primary_key)
        self.ordered = all(self.schema.column(k).type.kind in ORDERED_ALIKE for k in self.key)
        self.source_keys = set(_key_texts(piece.rows, self.schema)) if not self.ordered else set()

    def _in_slice(self, rows: pa.Table) -> pa.Table:
        from dagster_databus.dataplane.refresh import _beyond

        if not rows.num_rows:
            return rows
        if not self.ordered:
            keep = np.array([k in self.source_keys for k in _key_texts(rows, self.schema)], dtype=bool)
            return rows.filter(pa.array(keep))
        mask = np.ones(rows.num_rows, dtype=bool)
        bounds = self.piece.bounds
        if bounds.after is not None:
            mask &= _beyond(rows, tuple(self.key), bounds.after)
        if bounds.through is not None:
            mask &= ~_beyond(rows, tuple(self.key), bounds.through)
        return rows.filter(pa.array(mask))

    def _coarse(self) -> pds.Expression | None:
        """A filter on the first key column that lets the reader skip files and row groups outside the slice."""
        from dagster_databus.dataplane.refresh import _scalar

        first = self.key[0]
        target = self.schema.arrow(with_meta=False).field(first).type
        if not self.ordered:
            values = pc.unique(self.piece.rows.column(first).combine_chunks())
            return pds.field(first).isin(values.cast(target))
        bounds, expr = self.piece.bounds, None
        if bounds.after is not None:
            expr = pds.field(first) >= _scalar(bounds.after[0], target)
        if bounds.through is not None:
            upper = pds.field(first) <= _scalar(bounds.through[0], target)
            expr = upper if expr is None else expr & upper
        return expr

    def rows(self) -> pa.Table:
        from dagster_databus.dataplane.delta import conform_rows
        from dagster_databus.dataplane.reduce import NewestPerKey
        from dagster_databus.log.columns import change_schema, table_changes

        target = self.schema.arrow(with_meta=False)
        columns = [*self.schema.column_names, "__op"]
        dataset = self.snap.delta(self.piece.version).to_pyarrow_dataset()
        pinned = dataset.to_table(columns=columns, filter=self._coarse())
        pinned = pinned.filter(pc.fill_null(pc.not_equal(pinned.column("__op").cast(pa.string()), "d"), True))
        pinned = self._in_slice(conform_rows(pinned.select(self.schema.column_names), target))
        reducer = NewestPerKey(change_schema(self.schema), self.schema.primary_key,
                               self.config.merge.memory_mb << 20, self.config.merge.spill_dir)
        try:
            reducer.extend(table_changes(self.log, self.schema, self.piece.applied, self.piece.scn))
            changed = [pa.Table.from_batches([b]) for b in reducer.results()]
        finally:
            reducer.close()
        if not changed:
            return pinned
        images = self._in_slice(pa.concat_tables(changed))
        touched = set(_key_texts(pa.concat_tables(changed), self.schema))
        keep = np.array([k not in touched for k in _key_texts(pinned, self.schema)], dtype=bool)
        live = images.filter(pc.not_equal(images.column("__op"), "d")).select(self.schema.column_names)
        return pa.concat_tables([pinned.filter(pa.array(keep)), conform_rows(live, target)])

    def changed_after(self, until: Scn) -> set[bytes]:
        """The keys the log changed after the slice's SCN, up to ``until``."""
        from dagster_databus.log.columns import table_changes

        if until <= self.piece.scn:
            return set()
        out: set[bytes] = set()
        for batch in table_changes(self.log, self.schema, self.piece.scn, until):
            out.update(_key_texts(pa.Table.from_batches([batch]), self.schema))
        return out


@dataclass(frozen=True, slots=True)
class _Found:
    key_text: bytes
    source_index: int | None  # the row in the source's read (None: only in the snapshot)
    snapshot_index: int | None


def _indices(found: Iterable[int | None]) -> pa.Array:
    return pa.array([i for i in found if i is not None], pa.int64())


def _key_texts(rows: pa.Table, schema: TableSchema) -> list[bytes]:
    if not rows.num_rows:
        return []
    key, _ = row_texts(rows, schema, columns=())
    return key.to_pylist()


def _differing(schema: TableSchema, source: pa.Table, snapshot: pa.Table, extras: bool) -> list[_Found]:
    """Keys whose rows differ by canonical value (``core.fingerprint``), missing from the snapshot, or (``extras``)
    only in it."""
    def indexed(rows: pa.Table) -> pa.Table:
        if not rows.num_rows:
            return pa.table({"k": pa.array([], pa.binary()), "d": pa.array([], pa.uint64()),
                             "i": pa.array([], pa.int64())})
        key, row = row_texts(rows, schema)
        return pa.table({"k": key.cast(pa.binary()), "d": pa.array(digests(row)),
                         "i": pa.array(np.arange(rows.num_rows, dtype=np.int64))})

    joined = indexed(source).join(indexed(snapshot), keys="k", join_type="full outer", left_suffix="_s",
                                  right_suffix="_t", use_threads=False)
    differ = pc.or_kleene(pc.is_null(joined["d_s"]), pc.is_null(joined["d_t"]))
    differ = pc.or_kleene(differ, pc.not_equal(joined["d_s"], joined["d_t"]))
    if not extras:
        differ = pc.and_kleene(differ, pc.is_valid(joined["d_s"]))
    hits = joined.filter(pc.fill_null(differ, True))
    found = [_Found(k, s, t) for k, s, t in zip(hits["k"].to_pylist(), hits["i_s"].to_pylist(),
                                                 hits["i_t"].to_pylist(), strict=True)]
    return sorted(found, key=lambda f: f.key_text)


def _repair(config: DatabusConfig, snap: DeltaSnapshot, piece: _Slice, theirs: pa.Table,
            found: Sequence[_Found]) -> int:
    """The source's images at the slice's SCN of the differing keys (deletes of those it lacks) folded into the
    snapshot, whatever its rows' SCNs (no later event touched these keys), and into its history."""
    from deltalake import CommitProperties

    from dagster_databus.dataplane.commit import OPERATION_KEY
    from dagster_databus.dataplane.delta import conform_changes, merge_with_delta_rs
    from dagster_databus.dataplane.engine import soft_deletes
    from dagster_databus.dataplane.refresh import RangeChanges
    from dagster_databus.log.columns import change_schema

    schema, key = piece.schema, piece.schema.primary_key
    target = schema.arrow(with_meta=True)
    stamp = RangeChanges(change_schema(schema), target, key, deletes=True)
    images = piece.rows.take(_indices(f.source_index for f in found))
    gone = [f for f in found if f.source_index is None]
    parts = [stamp.stamped(b, piece.scn.value, "r") for b in images.to_batches()]
    if gone:
        keys = theirs.take(_indices(f.snapshot_index for f in gone)).select(list(key))
        others = [f for f in stamp.changes if f.name not in key and not f.name.startswith("__")]
        rows = pa.RecordBatch.from_arrays([*(keys.column(k).combine_chunks() for k in key),
                                           *(pa.nulls(keys.num_rows, f.type) for f in others)],
                                          names=[*key, *(f.name for f in others)])
        parts.append(stamp.stamped(rows, piece.scn.value, "d"))
    changes = pa.Table.from_batches([b for b in parts if b.num_rows], stamp.changes)
    props = CommitProperties(custom_metadata={OPERATION_KEY: "verify-repair", "databus.scn": str(piece.scn),
                                              "databus.keys": str(len(found))})
    lock = snap.lock(f"snapshot {snap.source}.{snap.table}", "wait for the other merge of this table to finish")
    with lock:
        merge_with_delta_rs(snap, key, conform_changes(changes, target), props, reads=True,
                            soft=soft_deletes(config, snap), always=True)
    if config.source(snap.source).table(snap.table).history:
        _repair_history(config, snap, schema, changes)
    return len(found)


def _repair_history(config: DatabusConfig, snap: DeltaSnapshot, schema: TableSchema, changes: pa.Table) -> None:
    """The repair folded into the table's history: a row that differs from its key's open version starts a new
    one (or updates it in place), a delete ends it, an equal row changes nothing."""
    from deltalake import CommitProperties

    from dagster_databus.dataplane.commit import OPERATION_KEY
    from dagster_databus.dataplane.history import HistoryTable, history_schema, tracked_columns
    from dagster_databus.snapshot.engines.local import fold_into_history

    hist = HistoryTable(config.lake, snap.source, snap.table)
    if hist.applied_scn() is None:
        return
    options = config.source(snap.source).table(snap.table)
    tracked = tracked_columns(snap.source, snap.table, schema, options.track_history_columns,
                              options.track_history_except_columns)
    props = CommitProperties(custom_metadata={OPERATION_KEY: "history-verify-repair"})
    fold_into_history(hist, changes, schema.primary_key, tracked, history_schema(schema), props)


def _encode(values: Sequence[Any] | None) -> list[Any] | None:
    """Key values as JSON that ``_decode`` turns back into the same Python values."""
    if values is None:
        return None

    def one(v: Any) -> Any:
        if isinstance(v, bool | int | float | str) or v is None:
            return v
        if isinstance(v, decimal.Decimal):
            return {"decimal": str(v)}
        if isinstance(v, dt.datetime):
            return {"datetime": v.isoformat()}
        if isinstance(v, dt.date):
            return {"date": v.isoformat()}
        if isinstance(v, dt.time):
            return {"time": v.isoformat()}
        if isinstance(v, bytes | bytearray | memoryview):
            return {"bytes": base64.b64encode(bytes(v)).decode()}
        return {"text": str(v)}

    return [one(v) for v in values]


_DECODERS: dict[str, Callable[[str], Any]] = {
    "decimal": decimal.Decimal, "datetime": dt.datetime.fromisoformat, "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat, "bytes": base64.b64decode, "text": str}


def _decode(schema: TableSchema, values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    if values is None or len(values) != len(schema.primary_key):
        return None  # no cursor yet, or the key changed: start the pass again

    def one(v: Any) -> Any:
        if isinstance(v, dict):
            (tag, text), = v.items()
            return _DECODERS[tag](text)
        return v

    return tuple(one(v) for v in values)


def verified_lines(results: Sequence[Verified]) -> Iterator[str]:
    """One line per table, as the CLI prints them."""
    for r in results:
        if r.scn is None:
            yield f"{r.table}: not verified this run: {r.skipped}"
            continue
        verdict = "equal" if not r.different else (
            f"{r.different:,} key(s) differed, {'repaired' if r.repaired else 'reported (verify: report)'}")
        yield f"{r.table}: verified {r.rows:,} rows ({r.keys}) at SCN {r.scn}: {verdict}; {r.seconds:.2f} s"


def verify_figures(v: Verified) -> dict[str, Any]:
    """A table's verification as plain JSON (the CLI's ``--json``)."""
    return {"table": v.table, "policy": v.policy, "scn": None if v.scn is None else str(v.scn), "keys": v.keys,
            "rows": v.rows, "differing_keys": v.different, "repaired_keys": v.repaired, "moved_on_keys": v.moved_on,
            "differences": [d.as_json() for d in v.differences], "seconds": v.seconds, "skipped": v.skipped,
            "repairs_so_far": v.state.repairs, "last_full_verify_ms": v.state.last_full_ms}
