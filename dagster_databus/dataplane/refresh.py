"""On-demand snapshots of chosen rows: a key range and/or a filter read again from the source and folded into
a snapshot that stays current (its applied SCN does not move, capture and merges go on).

Each key range is read as a bootstrap reads it, in its own short consistent read at a position P it reports
(``sources.base.RangeRead``). Its rows become changes at SCN P (operation ``r``) and, for a key range read
without a filter, every key the snapshot holds in the range that the read did not return becomes a delete
at P. The merge applies them as it applies the log, only over an older row: a row the log changed after P
keeps the log's image, and the log's events after P apply over the rows read, as usual.

Deletes are looked for only where the snapshot orders keys as the source does: numbers, dates and
timestamps. A string key's order is the source's collation (often case-insensitive by default), which
byte order need not follow, so such a range is refreshed without deletes, and the result says so. With a
filter no deletes are looked for either: a row deleted at the source matches no filter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.batch import repeated
from dagster_databus.core.schema import TableSchema
from dagster_databus.dataplane.delta import conform_rows
from dagster_databus.dataplane.files import TableFiles, TableLocation
from dagster_databus.sources.base import KeyRange, RangeRead, RowSelection

ORDERED_ALIKE = frozenset({"byte", "short", "integer", "long", "decimal", "date", "timestamp"})


def finds_deletes(schema: TableSchema, rows: RowSelection) -> bool:
    """Whether a refresh of ``rows`` can tell which of the snapshot's keys the source no longer has."""
    return rows.where is None and all(schema.column(k).type.kind in ORDERED_ALIKE for k in schema.primary_key)


@dataclass(frozen=True)
class RangeChanges:
    """How one range's read becomes changes (picklable: Spark tasks run it): the change log reader's columns
    (``log.columns.change_schema``), the snapshot's, whether to look for deletes, and the read's time."""

    changes: pa.Schema
    target: pa.Schema
    key: tuple[str, ...]
    deletes: bool
    read_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def of(self, read: RangeRead, index: int, location: TableLocation, files: TableFiles
           ) -> Iterator[pa.RecordBatch]:
        """Range ``index`` of ``read`` as changes: its rows (``r``), then the deletes (``d``) of keys the
        snapshot's ``files`` hold in the range and the read did not return."""
        from dagster_databus.sources import read_range

        got = read_range(read, index)
        scn = got.scn.value
        seen: list[pa.Table] = []
        for batch in got.batches:
            if self.deletes:
                seen.append(pa.table([batch.column(k) for k in self.key], names=list(self.key)))
            yield self.stamped(batch, scn, "r")
        if not self.deletes:
            return
        held = self.held(read.ranges[index], location, files)
        if not held.num_rows:
            return
        found = pa.concat_tables(seen) if seen else pa.table({k: pa.array([], held.schema.field(k).type)
                                                              for k in self.key})
        found = pa.table([found.column(k).cast(held.schema.field(k).type) for k in self.key], names=list(self.key))
        gone = held.join(found, keys=list(self.key), join_type="left anti", use_threads=False)
        if gone.num_rows:
            others = [f for f in self.changes if f.name not in self.key and not f.name.startswith("__")]
            keys = [gone.column(k).combine_chunks() for k in self.key]
            rows = pa.RecordBatch.from_arrays([*keys, *(pa.nulls(gone.num_rows, f.type) for f in others)],
                                              names=[*self.key, *(f.name for f in others)])
            yield self.stamped(rows, scn, "d")

    def held(self, where: KeyRange, location: TableLocation, files: TableFiles) -> pa.Table:
        """The keys the snapshot's files hold in ``where``, each file read only if its key bounds reach it."""
        key_schema = pa.schema([self.target.field(k) for k in self.key])
        parts = [conform_rows(location.read(f.path, columns=list(self.key)), key_schema)
                 for f in files.files if _may_hold(f.low, f.high, where)]
        held = pa.concat_tables(parts) if parts else key_schema.empty_table()
        mask = np.ones(held.num_rows, dtype=bool)
        if where.after is not None:
            mask &= _beyond(held, self.key, where.after)
        if where.through is not None:
            mask &= ~_beyond(held, self.key, where.through)
        return held.filter(pa.array(mask))

    def stamped(self, batch: pa.RecordBatch, scn: int, op: str) -> pa.RecordBatch:
        n = batch.num_rows
        meta = {"__scn": pa.array(np.full(n, scn, np.int64)), "__seq": pa.array(np.zeros(n, np.int32)),
                "__window_scn": pa.array(np.full(n, scn, np.int64)), "__op": repeated(op, pa.string(), n),
                "__commit_ts_ms": pa.array(np.full(n, self.read_at_ms, np.int64)),
                "__partition": pa.array(np.zeros(n, np.int32))}
        columns = [meta[f.name] if f.name in meta else batch.column(f.name).cast(f.type) for f in self.changes]
        return pa.RecordBatch.from_arrays(columns, schema=self.changes)


def _may_hold(low: tuple[Any, ...], high: tuple[Any, ...], where: KeyRange) -> bool:
    """Whether a file whose first key column lies in [low[0], high[0]] may hold a key of ``where``."""
    try:
        if where.after is not None and high and high[0] is not None and high[0] < where.after[0]:
            return False
        if where.through is not None and low and low[0] is not None and low[0] > where.through[0]:
            return False
    except TypeError:  # bounds of another Python type than the range's: read the file to be sure
        return True
    return True


def _beyond(table: pa.Table, key: tuple[str, ...], values: tuple[Any, ...]) -> np.ndarray:
    """Per row, whether its key is after ``values`` in key order (lexicographic over the key columns)."""
    out = np.zeros(table.num_rows, dtype=bool)
    equal_so_far = np.ones(table.num_rows, dtype=bool)
    for name, value in zip(key, values, strict=True):
        column = table.column(name)
        scalar = _scalar(value, column.type)
        out |= equal_so_far & pc.fill_null(pc.greater(column, scalar), False).to_numpy(zero_copy_only=False)
        equal_so_far &= pc.fill_null(pc.equal(column, scalar), False).to_numpy(zero_copy_only=False)
    return out


def _scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    """``value`` (as the source or the user gave it) in the snapshot's type, to compare with."""
    if isinstance(value, str) and not pa.types.is_string(type_):
        return pa.scalar(value).cast(type_)
    return pa.scalar(value, type=type_)
