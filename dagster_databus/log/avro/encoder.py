"""Avro records encoded by column: a whole record batch at a time, no per-record Python.

fastavro encodes one Python dict at a time (about 300k records/s on this project's machines). A
change batch is already columnar (Arrow), and Avro's binary encoding of a record is just its fields'
encodings one after the other. So the records of a block are written by numba kernels
(``encode_kernels``) straight from numpy views of the Arrow buffers (values, offsets and data,
validity bitmaps) into one output buffer, with no intermediate array per field. Like the decoder
reading them back, the kernels interpret a small program: a row per field of each table (an op
code by how the value lies in Arrow buffers, nullable, which views hold it, the array's offset).
They go field by field over a few thousand records at a time: ``sizes_of`` adds each field's size
to every record's, then, into a buffer of the block's size, ``write`` writes each field's bytes at
every record's cursor. Records of several tables in commit order (a segment's union branches) are
written in that order, straight into their blocks; blocks are encoded on every core at once and
compressed from those buffers (``container.write_container``). The files are plain Avro
containers that any reader reads; tests compare every record byte for byte with fastavro's
encoding.

Input columns are in their snapshot (Arrow) form, ``ColumnType.arrow()``; event fields as in
``EVENT_SCHEMA``. Other integer, temporal, text and binary Arrow layouts are read as, or cast to,
one of these. Decimals wider than Delta holds (plain text in the snapshot form) become their
unscaled bytes in the kernel too; text that is not plain (``-?digits(.digits)?``), and decimals in
other Arrow types, go through Python's ``decimal``. The kernels are compiled once and cached on
disk, as the decoder's are.
"""

from __future__ import annotations

import decimal
import io
import os
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from dagster_databus.core.kernels import few
from dagster_databus.core.types import ColumnType
from dagster_databus.log.avro.container import on_cores
from dagster_databus.log.avro.encode_kernels import (
    BOOL,
    BYTES,
    DECIMAL,
    DECIMAL_TEXT,
    DOUBLE,
    FLOAT,
    HALVES,
    INT,
    LARGE_BYTES,
    LONG,
    NULLABLE,
    OFFSET,
    OP,
    PROGRAM_COLUMNS,
    RAW,
    SCALE,
    VALID,
    WIDEST,
    WORDS,
    lists,
    plain_decimals,
    push,
    sizes_of,
    write,
)
from dagster_databus.log.avro.fields import Field

_BIN = pa.large_binary()  # 64-bit offsets: one segment may exceed 2 GiB of encoded rows
BLOCK_RECORDS = 16_000  # fastavro's default block size: readers see the blocks they are used to
# Fewer records than this in one call are encoded by fastavro, not the kernels (see ``_small_blocks``); more in a
# process whose kernels have not run yet (``core.kernels.few``).
SMALL_RECORDS = 2_000
_Table = tuple[pa.RecordBatch, Sequence[Field], int | None]


def encode_records(batch: pa.RecordBatch, fields: Sequence[Field], union_index: int | None = None) -> pa.Array:
    """Each row of ``batch`` as its Avro binary record (a ``large_binary`` array, one record per row).

    ``union_index``: the record's branch in a union schema (a segment's union of row records),
    written before the record as Avro writes a union value.
    """
    return _Program([(batch, fields, union_index)]).encode(np.arange(len(batch), dtype=np.int64))


def encode_blocks(tables: Sequence[_Table], order: np.ndarray | None = None,
                  block_records: int = BLOCK_RECORDS) -> list[pa.Array]:
    """The records of several record batches (each with its fields and union branch), in ``order``
    (positions into the batches' rows, one after the other) or as given, cut into blocks."""
    return list(iter_blocks(tables, order, block_records))


def iter_blocks(tables: Sequence[_Table], order: np.ndarray | None = None,
                block_records: int = BLOCK_RECORDS) -> Iterator[pa.Array]:
    """``encode_blocks``, a few blocks at a time: each wave is encoded on every core at once (the kernel
    lets go of the GIL), and only the waves not yet consumed are held, not the whole segment. Fewer than
    ``SMALL_RECORDS`` records are encoded by fastavro instead (``_small_blocks``)."""
    if few(sum(len(batch) for batch, _, _ in tables), SMALL_RECORDS):
        yield from _small_blocks(tables, order, block_records)
        return
    program = _Program(tables)
    if order is None:  # each table's rows in chunks (blocks) of equal size, enough to keep every core busy
        blocks = [np.arange(first + start, first + min(start + size, rows), dtype=np.int64)
                  for first, rows in zip(program.starts[:-1].tolist(), program.rows, strict=True)
                  for size in [_chunk_rows(rows, block_records)] for start in range(0, rows, size)]
    else:
        positions = np.array(order, dtype=np.int64)  # a copy: the kernel's own, writeable and contiguous
        if len(positions) and (positions.min() < 0 or positions.max() >= program.starts[-1]):
            raise IndexError(f"order: positions must be in 0..{program.starts[-1] - 1}, the tables' rows")
        blocks = [positions[start:start + block_records] for start in range(0, len(positions), block_records)]
    wave = max(os.cpu_count() or 1, 1)
    for start in range(0, len(blocks), wave):
        yield from on_cores(program.encode, blocks[start:start + wave])


def _small_blocks(tables: Sequence[_Table], order: np.ndarray | None, block_records: int) -> Iterator[pa.Array]:
    """The same records, bytes for bytes, encoded one at a time by fastavro from the columns' canonical values.

    A few records cost fastavro microseconds, and the kernels cost seconds to compile on a machine whose cache
    does not hold them yet (a new container, a read-only site-packages): a scheduled run's small change set
    pays no compile."""
    import fastavro

    records: list[bytes] = []
    for batch, fields, union_index in tables:
        schema = fastavro.parse_schema({"type": "record", "name": "r", "fields": [
            {"name": f.name, "type": ["null", f.type.avro()] if f.nullable else f.type.avro()} for f in fields]})
        columns = []
        for f in fields:
            column = batch.column(f.name)
            if column.null_count and not f.nullable:
                raise ValueError(f"field {f.name} holds nulls but is not nullable")
            columns.append([f.type.to_avro(v) for v in f.type.from_arrow(column)])
        branch = b"" if union_index is None else _varint(union_index)
        names = [f.name for f in fields]
        for values in zip(*columns, strict=True) if columns else [()] * len(batch):
            out = io.BytesIO()
            out.write(branch)
            fastavro.schemaless_writer(out, schema, dict(zip(names, values, strict=True)))
            records.append(out.getvalue())
    if order is not None:
        positions = np.asarray(order, dtype=np.int64)
        if len(positions) and (positions.min() < 0 or positions.max() >= len(records)):
            raise IndexError(f"order: positions must be in 0..{len(records) - 1}, the tables' rows")
        records = [records[i] for i in positions.tolist()]
    for start in range(0, len(records), block_records):
        yield pa.array(records[start:start + block_records], _BIN)


def _varint(n: int) -> bytes:
    """An Avro long (zigzag, then base-128 little-endian groups)."""
    value, out = (n << 1) ^ (n >> 63), bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _chunk_rows(rows: int, most: int) -> int:
    """Rows per chunk: at most ``most``, and enough chunks of equal size to keep every core busy."""
    chunks = max(-(-rows // most), min(os.cpu_count() or 1, rows // 1_000), 1)
    return max(-(-rows // chunks), 1)


_INTEGER_KINDS = ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz", "time")
_BYTES_KINDS = ("string", "number", "binary")


class _Program:
    """The kernel's inputs for some tables: a program row per field, and numpy views of the buffers.

    Positions count the tables' rows one table after the other, as ``encode_blocks``'s ``order`` does.
    """

    def __init__(self, tables: Sequence[_Table]) -> None:
        # Index 0 of each: an empty view, for what a field does not use.
        self._views: dict[type[np.generic], list[np.ndarray]] = {
            dtype: [_values(None, dtype)] for dtype in (np.int64, np.int32, np.uint8)}
        program: list[list[int]] = []
        self.rows: list[int] = []  # each table's
        branches, first_field = [], [0]
        for batch, fields, union_index in tables:
            self.rows.append(len(batch))
            branches.append(-1 if union_index is None else union_index)
            program.extend(self._field(batch.column(f.name), f) for f in fields)
            first_field.append(len(program))
        self.starts = np.cumsum([0, *self.rows], dtype=np.int64)
        self.branches = np.array(branches, dtype=np.int64)
        self.first_field = np.array(first_field, dtype=np.int64)
        self.program = np.array(program, dtype=np.int64).reshape(-1, PROGRAM_COLUMNS)
        self.words, self.halves, self.raw = lists()
        for views, dtype in ((self.words, np.int64), (self.halves, np.int32), (self.raw, np.uint8)):
            for view in self._views[dtype]:
                push(views, view)

    def encode(self, positions: np.ndarray) -> pa.Array:
        """The records at ``positions`` (int64, contiguous, writeable), in that order."""
        tables = (self.branches, self.first_field, self.program, self.words, self.halves, self.raw)
        offsets, group, slots, rows, first = sizes_of(positions, self.starts, *tables)
        # From Arrow's pool, which keeps freed memory: fresh pages cost a fault each as they are written.
        data = pa.allocate_buffer(int(offsets[-1]))
        write(group, slots, rows, first, *tables, offsets, np.frombuffer(data, np.uint8))
        return pa.Array.from_buffers(_BIN, len(positions), [None, pa.py_buffer(offsets), data])

    def _field(self, array: pa.Array | pa.ChunkedArray, f: Field) -> list[int]:
        """``f``'s program row; its buffers added to the views."""
        if isinstance(array, pa.ChunkedArray):
            array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
        if array.null_count and not f.nullable:
            raise ValueError(f"field {f.name} holds nulls but is not nullable")
        array, op = _layout(array, f)
        if op == DECIMAL_TEXT and not _plain(array):
            array, op = _decimal_bytes(array, f.type), LARGE_BYTES
        row = [0] * PROGRAM_COLUMNS
        row[OP], row[NULLABLE], row[OFFSET], row[SCALE] = op, f.nullable, array.offset, f.type.scale
        buffers = array.buffers()  # sized for the array's rows: pyarrow validates arrays as it builds them
        if array.null_count:
            row[VALID] = self._add(np.uint8, buffers[0])
        if op in (LONG, DOUBLE, DECIMAL, LARGE_BYTES):
            row[WORDS] = self._add(np.int64, buffers[1])
        elif op in (INT, FLOAT, BYTES, DECIMAL_TEXT):
            row[HALVES] = self._add(np.int32, buffers[1])
        else:  # BOOL
            row[RAW] = self._add(np.uint8, buffers[1])
        if op in (BYTES, LARGE_BYTES, DECIMAL_TEXT):
            row[RAW] = self._add(np.uint8, buffers[2])
        if op == DECIMAL_TEXT and len(array):  # the kernel's room for the widest value
            offsets = self._views[np.int32][row[HALVES]][array.offset:array.offset + len(array) + 1]
            row[WIDEST] = int(np.diff(offsets).max())
        return row

    def _add(self, dtype: type[np.generic], buffer: pa.Buffer | None) -> int:
        """Adds a view of ``buffer`` (as ``dtype`` values) to the kernel's; its index there."""
        if buffer is None:  # none to read (offsets that are all equal need no data)
            return 0
        views = self._views[dtype]
        views.append(_values(buffer, dtype))
        return len(views) - 1


def _layout(array: pa.Array, f: Field) -> tuple[pa.Array, int]:
    """``array`` in a layout the kernel reads for ``f``'s kind (cast if it is not), and its op code."""
    kind, typ = f.type.kind, array.type
    if pa.types.is_null(typ):  # no buffers at all: the field's own type, every row null
        array = array.cast(f.type.arrow())
        typ = array.type
    if kind == "boolean":
        return (array if pa.types.is_boolean(typ) else array.cast(pa.bool_())), BOOL
    if kind in ("float", "double"):
        target = pa.float32() if kind == "float" else pa.float64()
        return (array if typ == target else array.cast(target)), (FLOAT if kind == "float" else DOUBLE)
    if kind in _INTEGER_KINDS:
        if pa.types.is_temporal(typ):  # dates, timestamps, times, durations: their integer count
            array = array.view(pa.int64() if typ.bit_width == 64 else pa.int32())
            typ = array.type
        if typ == pa.int64():
            return array, LONG
        if typ == pa.uint64():  # as its bits: values past 2^63 - 1 come out negative
            return array.view(pa.int64()), LONG
        if typ == pa.int32():
            return array, INT
        return array.cast(pa.int64()), LONG  # narrower, or unsigned 32-bit: widened (a copy of the rows)
    if kind == "decimal":
        if pa.types.is_decimal128(typ):
            return array, DECIMAL
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):  # wider than Delta holds: exact text
            return (array if pa.types.is_string(typ) else array.cast(pa.string())), DECIMAL_TEXT
        array, typ = _decimal_bytes(array, f.type), _BIN
    elif kind not in _BYTES_KINDS:  # pragma: no cover - every kind is handled above
        raise AssertionError(kind)
    if pa.types.is_large_string(typ) or pa.types.is_large_binary(typ):
        return array, LARGE_BYTES
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return array, BYTES
    return array.cast(_BIN), LARGE_BYTES  # other layouts (views, dictionaries): offsets and data


def _plain(text: pa.Array) -> bool:
    """Whether every value of a ``string`` array is plain decimal text, which the kernel converts."""
    validity, offsets, data = text.buffers()
    return plain_decimals(_values(offsets, np.int32), _values(data, np.uint8),
                           _values(validity if text.null_count else None, np.uint8), text.null_count > 0,
                           text.offset, len(text))


def _values(buffer: pa.Buffer | None, dtype: type[np.generic]) -> np.ndarray:
    """``buffer`` as ``dtype`` values (none for no buffer), as the kernels take them."""
    if buffer is None:
        return _view(np.empty(0, dtype=dtype))
    return _view(np.frombuffer(buffer, dtype, buffer.size // np.dtype(dtype).itemsize))


def _view(values: np.ndarray) -> np.ndarray:
    """``values`` as the kernel's lists hold views: read-only and aligned (one compiled kernel for all)."""
    if not values.flags.aligned:
        values = values.copy()
    values.flags.writeable = False
    return values


def _decimal_bytes(array: pa.Array, typ: ColumnType) -> pa.Array:
    """Decimals the kernel does not read (text that is not plain, other Arrow types): the unscaled
    value's bytes, through Python's ``decimal``."""
    return pa.array([None if v is None else _unscaled_bytes(decimal.Decimal(v), typ.scale)
                     for v in array.to_pylist()], _BIN)


def _unscaled_bytes(value: decimal.Decimal, scale: int) -> bytes:
    # Exact: the default context would round a 65-digit decimal to 28 digits.
    unscaled = int(value.scaleb(scale, context=_EXACT))
    return unscaled.to_bytes((abs(unscaled).bit_length() + 8) // 8, "big", signed=True)


_EXACT = decimal.Context(prec=1000)
