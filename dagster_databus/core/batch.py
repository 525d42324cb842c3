"""Change batches: whole consistency windows held by column, one Arrow record batch per table.

What capture hands the change log to write in bulk. Each table's record batch holds the table's
columns in their snapshot (Arrow) form (``TableSchema.arrow``, ``core.types``), then the event
columns of ``EVENT_SCHEMA`` (``core.event_columns``). Commit order across tables is (``__window_scn``,
``__seq``): ``__seq`` numbers the events of a window from 0 whatever their table, as in
``core.events.Window``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Protocol, TypeAlias, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.event_columns import EVENT_NAMES, EVENT_SCHEMA
from dagster_databus.core.events import OPS, ChangeEvent, Window, encode_key
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """Whole windows of one source's changes, by column: ``tables`` maps each table with events to
    its record batch (columns, then ``EVENT_SCHEMA``)."""

    tables: Mapping[str, pa.RecordBatch]

    def __post_init__(self) -> None:
        if not any(len(b) for b in self.tables.values()):
            raise ValueError("a change batch holds at least one event")

    @property
    def events(self) -> int:
        return sum(len(b) for b in self.tables.values())

    def column(self, name: str) -> np.ndarray:
        """An event column of every table, tables in ``tables`` order (as ``commit_order`` indexes it)."""
        return np.concatenate([np.asarray(b.column(name)) for b in self.tables.values()])

    def commit_order(self) -> np.ndarray | None:
        """Positions (into ``column``'s concatenation) in commit order; None when already in it."""
        window, seq = self.column("__window_scn"), self.column("__seq")
        if len(self.tables) == 1 and _ordered(window, seq):
            return None
        return np.lexsort((seq, window))

    def window_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Each window's end SCN and its last event's commit time (ms), in commit order."""
        order = self.commit_order()
        window, commit = self.column("__window_scn"), self.column("__commit_ts_ms")
        if order is not None:
            window, commit = window[order], commit[order]
        last = np.flatnonzero(np.append(window[1:] != window[:-1], True))
        return window[last], commit[last]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for rows in self.tables.values():
            for item in pc.value_counts(rows.column("__op")).to_pylist():
                counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
        return counts

    @classmethod
    def from_windows(cls, windows: Sequence[Window], schemas: Mapping[str, TableSchema]) -> ChangeBatch:
        """The columnar form of row-by-row windows (capture that builds ``Window`` objects)."""
        per_table: dict[str, list[tuple[int, object]]] = {}
        for window in windows:
            window_scn = window.scn.value
            for event in window.events:
                per_table.setdefault(event.table, []).append((window_scn, event))
        tables = {}
        for table, items in per_table.items():
            schema = schemas[table]
            events = [e for _, e in items]
            rows = [e.row for e in events]  # type: ignore[attr-defined]
            arrays = [c.type.to_arrow([r.get(c.name) for r in rows]) for c in schema.columns]
            tables[table] = table_rows(
                schema, arrays, scn=[e.scn.value for e in events],  # type: ignore[attr-defined]
                window_scn=[w for w, _ in items], seq=[e.seq for e in events],  # type: ignore[attr-defined]
                op=[e.op.value for e in events],  # type: ignore[attr-defined]
                commit_ts_ms=[e.commit_ts_ms for e in events],  # type: ignore[attr-defined]
                keys=pa.array([encode_key(e.key) for e in events], pa.string()))  # type: ignore[attr-defined]
        return cls(tables)


    def write(self, writer: BatchWriter[Written], epoch: str, state: dict[str, str]) -> Written:
        """Appended to the change log as one segment (``Changes``)."""
        return writer.append_batch(self, epoch, state)

    def window_commits(self) -> np.ndarray:
        """Each window's commit time (ms), in commit order (``Changes``)."""
        return self.window_ends()[1]

    def counted(self, counts: dict[str, int]) -> ChangeBatch:
        """Its events counted by operation into ``counts`` (``Changes``)."""
        for op, count in self.op_counts().items():
            counts[op] = counts.get(op, 0) + count
        return self

    def to_windows(self, schemas: Mapping[str, TableSchema]) -> list[Window]:
        """The row-by-row form: ``Window`` objects of ``ChangeEvent`` with canonical values."""
        events = []
        for table, rows in self.tables.items():
            schema = schemas[table]
            images = schema.rows_from_arrow(rows.select(schema.column_names))
            meta = zip(*(rows.column(n).to_pylist() for n in ("__window_scn", "__seq", "__scn", "__op",
                                                             "__commit_ts_ms")), strict=True)
            for image, (window, seq, scn, op, commit) in zip(images, meta, strict=True):
                key = tuple(image[k] for k in schema.primary_key)
                events.append((window, seq, ChangeEvent(Scn(scn), seq, table, OPS[op], key, image, commit)))
        events.sort(key=lambda item: (item[0], item[1]))
        windows: list[Window] = []
        for window, group in groupby(events, key=lambda item: item[0]):
            windows.append(Window(scn=Scn(window), events=tuple(e for _, _, e in group)))
        return windows


@dataclass(frozen=True)
class SpooledBatch:
    """Whole windows too large to hold at once (a transaction of millions of rows): ``pieces`` gives them as
    change batches in commit order, one at a time, read back from where the source spooled them. A window may
    span pieces; the log writes them all as one segment (``LogWriter.append_spooled``)."""

    first_scn: Scn
    last_scn: Scn
    windows: int
    commit_ms: int  # the last window's commit time
    pieces: Callable[[], Iterator[ChangeBatch]]

    def write(self, writer: BatchWriter[Written], epoch: str, state: dict[str, str]) -> Written:
        """Appended to the change log as one segment, a piece at a time (``Changes``)."""
        return writer.append_spooled(self, epoch, state)

    def window_commits(self) -> np.ndarray:
        """Each window's commit time (ms) as if all were the last's: the pieces are not held (``Changes``)."""
        return np.array([self.commit_ms] * self.windows, np.int64)

    def counted(self, counts: dict[str, int]) -> SpooledBatch:
        """Its pieces' events counted by operation into ``counts`` as they are read (``Changes``)."""
        pieces = self.pieces

        def counting() -> Iterator[ChangeBatch]:
            for piece in pieces():
                yield piece.counted(counts)

        return replace(self, pieces=counting)


Written = TypeVar("Written", covariant=True)


class BatchWriter(Protocol[Written]):
    """What a batch of changes is appended with (``log.writer.LogWriter``): a method for each kind of batch."""

    def append_batch(self, batch: ChangeBatch, epoch: str, state: dict[str, str] | None = None) -> Written: ...

    def append_spooled(self, spooled: SpooledBatch, epoch: str, state: dict[str, str] | None = None) -> Written: ...


class Changes(Protocol):
    """What a source's poll yields, one chunk of whole windows after the last, however it holds them (a
    ``ChangeBatch`` in memory, a ``SpooledBatch`` read back piece by piece): capture writes it, counts it and
    reads its commit times through these, whatever it is."""

    def write(self, writer: BatchWriter[Written], epoch: str, state: dict[str, str]) -> Written:
        """Append it to the change log as one segment; what the writer returns of it."""

    def window_commits(self) -> np.ndarray:
        """Each window's commit time (ms), in commit order."""

    def counted(self, counts: dict[str, int]) -> Changes:
        """It, with its events counted by operation into ``counts`` (by the time it is written)."""


EventValues: TypeAlias = "pa.Array | Sequence[int] | Sequence[str] | np.ndarray"  # an event column, or values of it


def table_rows(schema: TableSchema, columns: Sequence[pa.Array], *, scn: EventValues, window_scn: EventValues,
               seq: EventValues, op: EventValues, commit_ts_ms: EventValues, where: str = "change events",
               keys: pa.Array | None = None) -> pa.RecordBatch:
    """A table's record batch in a change batch, the one place its event columns are put together: its converted
    ``columns`` (in ``schema``'s order), then each event column by name, as Arrow arrays of ``EVENT_SCHEMA``'s
    types or values to make them of. ``__key`` is encoded from the key columns (``encode_keys``: a NULL in a key is
    refused, ``where`` naming the events) unless ``keys`` are given; ``__partition`` follows from the keys."""
    if keys is None:
        at = {name: i for i, name in enumerate(schema.column_names)}
        key_columns = [columns[at[k]] for k in schema.primary_key]
        keys = encode_keys(key_columns, lambda: list(zip(*(schema.column(k).type.from_arrow(c) for k, c in zip(
            schema.primary_key, key_columns, strict=True)), strict=True)), schema, where)
    events = {"__scn": scn, "__window_scn": window_scn, "__seq": seq, "__op": op, "__key": keys,
              "__partition": partitions(keys), "__commit_ts_ms": commit_ts_ms}
    arrays = [_event_array(events[name], EVENT_SCHEMA.field(name).type) for name in EVENT_NAMES]
    return pa.RecordBatch.from_arrays([*columns, *arrays], schema=batch_schema(schema))


def repeated(value: object, typ: pa.DataType, n: int) -> pa.Array:
    """An array of ``n`` copies of ``value`` as ``typ``, made in Arrow: a Python list of ``n`` items to convert
    costs about 17 ms a million items, ``pa.repeat`` microseconds."""
    return pa.repeat(pa.scalar(value, typ), n)


def _event_array(values: EventValues, typ: pa.DataType) -> pa.Array:
    return values if isinstance(values, pa.Array) else pa.array(values, typ)


def batch_schema(schema: TableSchema) -> pa.Schema:
    """The Arrow schema of ``schema``'s record batch in a change batch."""
    return pa.schema([*schema.arrow(with_meta=False), *EVENT_SCHEMA])


def encode_keys(columns: Sequence[pa.Array],
                values: Sequence[Sequence[object]] | Callable[[], Sequence[Sequence[object]]] | None = None,
                schema: TableSchema | None = None, where: str = "change events") -> pa.Array:
    """``core.events.encode_key`` of every row. By column when every key column is an integer or a text
    column with nothing JSON must escape (the common keys); else per row from ``values``: the key tuples in
    canonical Python values, or a function that makes them (only called when needed). With ``schema``, a
    NULL in a key is refused (``TableSchema.refuse_null_keys``) before anything is encoded."""
    if schema is not None:
        schema.refuse_null_keys(columns, where)
    fast = _keys_by_column(columns)
    if fast is not None:
        return fast
    if callable(values):
        values = values()
    if values is None:
        values = list(zip(*(c.to_pylist() for c in columns), strict=True))
    return pa.array([encode_key(v) for v in values], pa.string())


def _keys_by_column(columns: Sequence[pa.Array]) -> pa.Array | None:
    """The JSON arrays of the keys, joined by Arrow kernels; None when a column needs the per-row form."""
    parts = []
    for column in columns:
        if column.null_count:
            return None
        if pa.types.is_integer(column.type):
            parts.append(column.cast(pa.string()))
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            if len(column) and pc.any(pc.match_substring_regex(column, _JSON_ESCAPED)).as_py():
                return None
            parts.append(pc.binary_join_element_wise('"', column.cast(pa.string()), '"', ""))
        else:
            return None
    joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, ",")
    return pc.binary_join_element_wise("[", joined, "]", "")


_JSON_ESCAPED = r'[\x00-\x1f"\\]'  # what JSON writes escaped: control characters, quotes, backslashes


def partitions(keys: pa.Array | Sequence[str]) -> pa.Array:
    """``core.events.key_partition`` of encoded keys (crc32 mod 65536)."""
    from dagster_databus.core.crc32 import crc32_each  # numba: loaded when a batch is first built

    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, pa.string())
    return pa.array((crc32_each(keys) & 0xFFFF).astype(np.int32), pa.int32())


def _ordered(window: np.ndarray, seq: np.ndarray) -> bool:
    if len(window) < 2:
        return True
    dw, ds = np.diff(window), np.diff(seq)
    return bool(np.all((dw > 0) | ((dw == 0) & (ds > 0))))

