"""Parquet data files of Delta tables written by Spark tasks, and the statistics that describe them.

A task writes rows as Parquet straight into the table's folder (a local folder or an object store,
through the storage layer) and describes each file as a ``DataFile``: its path in the table, size,
rows and Delta's per-file statistics. The driver commits those descriptions (``dataplane/commit.py``);
no row passes through it. ``TableFiles`` goes the other way: the files of one table version with the
primary-key bounds their statistics give, so a merge can tell which files may hold a key.

The statistics are bounds every Delta reader can prune by: exact minimum, maximum and null count per
column (timestamps to the microsecond, decimals with exactly their scale's digits), a string longer
than 64 characters bounded by a cut prefix, no bounds for binary columns, and none for a file whose
float column holds a NaN (which no two readers order alike).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dagster_databus.storage.lake import Lake

# What a task reports to the driver, one row per file it wrote (or, with ``kind``, other facts).
ACTION_SCHEMA = pa.schema([
    pa.field("kind", pa.string()),  # "add", "remove", or "fact" (JSON in ``stats``)
    pa.field("path", pa.string()),
    pa.field("size", pa.int64()),
    pa.field("rows", pa.int64()),
    pa.field("stats", pa.string()),
])
STRING_STATS_CHARS = 64  # longer strings: the bounds are cut to a prefix and raised (``_cut``), as delta-rs does
COMPRESSION, COMPRESSION_LEVEL = "zstd", 1  # a third less time than zstd's default level, as small here
# Rows per Parquet row group in every snapshot file: the least a reader of a key range (a verification slice) reads,
# by the row groups' key statistics; a file of a million rows in one group would be read whole for a thousand.
ROW_GROUP_ROWS = 131_072


def delta_writer() -> Any:
    """delta-rs's writer settings for snapshot files: its own default compression, row groups of ``ROW_GROUP_ROWS``."""
    from deltalake import WriterProperties

    return WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression="SNAPPY")


@dataclass(frozen=True, slots=True)
class DataFile:
    """A Parquet file in a table's folder, as a Delta add action describes it."""

    path: str  # relative to the table's root
    size: int
    rows: int
    stats: str  # Delta's per-file statistics (JSON)


@dataclass(frozen=True, slots=True)
class TableLocation:
    """Where a Delta table's files live, as text a task rebuilds it from: the lake's spec and the
    table's folder in it."""

    lake_spec: str
    key: str  # the table's folder, relative to the lake's root

    @property
    def lake(self) -> Lake:
        return Lake.from_spec(self.lake_spec)

    def object_key(self, path: str) -> str:
        return f"{self.key}/{unquote(path)}"

    def read(self, path: str, columns: Sequence[str] | None = None) -> pa.Table:
        """One data file (``path`` as the Delta log names it), only ``columns`` if given."""
        wanted = list(columns) if columns is not None else None
        lake = self.lake
        if lake.path is not None:  # by name: no Python file object for Arrow's threads to free (storage.arrowfs)
            return pq.read_table(str(lake.path / self.object_key(path)), columns=wanted, partitioning=None)
        with lake.objects.reader(self.object_key(path)) as f:
            return pq.read_table(f, columns=wanted)

    def schema(self, path: str) -> pa.Schema:
        """One data file's physical columns (its footer only)."""
        lake = self.lake
        if lake.path is not None:
            return pq.read_schema(str(lake.path / self.object_key(path)))
        with lake.objects.reader(self.object_key(path)) as f:
            return pq.read_schema(f)


class FileWriter:
    """Writes rows of one table as Parquet files of at most ``file_rows`` rows each, named
    ``<prefix>-<n>-<uuid>.parquet`` so every file a run wrote can be found by its prefix."""

    def __init__(self, location: TableLocation, schema: pa.Schema, file_rows: int, prefix: str) -> None:
        self.location, self.schema, self.file_rows, self.prefix = location, schema, file_rows, prefix
        self.lake = location.lake
        self.written: list[DataFile] = []

    def write(self, batches: Iterable[pa.RecordBatch]) -> list[DataFile]:
        """Write the batches (rolling to a new file every ``file_rows`` rows); the files this call wrote."""
        first = len(self.written)
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            while batch.num_rows:
                take = batch.slice(0, self.file_rows - rows)
                pending.append(take)
                rows += take.num_rows
                batch = batch.slice(take.num_rows)
                if rows == self.file_rows:
                    self.write_table(pa.Table.from_batches(pending, self.schema))
                    pending, rows = [], 0
        if rows:
            self.write_table(pa.Table.from_batches(pending, self.schema))
        return self.written[first:]

    def write_even(self, table: pa.Table) -> list[DataFile]:
        """``table`` in as few files of at most ``file_rows`` rows as it needs, of like sizes: a file that grew past
        ``file_rows`` is split in halves (thirds, ...), not into a full file and a small remainder."""
        parts = max(1, -(-table.num_rows // self.file_rows))
        size = -(-table.num_rows // parts)
        return [self.write_table(table.slice(start, size)) for start in range(0, table.num_rows, size)] \
            if table.num_rows else []

    def write_table(self, table: pa.Table) -> DataFile:
        """One file holding ``table`` whole."""
        table = table.cast(self.schema) if table.schema != self.schema else table
        name = f"{self.prefix}-{len(self.written):05d}-{uuid.uuid4().hex}.{COMPRESSION}.parquet"
        key = self.location.object_key(name)
        options = {"compression": COMPRESSION, "compression_level": COMPRESSION_LEVEL,
                   "use_dictionary": dictionary_columns(table), "row_group_size": ROW_GROUP_ROWS}
        if self.lake.path is not None:
            target = self.lake.path / key
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, target, **options)
            with open(target, "rb+") as f:  # durable before the driver can commit it
                os.fsync(f.fileno())
            size = target.stat().st_size
        else:
            fd, tmp = tempfile.mkstemp(suffix=".parquet", prefix="databus-")
            os.close(fd)
            pq.write_table(table, tmp, **options)
            size = os.path.getsize(tmp)
            self.lake.objects.put_file(key, Path(tmp))
        written = DataFile(name, size, table.num_rows, delta_stats(table))
        self.written.append(written)
        return written


def dictionary_columns(table: pa.Table, sample: int = 10_000) -> list[str]:
    """Columns worth dictionary encoding: text and booleans whose values repeat (in a sample of the first
    rows). Dictionary pages for unique values are built only to be dropped, which costs time and size."""
    head = table.slice(0, sample)
    chosen = []
    for field, column in zip(head.schema, head.columns, strict=True):
        text = pa.types.is_string(field.type) or pa.types.is_large_string(field.type)
        if pa.types.is_boolean(field.type) or (text and pc.count_distinct(column).as_py() <= len(column) // 2):
            chosen.append(field.name)
    return chosen


def actions_batch(files: Sequence[DataFile], removed: Sequence[str] = (),
                  facts: Sequence[dict[str, Any]] = (), changes: Sequence[DataFile] = ()) -> pa.RecordBatch:
    """What a task hands the driver: its added files, the files they replace, other facts, and the change
    files it wrote (a table with a change data feed)."""
    written = [*files, *changes]
    kinds = ["add"] * len(files) + ["cdc"] * len(changes) + ["remove"] * len(removed) + ["fact"] * len(facts)
    return pa.RecordBatch.from_arrays([
        pa.array(kinds, pa.string()),
        pa.array([f.path for f in written] + list(removed) + [None] * len(facts), pa.string()),
        pa.array([f.size for f in written] + [None] * (len(removed) + len(facts)), pa.int64()),
        pa.array([f.rows for f in written] + [None] * (len(removed) + len(facts)), pa.int64()),
        pa.array([f.stats for f in written] + [None] * len(removed) + [json.dumps(f) for f in facts], pa.string()),
    ], schema=ACTION_SCHEMA)


@dataclass(frozen=True, slots=True)
class TaskReport:
    """The task rows of one Spark job, read on the driver: files added and removed, and facts."""

    added: tuple[DataFile, ...]
    removed: tuple[str, ...]
    facts: tuple[dict[str, Any], ...]
    changes: tuple[DataFile, ...] = ()  # change files (``_change_data/``) of a table with a change data feed

    @classmethod
    def of(cls, actions: pa.Table) -> TaskReport:
        added: list[DataFile] = []
        removed: list[str] = []
        facts: list[dict[str, Any]] = []
        changes: list[DataFile] = []
        for row in actions.to_pylist():
            if row["kind"] in ("add", "cdc"):
                (added if row["kind"] == "add" else changes).append(
                    DataFile(row["path"], row["size"], row["rows"], row["stats"]))
            elif row["kind"] == "remove":
                removed.append(row["path"])
            else:
                facts.append(json.loads(row["stats"]))
        return cls(tuple(added), tuple(removed), tuple(facts), tuple(changes))

    def total(self, name: str) -> int:
        return sum(int(f.get(name, 0)) for f in self.facts)


# -- statistics ----------------------------------------------------------------------------------

def delta_stats(table: pa.Table) -> str:
    """Delta's per-file statistics of ``table``: numRecords, and per column minValues, maxValues and
    nullCount, in the forms delta-rs and delta-spark both parse exactly (see the module's docstring)."""
    mins: dict[str, str] = {}
    maxs: dict[str, str] = {}
    nulls: dict[str, str] = {}
    bounded = True
    for field, column in zip(table.schema, table.columns, strict=True):
        nulls[field.name] = str(column.null_count)
        if column.null_count == len(column) or not _has_bounds(field.type):
            continue
        if pa.types.is_floating(field.type) and pc.any(pc.is_nan(column)).as_py():
            # NaN has no place in an order every reader shares, and a reader that finds one column without
            # bounds while others have them skips the file for filters on it: no bounds for this file at all.
            bounded = False
            continue
        bounds = pc.min_max(column)
        mins[field.name] = _bound(bounds["min"].as_py(), field.type, upper=False)
        maxs[field.name] = _bound(bounds["max"].as_py(), field.type, upper=True)
    ranges = (',"minValues":' + _json_object(mins) + ',"maxValues":' + _json_object(maxs)) if bounded else ""
    return '{"numRecords":' + str(table.num_rows) + ranges + ',"nullCount":' + _json_object(nulls) + "}"


def _json_object(values: dict[str, str]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in values.items()) + "}"


def _has_bounds(kind: pa.DataType) -> bool:
    """Binary and nested columns get no minimum or maximum (delta-rs and delta-spark give them none)."""
    return not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_nested(kind))


def _bound(value: Any, kind: pa.DataType, upper: bool) -> str:
    """The JSON text of a column's minimum or maximum, exact wherever the value's form allows."""
    if pa.types.is_boolean(kind):
        return "true" if value else "false"
    if pa.types.is_integer(kind):
        return str(int(value))
    if pa.types.is_floating(kind):
        if value in (math.inf, -math.inf):
            return '"Infinity"' if value > 0 else '"-Infinity"'
        if value == 0:  # -0.0 and 0.0 compare equal: bound both
            return "0.0" if upper else "-0.0"
        return repr(float(value))
    if pa.types.is_decimal(kind):
        return format(value, "f")  # exactly ``scale`` digits, never an exponent
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return json.dumps(value if len(value) <= STRING_STATS_CHARS else _cut(value, upper))
    if pa.types.is_date(kind):
        return json.dumps(value.isoformat())
    if pa.types.is_timestamp(kind):
        if kind.tz is not None:
            return json.dumps(value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z")
        return json.dumps(value.isoformat(sep=" ", timespec="microseconds"))
    return json.dumps(str(value))


def _cut(value: str, upper: bool) -> str:
    """A long string's bound cut to ``STRING_STATS_CHARS`` characters: the prefix for a minimum; for a
    maximum the prefix with its last character raised (carrying past U+10FFFF), so it stays above."""
    prefix = list(value[:STRING_STATS_CHARS])
    if not upper:
        return "".join(prefix)
    while prefix:
        code = ord(prefix.pop()) + 1
        if code == 0xD800:
            code = 0xE000  # skip the surrogates, which are no characters
        if code <= 0x10FFFF:
            return "".join(prefix) + chr(code)
    return "\U0010FFFF"  # every character of the prefix was U+10FFFF (no real string gets here)


# -- the files of a table version ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TableFile:
    path: str
    size: int
    rows: int
    # Per key column, the lowest and highest value the statistics promise (None: no bound).
    low: tuple[Any, ...]
    high: tuple[Any, ...]

    def bounded(self) -> bool:
        return all(v is not None for v in self.low) and all(v is not None for v in self.high)


class TableFiles:
    """The data files of one version of a table, with the key bounds from their statistics, grouped
    so that no key can be held by files of two groups: files whose key boxes overlap share a group."""

    def __init__(self, files: Sequence[TableFile], key: Sequence[str], types: Sequence[pa.DataType]) -> None:
        self.files, self.key, self.types = list(files), list(key), list(types)
        self.group_of = _overlap_groups(self.files)
        self.groups = max(self.group_of, default=-1) + 1
        self._unbounded = [i for i, f in enumerate(self.files) if not f.bounded()]
        order = sorted((i for i, f in enumerate(self.files) if f.bounded()), key=lambda i: self.files[i].low[0])
        self._order = np.array(order, dtype=np.int64)
        self._group = np.array([self.group_of[i] for i in order], dtype=np.int64)
        self._low = [_sortable(pa.array([self.files[i].low[c] for i in order], t), t) for c, t in enumerate(self.types)]
        self._high = [_sortable(pa.array([self.files[i].high[c] for i in order], t), t)
                      for c, t in enumerate(self.types)]
        # Running maximum of the first key column's upper bounds: does any earlier file reach a key?
        reach = list(self._high[0])
        for i in range(1, len(reach)):
            reach[i] = max(reach[i], reach[i - 1])
        self._reach = np.array(reach, dtype=self._high[0].dtype)

    @classmethod
    def of(cls, table: Any, key: Sequence[str], schema: pa.Schema) -> TableFiles:
        """The files of ``table`` (a ``deltalake.DeltaTable`` at the version to merge into)."""
        actions = pa.table(table.get_add_actions(flatten=True))
        names, types = actions.column_names, [schema.field(k).type for k in key]
        lows = [_key_bounds(actions, f"min.{k}", t, upper=False) if f"min.{k}" in names
                else [None] * actions.num_rows for k, t in zip(key, types, strict=True)]
        highs = [_key_bounds(actions, f"max.{k}", t, upper=True) if f"max.{k}" in names
                 else [None] * actions.num_rows for k, t in zip(key, types, strict=True)]
        rows = actions["num_records"].to_pylist()
        files = [TableFile(path, size, rows[i] or 0, tuple(c[i] for c in lows), tuple(c[i] for c in highs))
                 for i, (path, size) in enumerate(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(),
                                                       strict=True))]
        return cls(files, key, types)

    def route(self, keys: Sequence[pa.Array | pa.ChunkedArray], room: int = 0) -> np.ndarray:
        """Per key (``keys``: one array per key column), the group of the files that may hold it, or, for
        a key no file can hold, ``-1 - g`` where ``g`` counts the files (ordered by the first key
        column's lower bound) starting at or before it: new keys in one gap between files share it.

        A new key next to a file of fewer than ``room`` rows (the file before its gap, or the first file)
        goes to that file's group instead, if the file overlaps no other: small tables stay one file."""
        n = len(keys[0])
        if self._unbounded:  # a file without key statistics may hold any key
            return np.full(n, self.group_of[self._unbounded[0]], dtype=np.int64)
        if not len(self._order):
            return np.full(n, -1, dtype=np.int64)
        columns = [_sortable(pa.array(k) if not isinstance(k, pa.Array | pa.ChunkedArray) else k, t)
                   for k, t in zip(keys, self.types, strict=True)]
        first = columns[0]
        position = np.searchsorted(self._low[0], first, side="right") - 1
        out = (-2 - position).astype(np.int64)  # a gap, unless a file below holds the key
        at = np.maximum(position, 0)
        started = position >= 0
        # Another file before the candidate reaches this key: more than one file may hold it.
        crowded = started & (at > 0) & (self._reach[np.maximum(at - 1, 0)] >= first)
        inside = started & ~crowded
        for c, column in enumerate(columns):
            inside &= (column >= self._low[c][at]) & (column <= self._high[c][at])
        out[inside] = self._group[at[inside]]
        for row in np.nonzero(crowded)[0]:
            holder = self._holder([column[row] for column in columns], int(at[row]))
            if holder is not None:
                out[row] = self._group[holder]
        if room:
            new = out < 0
            if new.any():
                rows = np.array([self.files[i].rows for i in self._order], dtype=np.int64)
                alone = np.bincount(self._group, minlength=self.groups)[self._group] == 1
                takes = (rows < room) & alone
                neighbour = np.maximum(position, 0)
                absorb = new & takes[neighbour]
                out[absorb] = self._group[neighbour[absorb]]
        return out

    def _holder(self, key: list[Any], last: int) -> int | None:
        """The sorted position of a file whose key box holds ``key``, among those up to ``last``."""
        for j in range(last, -1, -1):
            if all(self._low[c][j] <= v <= self._high[c][j] for c, v in enumerate(key)):
                return j
            if j and self._reach[j - 1] < key[0]:
                return None  # no earlier file reaches this far
        return None

    def members(self, group: int) -> list[TableFile]:
        return [f for f, g in zip(self.files, self.group_of, strict=True) if g == group]


def _sortable(array: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> np.ndarray:
    """Key values as numpy values that order as Delta orders them: integers, dates and timestamps as
    integers, floats as floats, anything else (strings by code point, decimals) as Python objects."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return np.asarray(array.cast(pa.int64()).to_numpy(zero_copy_only=False))
    if pa.types.is_date(kind):
        return np.asarray(array.cast(pa.int32()).to_numpy(zero_copy_only=False)).astype(np.int64)
    if pa.types.is_timestamp(kind):
        return np.asarray(array.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64()).to_numpy(zero_copy_only=False))
    if pa.types.is_floating(kind):
        return np.asarray(array.cast(pa.float64()).to_numpy(zero_copy_only=False))
    return np.array(array.to_pylist(), dtype=object)


def _key_bounds(actions: pa.Table, name: str, kind: pa.DataType, upper: bool) -> list[Any]:
    """A key column's bounds as delta-rs parsed them, made safe to route by: delta-rs writes a timestamp's
    maximum cut to the millisecond, and a decimal beyond 64 bits clamped to the 64-bit limits."""
    values = actions[name].to_pylist()
    out: list[Any] = []
    for v in values:
        if v is None:
            out.append(None)
        elif pa.types.is_timestamp(kind) and upper:
            out.append(v + dt.timedelta(microseconds=999) if v.microsecond % 1000 == 0 else v)
        elif pa.types.is_decimal(kind) and isinstance(v, decimal.Decimal) and v in (2**63 - 1, -(2**63)):
            out.append(None)  # delta-rs's own writer clamps wider decimals to these: no bound
        else:
            out.append(v)
    return out


def _overlap_groups(files: Sequence[TableFile]) -> list[int]:
    """Group numbers such that files whose key boxes overlap (or lack bounds) share one."""
    parent = list(range(len(files)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    unbounded = [i for i, f in enumerate(files) if not f.bounded()]
    for i in unbounded[1:]:
        union(i, unbounded[0])
    if unbounded:
        for i in range(len(files)):
            union(i, unbounded[0])
    else:
        # Sweep by the first key column; among files still open, full box overlap joins groups.
        order = sorted(range(len(files)), key=lambda i: files[i].low[0])
        active: list[int] = []
        for i in order:
            f = files[i]
            active = [j for j in active if files[j].high[0] >= f.low[0]]
            for j in active:
                g = files[j]
                if all(lo1 <= hi2 and lo2 <= hi1
                       for lo1, hi1, lo2, hi2 in zip(f.low, f.high, g.low, g.high, strict=True)):
                    union(i, j)
            active.append(i)
    roots: dict[int, int] = {}
    return [roots.setdefault(find(i), len(roots)) for i in range(len(files))]


def run_prefix() -> str:
    """A prefix for the data files of one bootstrap or merge: time-ordered, unique."""
    return f"db{int(time.time()):x}{uuid.uuid4().hex[:8]}"

