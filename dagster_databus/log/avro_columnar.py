"""Avro object container files encoded by column: a whole record batch at a time, no per-record Python.

fastavro encodes one Python dict at a time (about 300k records/s on this project's machines). A
change batch is already columnar (Arrow), and Avro's binary encoding of a record is just its fields'
encodings one after the other. So the records of a block are written by numba kernels straight from
numpy views of the Arrow buffers (values, offsets and data, validity bitmaps) into one output buffer,
with no intermediate array per field. Like ``avro_decode`` reading them back, the kernels interpret a
small program: a row per field of each table (an op code by how the value lies in Arrow buffers,
nullable, which views hold it, the array's offset). They go field by field over a few thousand
records at a time: ``_sizes_of`` adds each field's size to every record's, then, into a buffer of
the block's size, ``_write`` writes each field's bytes at every record's cursor. Records of several
tables in commit order (a segment's union branches) are written in that order, straight into their
blocks; blocks are encoded on every core at once and compressed from those buffers. The files are
plain Avro containers that any reader reads; tests compare every record byte for byte with
fastavro's encoding.

Input columns are in their snapshot (Arrow) form, ``ColumnType.arrow()``; event fields as in
``EVENT_ARROW``. Other integer, temporal, text and binary Arrow layouts are read as, or cast to, one
of these. Decimals wider than Delta holds (plain text in the snapshot form) become their unscaled
bytes in the kernel too; text that is not plain (``-?digits(.digits)?``), and decimals in other
Arrow types, go through Python's ``decimal``. The kernels are compiled once and cached on disk, as
the decoder's are.
"""

from __future__ import annotations

import decimal
import json
import os
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any, BinaryIO, TypeVar

import numba
import numpy as np
import pyarrow as pa
from numba import types
from numba.typed import List

from dagster_databus.core.types import ColumnType

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same library fastavro reads zstandard blocks with
    from backports import zstd

_BIN = pa.large_binary()  # 64-bit offsets: one segment may exceed 2 GiB of encoded rows
MAGIC = b"Obj\x01"
BLOCK_RECORDS = 16_000  # fastavro's default block size: readers see the blocks they are used to
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Field:
    """How one record field is encoded: ``type`` as the column's product type, or an event field's
    Avro primitive (``long``, ``int``, ``string``); ``nullable`` for ``["null", T]`` unions."""

    name: str
    type: ColumnType
    nullable: bool = True


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
    (positions into the batches' rows, one after the other) or as given, cut into blocks.

    Blocks are encoded on every core at once: the kernel lets go of the GIL.
    """
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
    return _map(program.encode, blocks)


def _chunk_rows(rows: int, most: int) -> int:
    """Rows per chunk: at most ``most``, and enough chunks of equal size to keep every core busy."""
    chunks = max(-(-rows // most), min(os.cpu_count() or 1, rows // 1_000), 1)
    return max(-(-rows // chunks), 1)


def write_container(f: BinaryIO, schema: object, blocks: Sequence[pa.Array], metadata: Mapping[str, str],
                    codec: str = "zstandard", level: int = 1) -> None:
    """An Avro object container file of already-encoded records, one Avro block per array of ``blocks``."""
    if codec not in _CODECS:
        raise ValueError(f"codec {codec!r}: this writer compresses with {', '.join(_CODECS)}")
    sync = os.urandom(16)
    meta = {"avro.schema": json.dumps(schema, separators=(",", ":")), "avro.codec": codec, **metadata}
    header = bytearray(MAGIC)
    header += _varint_bytes(len(meta))
    for key, value in meta.items():
        for part in (key.encode(), value.encode()):
            header += _varint_bytes(len(part)) + part
    header += b"\x00" + sync
    f.write(header)
    pack = _CODECS[codec]
    # Both codecs let go of the GIL while they compress: blocks are packed on every core at once.
    for records, block in zip(blocks, _map(lambda records: pack(_data(records), level), blocks), strict=True):
        f.write(_varint_bytes(len(records)) + _varint_bytes(len(block)))
        f.write(block)
        f.write(sync)


def _data(records: pa.Array) -> memoryview:
    """The encoded bytes of ``records`` (a slice of a binary array), without copying."""
    if not len(records):
        return memoryview(b"")
    offsets = np.frombuffer(records.buffers()[1], np.int64, 2, records.offset * 8)
    last = np.frombuffer(records.buffers()[1], np.int64, 1, (records.offset + len(records)) * 8)
    return memoryview(records.buffers()[2])[offsets[0]:last[0]]


def _deflate(block: memoryview, level: int) -> bytes:
    packer = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw deflate, as Avro specifies
    return packer.compress(block) + packer.flush()


def _zstandard(block: memoryview, level: int) -> bytes:
    return zstd.compress(block, level=level)


def _null(block: memoryview, level: int) -> bytes:
    return bytes(block)


_CODECS = {"zstandard": _zstandard, "deflate": _deflate, "null": _null}


def _map(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    return list(_pool().map(fn, items)) if len(items) > 1 else [fn(i) for i in items]


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="avro-columnar")


# -- the tables' program ------------------------------------------------------------------------

# Field op codes the kernel interprets, by how the value lies in Arrow buffers: 64-bit and 32-bit
# integers (zigzag varints), float and double bits (little-endian as they are), a bit (boolean),
# bytes by 32-bit or 64-bit offsets (length, then the bytes), decimal128 (its two 64-bit halves), and
# plain decimal text by 32-bit offsets (the unscaled value's bytes, as for decimal128).
_LONG, _INT, _FLOAT, _DOUBLE, _BOOL, _BYTES, _LARGE_BYTES, _DECIMAL, _DECIMAL_TEXT = range(9)
# A program row's columns. Buffers are indexes into the kernel's three lists of views (64-bit words,
# 32-bit halves, bytes); index 0 of each is an empty view, for what a field does not use.
_OP, _NULLABLE, _VALID, _WORDS, _HALVES, _RAW, _OFFSET, _SCALE, _WIDEST = range(9)  # _WIDEST: decimal text's
_PROGRAM_COLUMNS = 9
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
        self.program = np.array(program, dtype=np.int64).reshape(-1, _PROGRAM_COLUMNS)
        self.words, self.halves, self.raw = _lists()
        for views, dtype in ((self.words, np.int64), (self.halves, np.int32), (self.raw, np.uint8)):
            for view in self._views[dtype]:
                _push(views, view)

    def encode(self, positions: np.ndarray) -> pa.Array:
        """The records at ``positions`` (int64, contiguous, writeable), in that order."""
        tables = (self.branches, self.first_field, self.program, self.words, self.halves, self.raw)
        offsets, group, slots, rows, first = _sizes_of(positions, self.starts, *tables)
        # From Arrow's pool, which keeps freed memory: fresh pages cost a fault each as they are written.
        data = pa.allocate_buffer(int(offsets[-1]))
        _write(group, slots, rows, first, *tables, offsets, np.frombuffer(data, np.uint8))
        return pa.Array.from_buffers(_BIN, len(positions), [None, pa.py_buffer(offsets), data])

    def _field(self, array: pa.Array | pa.ChunkedArray, f: Field) -> list[int]:
        """``f``'s program row; its buffers added to the views."""
        if isinstance(array, pa.ChunkedArray):
            array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
        if array.null_count and not f.nullable:
            raise ValueError(f"field {f.name} holds nulls but is not nullable")
        array, op = _layout(array, f)
        if op == _DECIMAL_TEXT and not _plain(array):
            array, op = _decimal_bytes(array, f.type), _LARGE_BYTES
        row = [0] * _PROGRAM_COLUMNS
        row[_OP], row[_NULLABLE], row[_OFFSET], row[_SCALE] = op, f.nullable, array.offset, f.type.scale
        buffers = array.buffers()  # sized for the array's rows: pyarrow validates arrays as it builds them
        if array.null_count:
            row[_VALID] = self._add(np.uint8, buffers[0])
        if op in (_LONG, _DOUBLE, _DECIMAL, _LARGE_BYTES):
            row[_WORDS] = self._add(np.int64, buffers[1])
        elif op in (_INT, _FLOAT, _BYTES, _DECIMAL_TEXT):
            row[_HALVES] = self._add(np.int32, buffers[1])
        else:  # _BOOL
            row[_RAW] = self._add(np.uint8, buffers[1])
        if op in (_BYTES, _LARGE_BYTES, _DECIMAL_TEXT):
            row[_RAW] = self._add(np.uint8, buffers[2])
        if op == _DECIMAL_TEXT and len(array):  # the kernel's room for the widest value
            offsets = self._views[np.int32][row[_HALVES]][array.offset:array.offset + len(array) + 1]
            row[_WIDEST] = int(np.diff(offsets).max())
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
        return (array if pa.types.is_boolean(typ) else array.cast(pa.bool_())), _BOOL
    if kind in ("float", "double"):
        target = pa.float32() if kind == "float" else pa.float64()
        return (array if typ == target else array.cast(target)), (_FLOAT if kind == "float" else _DOUBLE)
    if kind in _INTEGER_KINDS:
        if pa.types.is_temporal(typ):  # dates, timestamps, times, durations: their integer count
            array = array.view(pa.int64() if typ.bit_width == 64 else pa.int32())
            typ = array.type
        if typ == pa.int64():
            return array, _LONG
        if typ == pa.uint64():  # as its bits: values past 2^63 - 1 come out negative
            return array.view(pa.int64()), _LONG
        if typ == pa.int32():
            return array, _INT
        return array.cast(pa.int64()), _LONG  # narrower, or unsigned 32-bit: widened (a copy of the rows)
    if kind == "decimal":
        if pa.types.is_decimal128(typ):
            return array, _DECIMAL
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):  # wider than Delta holds: exact text
            return (array if pa.types.is_string(typ) else array.cast(pa.string())), _DECIMAL_TEXT
        array, typ = _decimal_bytes(array, f.type), _BIN
    elif kind not in _BYTES_KINDS:  # pragma: no cover - every kind is handled above
        raise AssertionError(kind)
    if pa.types.is_large_string(typ) or pa.types.is_large_binary(typ):
        return array, _LARGE_BYTES
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return array, _BYTES
    return array.cast(_BIN), _LARGE_BYTES  # other layouts (views, dictionaries): offsets and data


def _plain(text: pa.Array) -> bool:
    """Whether every value of a ``string`` array is plain decimal text, which the kernel converts."""
    validity, offsets, data = text.buffers()
    return _plain_decimals(_values(offsets, np.int32), _values(data, np.uint8),
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


def _varint_bytes(value: int) -> bytes:
    """One zigzag varint (Avro long), for headers and block framing."""
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


# -- kernels ------------------------------------------------------------------------------------

_WORD_VIEW = types.Array(types.int64, 1, "C", readonly=True)
_HALF_VIEW = types.Array(types.int32, 1, "C", readonly=True)
_RAW_VIEW = types.Array(types.uint8, 1, "C", readonly=True)
_TILE = 4_096  # records: their output (some hundreds of KB) stays in cache while each field is written
# Unsigned constants: numba makes float64 of uint64 mixed with int64.
_U1, _U7, _U8 = np.uint64(1), np.uint64(7), np.uint64(8)
_U7F, _U80, _UFF = np.uint64(0x7F), np.uint64(0x80), np.uint64(0xFF)
_U0, _BILLION = np.uint64(0), np.uint64(1_000_000_000)
# A varint takes a byte more at each of these (7-bit groups).
_B1, _B2, _B3, _B4, _B5, _B6, _B7, _B8, _B9 = (np.uint64(1 << (7 * k)) for k in range(1, 10))


# Typed lists are built by compiled (cached) functions: typed.List's own methods compile afresh
# in every process, for a third of a second.
@numba.njit(cache=True)
def _lists() -> tuple[Any, Any, Any]:  # pragma: no cover - compiled
    return List.empty_list(_WORD_VIEW), List.empty_list(_HALF_VIEW), List.empty_list(_RAW_VIEW)


@numba.njit(cache=True)
def _push(views: Any, view: np.ndarray) -> None:  # pragma: no cover - compiled
    views.append(view)


@numba.njit(cache=True, nogil=True)
def _sizes_of(positions: np.ndarray, starts: np.ndarray, branches: np.ndarray, first_field: np.ndarray,
              program: np.ndarray, words: Any, halves: Any,
              raw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Where the records at ``positions`` (into the tables' rows, one table after the other: table t's
    rows are ``starts[t]`` up to ``starts[t + 1]``) start: each one's offset in the block's bytes (one
    more, the block's size), and how ``_write`` goes through them (their groups).

    A record of table t is its branch varint (``branches[t]`` >= 0), then fields ``first_field[t]`` up
    to ``first_field[t + 1]`` of ``program``. The records are grouped by tile (consecutive records)
    and table, keeping their order, so that each field is done for a group's records at once, over
    views fetched once: its size added to each record's here, its bytes written at each record's
    cursor by ``_write``. A tile's output stays in cache while its fields are written. A block of one
    table's consecutive rows (every block without ``order``) needs no grouping.
    """
    n = len(positions)
    tables = len(starts) - 1
    tile = max(_TILE, 64 * tables)  # tens of records per group at least: a group costs a call per field
    tiles = -(-n // tile)
    groups = tiles * tables
    group = np.zeros(groups + 1, dtype=np.int64)  # group g (tile g // tables): group[g] up to group[g + 1]
    first = -1  # consecutive rows of one table from this one: record k is row first + k
    slots = np.empty(0, dtype=np.int64)  # else each record's place in the block, and its row in its table
    rows = np.empty(0, dtype=np.int64)
    if tables == 1:  # the records as they are, a group per tile
        for g in range(tiles):
            group[g + 1] = min((g + 1) * tile, n)
        consecutive = True
        for i in range(1, n):
            consecutive &= positions[i] == positions[i - 1] + 1
        if consecutive:
            first = positions[0] - starts[0] if n else 0
        else:
            slots, rows = np.arange(n), positions - starts[0]
    else:
        key = np.empty(n, dtype=np.int64)
        t = 0
        for g0 in range(0, n, tile):
            for i in range(g0, min(g0 + tile, n)):
                p = positions[i]
                if p < starts[t] or p >= starts[t + 1]:
                    t = np.searchsorted(starts, p, side="right") - 1
                key[i] = g0 // tile * tables + t
                group[key[i] + 1] += 1
        for g in range(groups):
            group[g + 1] += group[g]
        fill = group[:-1].copy()
        slots, rows = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        for i in range(n):
            k = fill[key[i]]
            fill[key[i]] = k + 1
            slots[k] = i
            rows[k] = positions[i]
        t = 0
        for g in range(groups):  # the rows in their tables
            for k in range(group[g], group[g + 1]):
                rows[k] -= starts[t]
            t = t + 1 if t + 1 < tables else 0
    offsets = np.zeros(n + 1, dtype=np.int64)  # record i's size at i + 1, then their running sum
    sizes = offsets[1:]
    t = tables - 1
    for g in range(groups):
        t = t + 1 if t + 1 < tables else 0
        g0, g1 = group[g], group[g + 1]
        if g0 == g1:
            continue
        if branches[t] >= 0:
            size = _varint_size(branches[t])
            for k in range(g0, g1):
                sizes[k if first >= 0 else slots[k]] += size
        for j in range(first_field[t], first_field[t + 1]):
            _sizes(program[j], words, halves, raw, slots, rows, first, g0, g1, sizes)
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return offsets, group, slots, rows, first


@numba.njit(cache=True, nogil=True)
def _write(group: np.ndarray, slots: np.ndarray, rows: np.ndarray, first: int, branches: np.ndarray,
           first_field: np.ndarray, program: np.ndarray, words: Any, halves: Any, raw: Any, offsets: np.ndarray,
           out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Writes the records ``_sizes_of`` placed into ``out``, field by field as it sized them."""
    tables = len(branches)
    cursor = offsets[:-1].copy()  # each record's, moved past each field as it is written
    t = tables - 1
    for g in range(len(group) - 1):
        t = t + 1 if t + 1 < tables else 0
        g0, g1 = group[g], group[g + 1]
        if g0 == g1:
            continue
        if branches[t] >= 0:
            for k in range(g0, g1):
                i = k if first >= 0 else slots[k]
                cursor[i] = _put_varint(out, cursor[i], branches[t])
        for j in range(first_field[t], first_field[t + 1]):
            _puts(program[j], words, halves, raw, slots, rows, first, g0, g1, cursor, out)


# The per-value work is written out in the loops of _sizes and _puts, not in a helper taking the
# views: a call with array arguments that LLVM does not inline costs reference counting on every
# value, ten times the encoding itself. Their indexes are made unsigned (_U): numba wraps negative
# signed indexes around, a check on every access that also keeps LLVM from vectorizing copies.
_U = np.uint64


@numba.njit(cache=True, nogil=True)
def _sizes(field: np.ndarray, words: Any, halves: Any, raw: Any, slots: np.ndarray, rows: np.ndarray, first: int,
           g0: int, g1: int, sizes: np.ndarray) -> None:  # pragma: no cover - compiled
    """Adds the field's size in records ``g0`` up to ``g1`` of a group to theirs in ``sizes``: record k
    is ``slots[k]`` of the block, at ``rows[k]`` of its table (k and ``first + k`` when ``first`` >= 0)."""
    op, off, scale = field[_OP], field[_OFFSET], field[_SCALE]
    marker = 1 if field[_NULLABLE] else 0  # the ["null", T] branch: one byte
    nulls = field[_VALID] != 0
    valid, w, h, b = raw[field[_VALID]], words[field[_WORDS]], halves[field[_HALVES]], raw[field[_RAW]]
    limbs = np.zeros((field[_WIDEST] + scale) // 9 + 2 if op == _DECIMAL_TEXT else 0, dtype=np.uint64)
    for k in range(g0, g1):
        i, r = (k, first + k + off) if first >= 0 else (slots[k], rows[k] + off)
        size = marker
        if not nulls or (valid[_U(r >> 3)] >> (r & 7)) & 1:
            if op == _LONG:
                size += _varint_size(w[_U(r)])
            elif op == _INT:
                size += _varint_size(np.int64(h[_U(r)]))
            elif op == _DOUBLE:
                size += 8
            elif op == _FLOAT:
                size += 4
            elif op == _BOOL:
                size += 1
            elif op == _BYTES:
                length = np.int64(h[_U(r + 1)]) - np.int64(h[_U(r)])
                size += _varint_size(length) + length
            elif op == _LARGE_BYTES:
                length = w[_U(r + 1)] - w[_U(r)]
                size += _varint_size(length) + length
            elif op == _DECIMAL:
                size += 1 + _decimal_length(w[_U(2 * r)], w[_U(2 * r + 1)])  # at most 16 bytes: a one-byte length
            else:  # _DECIMAL_TEXT
                length = _limbs_length(limbs, _text_unscaled(b, h[r], h[r + 1], scale, limbs))
                size += _varint_size(length) + length
        sizes[_U(i)] += size


@numba.njit(cache=True, nogil=True)
def _puts(field: np.ndarray, words: Any, halves: Any, raw: Any, slots: np.ndarray, rows: np.ndarray, first: int,
          g0: int, g1: int, cursor: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Writes the field's value in records ``g0`` up to ``g1`` of a group (as for ``_sizes``) at their
    cursors, and moves each cursor past it."""
    op, off, scale = field[_OP], field[_OFFSET], field[_SCALE]
    nullable = field[_NULLABLE] != 0
    nulls = field[_VALID] != 0
    valid, w, h, b = raw[field[_VALID]], words[field[_WORDS]], halves[field[_HALVES]], raw[field[_RAW]]
    limbs = np.zeros((field[_WIDEST] + scale) // 9 + 2 if op == _DECIMAL_TEXT else 0, dtype=np.uint64)
    for k in range(g0, g1):
        i, r = (_U(k), first + k + off) if first >= 0 else (_U(slots[k]), rows[k] + off)
        at = cursor[i]
        if nulls and not (valid[_U(r >> 3)] >> (r & 7)) & 1:
            out[_U(at)] = 0  # the null branch (zigzag 0)
            cursor[i] = at + 1
            continue
        if nullable:
            out[_U(at)] = 2  # the value's branch (zigzag 1)
            at += 1
        if op == _LONG:
            at = _put_varint(out, at, w[_U(r)])
        elif op == _INT:
            at = _put_varint(out, at, np.int64(h[_U(r)]))
        elif op == _DOUBLE:
            v = w[_U(r)]
            for t in range(8):  # little-endian, as Avro writes it: the double's bits as they are
                out[_U(at + t)] = np.uint8((v >> (8 * t)) & 0xFF)
            at += 8
        elif op == _FLOAT:
            v32 = h[_U(r)]
            for t in range(4):
                out[_U(at + t)] = np.uint8((v32 >> (8 * t)) & 0xFF)
            at += 4
        elif op == _BOOL:
            out[_U(at)] = (b[_U(r >> 3)] >> (r & 7)) & 1
            at += 1
        elif op in (_BYTES, _LARGE_BYTES):
            if op == _BYTES:
                start, end = np.int64(h[_U(r)]), np.int64(h[_U(r + 1)])
            else:
                start, end = w[_U(r)], w[_U(r + 1)]
            at = _put_varint(out, at, end - start)
            for t in range(end - start):
                out[_U(at + t)] = b[_U(start + t)]
            at += end - start
        elif op == _DECIMAL:
            low, high = w[_U(2 * r)], w[_U(2 * r + 1)]
            length = _decimal_length(low, high)
            out[_U(at)] = 2 * length  # the length's varint: one byte
            for t in range(length):  # the value's low bytes, big-endian
                z = length - 1 - t
                out[_U(at + 1 + t)] = np.uint8(((low >> (8 * z)) if z < 8 else (high >> (8 * (z - 8)))) & 0xFF)
            at += 1 + length
        else:  # _DECIMAL_TEXT
            at = _put_text_decimal(out, at, b, h[r], h[r + 1], scale, limbs)
        cursor[i] = at


@numba.njit(cache=True, nogil=True)
def _put_text_decimal(out: np.ndarray, at: int, b: np.ndarray, start: int, end: int, scale: int,
                      limbs: np.ndarray) -> int:  # pragma: no cover - compiled
    """Plain decimal text as the unscaled value's bytes (length first), as ``_unscaled_bytes`` writes it."""
    used = _text_unscaled(b, start, end, scale, limbs)
    length = _limbs_length(limbs, used)
    at = _put_varint(out, at, length)
    negative = b[start] == 0x2D  # -
    carry = np.uint64(1)
    for k in range(length):  # little-endian byte k of the magnitude (negated: inverted, plus one)
        limb = k >> 2
        byte = (limbs[limb] >> np.uint64(8 * (k & 3))) & _UFF if limb < used else np.uint64(0)
        if negative:
            byte = (~byte & _UFF) + carry
            carry = byte >> _U8
            byte &= _UFF
        out[at + length - 1 - k] = np.uint8(byte)
    return at + length


@numba.njit(cache=True, nogil=True)
def _varint_size(v: int) -> int:  # pragma: no cover - compiled
    """Bytes of a zigzag varint: counted without branches, which mispredict on values of mixed widths."""
    u = np.uint64((v << 1) ^ (v >> 63))
    return (1 + np.int64(u >= _B1) + np.int64(u >= _B2) + np.int64(u >= _B3) + np.int64(u >= _B4)
            + np.int64(u >= _B5) + np.int64(u >= _B6) + np.int64(u >= _B7) + np.int64(u >= _B8) + np.int64(u >= _B9))


@numba.njit(cache=True, nogil=True)
def _put_varint(out: np.ndarray, at: int, v: int) -> int:  # pragma: no cover - compiled
    """A zigzag varint (Avro int and long): low 7-bit groups first, high bit = more."""
    u = np.uint64((v << 1) ^ (v >> 63))
    while u >= _U80:
        out[_U(at)] = np.uint8((u & _U7F) | _U80)
        u >>= _U7
        at += 1
    out[_U(at)] = np.uint8(u)
    return at + 1


@numba.njit(cache=True, nogil=True)
def _bit_length(u: np.uint64) -> int:  # pragma: no cover - compiled
    """Bits of ``u`` without its leading zeros (Python's ``int.bit_length``)."""
    bits = 0
    while u >= np.uint64(256):
        u >>= _U8
        bits += 8
    while u:
        u >>= _U1
        bits += 1
    return bits


@numba.njit(cache=True, nogil=True)
def _decimal_length(low: int, high: int) -> int:  # pragma: no cover - compiled
    """Bytes of a decimal128 (its low and high 64-bit halves): like fastavro (and Java's BigInteger),
    ``(|v|.bit_length() + 8) // 8``, so -2^(8n-1) takes n+1 bytes; at most the 16 there are."""
    lo, hi = np.uint64(low), np.uint64(high)
    if high < 0:  # the magnitude: two's complement negation
        lo = ~lo + _U1
        hi = ~hi + (_U1 if lo == _U0 else _U0)
    bits = 64 + _bit_length(hi) if hi else _bit_length(lo)
    return min(bits // 8 + 1, 16)


@numba.njit(cache=True, nogil=True)
def _text_unscaled(b: np.ndarray, start: int, end: int, scale: int, limbs: np.ndarray) -> int:  # pragma: no cover
    """The magnitude of plain decimal text ``b[start:end]`` times 10^scale, digits past the scale
    dropped (as ``int`` of the scaled ``Decimal`` truncates), into ``limbs`` (32-bit, low first);
    returns how many limbs it takes."""
    at = start + 1 if b[start] == 0x2D else start  # -
    used = 0
    chunk, chunk_scale = np.uint64(0), np.uint64(1)  # up to 9 digits, taken into the limbs at once
    point = at
    while point < end and b[point] != 0x2E:  # .
        point += 1
    # The integer's digits, then ``scale`` digits of the fraction (zeros past its end).
    for t in range(at, point + 1 + scale):
        if t == point:
            continue
        digit = np.uint64(b[t] - 0x30) if t < end else np.uint64(0)
        chunk = chunk * np.uint64(10) + digit
        chunk_scale *= np.uint64(10)
        if chunk_scale == _BILLION:
            used = _multiply_add(limbs, used, chunk_scale, chunk)
            chunk, chunk_scale = np.uint64(0), np.uint64(1)
    if chunk_scale > _U1:
        used = _multiply_add(limbs, used, chunk_scale, chunk)
    return used


@numba.njit(cache=True, nogil=True)
def _multiply_add(limbs: np.ndarray, used: int, factor: np.uint64, add: np.uint64) -> int:  # pragma: no cover
    """limbs = limbs * factor + add (factor and add below 2^32); returns the limbs used (the top one is
    not zero: leading zero digits take none)."""
    carry = add
    for t in range(used):
        product = limbs[t] * factor + carry
        limbs[t] = product & np.uint64(0xFFFFFFFF)
        carry = product >> np.uint64(32)
    if carry:
        limbs[used] = carry
        used += 1
    return used


@numba.njit(cache=True, nogil=True)
def _limbs_length(limbs: np.ndarray, used: int) -> int:  # pragma: no cover - compiled
    """Bytes of the unscaled value (its ``used`` limbs, the top one not zero): ``(|v|.bit_length() + 8) // 8``,
    as ``_unscaled_bytes`` writes it."""
    bits = 32 * (used - 1) + _bit_length(limbs[used - 1]) if used else 0
    return bits // 8 + 1


@numba.njit(cache=True, nogil=True)
def _plain_decimals(offsets: np.ndarray, text: np.ndarray, valid: np.ndarray, nulls: bool, off: int,
                    n: int) -> bool:  # pragma: no cover - compiled
    """Whether every present value is plain decimal text, ``-?[0-9]+(\\.[0-9]+)?``: what the kernel reads."""
    for i in range(off, off + n):
        if nulls and not (valid[i >> 3] >> (i & 7)) & 1:
            continue
        at, end = offsets[i], offsets[i + 1]
        if at < end and text[at] == 0x2D:
            at += 1
        digits = at
        while at < end and 0x30 <= text[at] <= 0x39:
            at += 1
        if at == digits:
            return False
        if at < end:
            if text[at] != 0x2E:
                return False
            at += 1
            if at == end:
                return False
            while at < end:
                if not 0x30 <= text[at] <= 0x39:
                    return False
                at += 1
    return True
