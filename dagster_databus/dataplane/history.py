"""History tables (SCD type 2): every version of every row of a captured table, with when it held.

``<lake>/history/<source>/<table>`` holds the table's columns, then:

- ``__start_scn`` / ``__start_at``: the change that made this version (its SCN and source commit time);
- ``__end_scn`` / ``__end_at``: the change that ended it (null while it is the current version);
- ``__deleted``: the version was ended by a delete of the row;
- ``__scn``: the newest change folded into the version (one in untracked columns updates it in place).

The rules are AUTO CDC's (``stored_as_scd_type=2``): changes are sequenced by SCN, then position in
the window; a delete closes the open version; a change only in untracked columns updates the open
version in place; a change at or below what a version already holds (a replay, an older window)
changes nothing. The row as of SCN ``s`` is the version with ``__start_scn <= s < __end_scn`` (or
no end). A history table starts from its snapshot's bootstrap and is built from the change log by
the snapshot's engine, so it can always be rebuilt while the log reaches back to that bootstrap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.batch import repeated
from dagster_databus.core.schema import META_COLUMNS, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaFolder
from dagster_databus.dataplane.reduce import HELD_ONLY, same_keys
from dagster_databus.errors import ConfigError
from dagster_databus.storage.lake import Lake
from dagster_databus.storage.location import LakeLocation

_TS = META_COLUMNS["__commit_ts"]
HISTORY_META: dict[str, pa.DataType] = {
    "__scn": pa.int64(), "__start_scn": pa.int64(), "__end_scn": pa.int64(), "__start_at": _TS, "__end_at": _TS,
    "__deleted": pa.bool_()}


class HistoryTable(DeltaFolder):
    """One table's history: ``<lake>/history/<source>/<table>``. Its commits carry the SCN it is current
    to (app id ``databus:<source>.<table>#history``) and the SCN it starts at (``...#history-start``)."""

    def __init__(self, lake: Lake | LakeLocation | Path | str, source: str, table: str) -> None:
        super().__init__(lake, "history", source, table)
        self.source, self.table = source, table
        self.app_id = f"databus:{source}.{table}#history"
        self.start_app_id = f"{self.app_id}-start"
        # The SCN of the snapshot bootstrap whose rows the history has absorbed (``restated``).
        self.based_app_id = f"{self.app_id}-based"

    def applied_scn(self) -> Scn | None:
        table = self.existing()
        version = table.transaction_version(self.app_id) if table is not None else None
        return Scn(version) if version is not None else None

    def start_scn(self) -> Scn | None:
        """The SCN the history begins at: its snapshot's bootstrap (or the snapshot it started from)."""
        table = self.existing()
        version = table.transaction_version(self.start_app_id) if table is not None else None
        return Scn(version) if version is not None else None


    def based_scn(self) -> Scn | None:
        table = self.existing()
        version = table.transaction_version(self.based_app_id) if table is not None else None
        return Scn(version) if version is not None else None


def history_schema(schema: TableSchema) -> pa.Schema:
    """A history table's columns: ``schema``'s own, then ``HISTORY_META``."""
    return pa.schema([*schema.arrow(with_meta=False), *(pa.field(n, t) for n, t in HISTORY_META.items())])


def tracked_columns(source: str, table: str, schema: TableSchema, only: Sequence[str] | None,
                    except_: Sequence[str]) -> tuple[str, ...]:
    """The columns whose change starts a new version (``track_history_columns`` / ``..._except_columns``);
    a named column the table lacks is refused."""
    names = [c.name for c in schema.columns]
    named = list(only) if only is not None else list(except_)
    unknown = [c for c in named if c not in names]
    if unknown:
        which = "track_history_columns" if only is not None else "track_history_except_columns"
        raise ConfigError(f"sources.{source}.tables.{table}.{which}",
                          f"names column(s) {', '.join(unknown)} that {table} does not have (it has "
                          f"{', '.join(names)})", "name columns of the table, spelled as the log spells them")
    key = set(schema.primary_key)
    if only is not None:
        return tuple(c for c in names if c in set(only) and c not in key)
    return tuple(c for c in names if c not in set(except_) and c not in key)


def from_snapshot(rows: pa.Table | pa.RecordBatch) -> pa.Table:
    """Snapshot rows (with ``__scn``, ``__commit_ts``) as the versions a history starts with: each current
    since its SCN."""
    data = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
    own = [n for n in data.column_names if not n.startswith("__")]
    n = data.num_rows
    return pa.Table.from_arrays(
        [*(data[c] for c in own), data["__scn"], data["__scn"], pa.nulls(n, pa.int64()),
         data["__commit_ts"].cast(_TS), pa.nulls(n, _TS), pa.array(np.zeros(n, dtype=bool))],
        names=[*own, *HISTORY_META])


@dataclass(frozen=True)
class Restated:
    """Batches of snapshot rows (``__scn``, ``__commit_ts``) as changes in ``changes``' columns that state each
    row again at its own SCN (operation ``r``): folded into a history, a row that differs from its key's open
    version starts a new one (or updates it in place), and an equal one changes nothing. With ``deleted_at``
    (SCN, commit ms), batches of keys instead, as deletes at that SCN. Callable per batch stream, as Spark's
    ``mapInArrow`` calls it."""

    changes: pa.Schema
    deleted_at: tuple[int, int] | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from self.of(pa.Table.from_batches([batch])).to_batches()

    def of(self, rows: pa.Table) -> pa.Table:
        n = rows.num_rows
        if self.deleted_at is not None:
            scn, ms = pa.array([self.deleted_at[0]] * n, pa.int64()), pa.array([self.deleted_at[1]] * n, pa.int64())
            op = "d"
        else:
            scn = rows["__scn"].cast(pa.int64())
            ms = pc.divide(rows["__commit_ts"].cast(pa.int64()), 1000)
            op = "r"
        meta = {"__scn": scn, "__seq": pa.array(np.zeros(n, np.int32)), "__window_scn": scn,
                "__op": repeated(op, pa.string(), n), "__commit_ts_ms": ms,
                "__partition": pa.array(np.zeros(n, np.int32))}
        names = rows.column_names
        return pa.Table.from_arrays(
            [meta[f.name] if f.name in meta else rows[f.name].cast(f.type) if f.name in names else pa.nulls(n, f.type)
             for f in self.changes], schema=self.changes)


@dataclass(frozen=True, slots=True)
class Folded:
    """What folding changes into open versions made: the open versions that changed (``replaced``, with
    ``replaced_rows`` their positions among the open rows given), the versions the changes opened, and counts."""

    replaced: pa.Table
    replaced_rows: np.ndarray
    opened: pa.Table
    closed: int  # versions ended (by a delete or a change in a tracked column)
    deleted: int  # of those, ended by a delete
    in_place: int  # versions that took a change in untracked columns


def fold(open_rows: pa.Table, changes: pa.Table, key: Sequence[str], tracked: Sequence[str],
         target: pa.Schema) -> Folded:
    """Fold ``changes`` (the log's columns, any order) into the keys' open versions ``open_rows`` (``target``'s
    columns; keys without changes are passed over). Vectorised: the open rows and changes of every key are
    laid out in one sequence (per key: its open version, then its changes by SCN and position) and each
    version's first, last and ending rows found by position."""
    own = [f.name for f in target if f.name not in HISTORY_META]
    n_open, n_change = open_rows.num_rows, changes.num_rows
    ts = pc.multiply(changes["__commit_ts_ms"], 1000).cast(pa.int64()).cast(_TS)
    seq = pa.chunked_array([pa.array(np.full(n_open, -1, np.int64)), *changes["__seq"].cast(pa.int64()).chunks],
                           pa.int64())
    laid = pa.table({
        **{c: pa.chunked_array([*open_rows[c].cast(target.field(c).type).chunks,
                                *changes[c].cast(target.field(c).type).chunks], target.field(c).type) for c in own},
        "__kind": pa.array(np.r_[np.zeros(n_open, np.int8), np.ones(n_change, np.int8)]),
        "__order": pa.chunked_array([*open_rows["__scn"].chunks, *changes["__scn"].cast(pa.int64()).chunks],
                                    pa.int64()),
        "__seq_": seq,
        "__del": pa.chunked_array([pa.array(np.zeros(n_open, bool)), pc.equal(changes["__op"], "d")], pa.bool_()),
        "__cond": pa.chunked_array([pa.array(np.zeros(n_open, bool)), pc.equal(changes["__op"], HELD_ONLY)],
                                   pa.bool_()),
        "__first_scn": pa.chunked_array([*open_rows["__start_scn"].chunks,
                                         *changes["__scn"].cast(pa.int64()).chunks], pa.int64()),
        "__first_at": pa.chunked_array([*open_rows["__start_at"].cast(_TS).chunks, *ts.chunks], _TS),
        "__at": pa.chunked_array([pa.nulls(n_open, _TS), *ts.chunks], _TS),
        "__origin": pa.array(np.r_[np.arange(n_open), np.full(n_change, -1)].astype(np.int64)),
    })
    # Sorted by the keys as the source compares them: Arrow puts a float's -0 before its 0, the same key.
    sort_keys = [f"__sort{i}" for i in range(len(key))]
    for name, column in zip(sort_keys, same_keys([laid[k] for k in key]), strict=True):
        laid = laid.append_column(name, column)
    laid = laid.sort_by([*((k, "ascending") for k in sort_keys), ("__kind", "ascending"), ("__order", "ascending"),
                         ("__seq_", "ascending")]).drop_columns(sort_keys)
    laid = _held_only(_current(laid, key), key)
    n = laid.num_rows
    empty = pa.Table.from_batches([], target)
    if n == 0:
        return Folded(empty, np.zeros(0, np.int64), empty, 0, 0, 0)
    same = same_as_previous(laid, key)
    deleting = laid["__del"].to_numpy()
    equal = same_as_previous(laid, tracked)
    alive_before = same & ~np.r_[False, deleting[:-1]]
    starts = ~deleting & (~alive_before | ~equal)
    first = np.flatnonzero(starts)
    # A version runs from its first row over the changes in untracked columns after it; the row after its
    # last, when of the same key, ends it (a delete, or a change that starts the next version).
    next_start = np.r_[first[1:], n]
    deletes = np.flatnonzero(deleting)
    next_delete = deletes[np.minimum(np.searchsorted(deletes, first), len(deletes) - 1)] if len(deletes) else \
        np.full(len(first), n)
    next_delete = np.where(next_delete > first, next_delete, n)
    last = np.minimum(next_start, next_delete) - 1
    after = last + 1
    ends = np.zeros(len(first), bool)
    inside = after < n
    ends[inside] = same[after[inside]]
    kind = laid["__kind"].to_numpy()
    from_open = kind[first] == 0
    changed = ~from_open | (last > first) | ends
    keep = np.flatnonzero(changed)
    first, last, after, ends, from_open = first[keep], last[keep], after[keep], ends[keep], from_open[keep]
    ender = np.where(ends, after, 0)
    end_scn = pc.if_else(pa.array(ends), laid["__order"].take(pa.array(ender)), pa.scalar(None, pa.int64()))
    end_at = pc.if_else(pa.array(ends), laid["__at"].take(pa.array(ender)), pa.scalar(None, _TS))
    ended_by_delete = ends & deleting[ender]
    versions = pa.Table.from_arrays(
        [*(laid[c].take(pa.array(last)) for c in own), laid["__order"].take(pa.array(last)),
         laid["__first_scn"].take(pa.array(first)), end_scn, laid["__first_at"].take(pa.array(first)), end_at,
         pa.array(ended_by_delete)], schema=target)
    origin = laid["__origin"].to_numpy()[first]
    on_open = np.flatnonzero(from_open)
    return Folded(versions.take(pa.array(on_open)), origin[on_open], versions.filter(pa.array(~from_open)),
                  closed=int(ends.sum()), deleted=int(ended_by_delete.sum()), in_place=int((last > first).sum()))


def _current(laid: pa.Table, key: Sequence[str]) -> pa.Table:
    """The laid-out rows without what a version already holds: changes of a key at or below its open
    version's ``__scn``, and all but the last change of a key at one SCN (a transaction's final image)."""
    n = laid.num_rows
    if n == 0:
        return laid
    same = same_as_previous(laid, key)
    kind = laid["__kind"].to_numpy()
    order = laid["__order"].to_numpy()
    run_start = np.maximum.accumulate(np.where(~same, np.arange(n), 0))
    held = np.where(kind[run_start] == 0, order[run_start], np.iinfo(np.int64).min)
    stale = (kind == 1) & (order <= held)
    later_same_scn = np.r_[same[1:] & (order[1:] == order[:-1]) & (kind[1:] == 1), False] & (kind == 1)
    drop = stale | later_same_scn
    return laid.filter(pa.array(~drop)) if drop.any() else laid


def _held_only(laid: pa.Table, key: Sequence[str]) -> pa.Table:
    """The laid-out rows without the changes that apply only where their key is held (``HELD_ONLY``: a transaction
    that left the key as it found it) and find it without a live version; the others are updates."""
    cond = laid["__cond"].to_numpy(zero_copy_only=False)
    if not cond.any():
        return laid
    n, deleting = laid.num_rows, laid["__del"].to_numpy(zero_copy_only=False)
    group = np.cumsum(~same_as_previous(laid, key))
    # Whether the key is held before a row: as the last row before it that is not held-only left it.
    plain = np.maximum.accumulate(np.where(~cond, np.arange(n), -1))
    before = np.maximum(np.r_[-1, plain[:-1]], 0)
    held = (np.r_[-1, plain[:-1]] >= 0) & (group[before] == group) & ~deleting[before]
    return laid.filter(pa.array(~(cond & ~held)))


def same_as_previous(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Per row, whether each of ``columns`` equals the previous row's (nulls equal nulls, NaN equals NaN);
    the first row is never equal."""
    n = table.num_rows
    out = np.ones(n, bool)
    if n:
        out[0] = False
    for name in columns:
        column = table[name].combine_chunks()
        now, before = column.slice(1), column.slice(0, max(n - 1, 0))
        try:
            equal = pc.fill_null(pc.equal(now, before), False)
            if pa.types.is_floating(column.type):
                equal = pc.or_(equal, pc.fill_null(pc.and_(pc.is_nan(now), pc.is_nan(before)), False))
            equal = pc.or_(equal, pc.and_(pc.is_null(now), pc.is_null(before)))
            flags = equal.to_numpy(zero_copy_only=False)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            flags = np.array([a == b for a, b in zip(now.to_pylist(), before.to_pylist(), strict=True)], bool)
        out[1:] &= flags
    return out


def open_versions(table: pa.Table) -> pa.Table:
    """The current (open) versions among ``table``'s rows."""
    return table.filter(pc.is_null(table["__end_scn"]))


def as_of_filter(table: pa.Table, scn: Scn | None = None, at_us: int | None = None) -> pa.Table:
    """The versions that held at SCN ``scn`` (or at source commit time ``at_us``, microseconds UTC)."""
    if scn is not None:
        start, end, value = table["__start_scn"], table["__end_scn"], pa.scalar(scn.value, pa.int64())
    else:
        start, end = table["__start_at"], table["__end_at"]
        value = pa.scalar(at_us, pa.int64()).cast(_TS)
    held = pc.and_(pc.less_equal(start, value), pc.or_(pc.is_null(end), pc.greater(end, value)))
    return table.filter(held)
