"""SQLite capture by column: a chunk of txlog rows becomes one ``ChangeBatch`` without per-event objects.

Windows, sequence numbers and keys are computed over the whole chunk with numpy and Arrow. Each
table's JSON row images are parsed together by Arrow's JSON reader against the JSON shape the
capture triggers write for the column's type (``$r``-tagged text for REAL values, ``$b`` hex for
BLOBs), so the common columns (INTEGER, TEXT, REAL, BLOB, BOOLEAN) never pass through per-value
Python. A table whose images do not parse to that shape (a DECIMAL column holding both integers and
reals, text in an INTEGER column, ...) or a column type that needs a per-value conversion falls back
to ``sqlite_types`` value by value, the exact conversion and refusal the row path always used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from dagster_databus.core.batch import ChangeBatch, batch_schema, encode_keys, partitions
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.sources.sqlite_types import sqlite_value

# The JSON each trigger writes per column type (sources/sqlite.py, _render_triggers): the fast shapes.
_REAL = pa.struct([("$r", pa.string())])
_BLOB = pa.struct([("$b", pa.string())])
_JSON_SHAPE: dict[str, pa.DataType] = {"long": pa.int64(), "boolean": pa.int64(), "string": pa.string(),
                                       "double": _REAL, "binary": _BLOB}
_OPS = pa.array(["i", "u", "d"])
_NEWLINE = pa.scalar("\n")


class _Fallback(Exception):
    """The table's images in this chunk need the value-by-value conversion."""


def chunk_batch(rows: Sequence[tuple[Any, ...]], schemas: Mapping[str, TableSchema],
                decode_row: Callable[[str], dict[str, Any]],
                on_stale: Callable[[str, int], Exception]) -> ChangeBatch | None:
    """The changes of configured tables in a chunk of txlog rows ``(scn, epoch, tbl, op, pk, row, ts, stale)``
    (whole epochs, in SCN order) as a change batch; None when none of them is a configured table's.

    ``decode_row`` parses one row image (the row path's JSON decoder); ``on_stale`` builds the error for
    a change written by out-of-date triggers (table, SCN).
    """
    scn, epoch, tbl, op, _pk, image, ts, stale = zip(*rows, strict=True)
    tables = pa.array(tbl, pa.string())
    keep = np.asarray(pc.is_in(tables, value_set=pa.array(list(schemas), pa.string())))
    if not keep.all():
        if not keep.any():
            return None
        kept = np.flatnonzero(keep)
    else:
        kept = None
    scns = _ints(scn, kept)
    epochs = _ints(epoch, kept)
    tables = tables if kept is None else tables.take(kept)
    stale_rows = np.flatnonzero(_ints(stale, kept))
    if len(stale_rows):
        first = int(stale_rows[0])
        raise on_stale(tables[first].as_py(), int(scns[first]))
    ops = pa.array(op, pa.string()) if kept is None else pa.array(op, pa.string()).take(kept)
    if not pc.all(pc.is_in(ops, value_set=_OPS)).as_py():
        bad = ops.filter(pc.invert(pc.is_in(ops, value_set=_OPS)))[0].as_py()
        raise ValueError(f"the txlog holds an operation {bad!r}; the capture triggers write only i, u and d")
    # A window is one epoch; its SCN is its last event's, and seq numbers its events from 0.
    count = len(scns)
    last_of_window = np.flatnonzero(np.append(epochs[1:] != epochs[:-1], True))
    starts = np.concatenate([[0], last_of_window[:-1] + 1])
    sizes = last_of_window - starts + 1
    window_scn = np.repeat(scns[last_of_window], sizes)
    seq = (np.arange(count) - np.repeat(starts, sizes)).astype(np.int32)
    images = pa.array(image, pa.string()) if kept is None else pa.array(image, pa.string()).take(kept)
    commit = _ints(ts, kept)
    codes = tables.dictionary_encode()
    out = {}
    for code, table in enumerate(codes.dictionary.to_pylist()):
        at: Any = np.flatnonzero(np.asarray(codes.indices) == code)
        if len(at) == count:
            at = slice(None)  # the only table: every row, without copies
        schema = schemas[table]
        texts = images if isinstance(at, slice) else images.take(at)
        table_scns = scns[at]
        try:
            columns = _columns_by_json(schema, texts)
        except _Fallback:
            columns = _columns_by_row(schema, texts, table_scns, decode_row)
        by_name = dict(zip(schema.column_names, columns, strict=True))
        keys = encode_keys([by_name[k] for k in schema.primary_key], _key_values(schema, by_name))
        out[table] = pa.RecordBatch.from_arrays([
            *columns, pa.array(table_scns, pa.int64()), pa.array(window_scn[at], pa.int64()),
            pa.array(seq[at], pa.int32()), ops if isinstance(at, slice) else ops.take(at), keys, partitions(keys),
            pa.array(commit[at], pa.int64()),
        ], schema=batch_schema(schema))
    return ChangeBatch(out)


def _ints(values: Sequence[int], kept: np.ndarray | None) -> np.ndarray:
    array = np.fromiter(values, dtype=np.int64, count=len(values))
    return array if kept is None else array[kept]


def _columns_by_json(schema: TableSchema, texts: pa.Array) -> list[pa.Array]:
    """Every column of the images parsed at once; ``_Fallback`` when a value is not of the fast shape."""
    if any(c.type.kind not in _JSON_SHAPE for c in schema.columns):
        raise _Fallback
    shape = pa.schema([(c.name, _JSON_SHAPE[c.type.kind]) for c in schema.columns])
    ndjson = pc.binary_join_element_wise(texts, _NEWLINE, "")  # one image per line
    offsets = np.frombuffer(ndjson.buffers()[1], np.int32, len(ndjson) + 1, ndjson.offset * 4)
    lines = ndjson.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    try:
        parsed = pj.read_json(pa.BufferReader(lines),
                              parse_options=pj.ParseOptions(explicit_schema=shape, unexpected_field_behavior="error"),
                              read_options=pj.ReadOptions(block_size=max(1 << 20, lines.size + 1)))
    except pa.ArrowInvalid:
        raise _Fallback from None
    if parsed.num_rows != len(texts):
        raise _Fallback
    return [_convert(c, parsed.column(c.name).combine_chunks()) for c in schema.columns]


def _convert(column: Column, values: pa.Array) -> pa.Array:
    kind = column.type.kind
    if kind in ("long", "string"):
        return values
    if kind == "double":
        # Arrow's text-to-double is correctly rounded, as Python's float() the row path uses.
        return pc.cast(values.field("$r"), pa.float64())
    if kind == "binary":
        return pa.array([None if h is None else bytes.fromhex(h) for h in values.field("$b").to_pylist()],
                        pa.binary())
    if kind == "boolean":
        if not pc.all(pc.is_in(values.drop_null(), value_set=pa.array([0, 1]))).as_py():
            raise _Fallback  # the row path names the value it refuses
        return values.cast(pa.bool_())
    raise AssertionError(kind)


def _columns_by_row(schema: TableSchema, texts: pa.Array, scns: np.ndarray,
                    decode_row: Callable[[str], dict[str, Any]]) -> list[pa.Array]:
    """The row path's conversion, value by value (and its error, naming the change, for a value it refuses)."""
    convert = schema.converter(sqlite_value)
    rows = [convert(decode_row(text), f"the change at SCN {scn}") for text, scn in zip(texts.to_pylist(), scns,
                                                                                        strict=True)]
    return [c.type.to_arrow([r[c.name] for r in rows]) for c in schema.columns]


def _key_values(schema: TableSchema, by_name: Mapping[str, pa.Array]) -> list[tuple[Any, ...]] | None:
    """The key tuples in canonical values, unless ``encode_keys`` encodes the key by column."""
    key = [by_name[k] for k in schema.primary_key]
    if len(key) == 1 and pa.types.is_integer(key[0].type) and not key[0].null_count:
        return None
    types: list[ColumnType] = [schema.column(k).type for k in schema.primary_key]
    return list(zip(*(t.from_arrow(a) for t, a in zip(types, key, strict=True)), strict=True))

