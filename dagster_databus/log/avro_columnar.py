"""Avro object container files encoded by column: a whole record batch at a time, no per-record Python.

fastavro encodes one Python dict at a time (about 300k records/s on this project's machines). A
change batch is already columnar (Arrow), and Avro's binary encoding of a record is just its fields'
encodings one after the other. So each field is encoded for every row at once (numpy for varints
and fixed widths, Arrow for bytes and text), Arrow's element-wise binary join lays the fields of each
row side by side, and whole blocks are compressed from the joined buffer. The files are plain Avro
containers that any reader reads; tests compare every record byte for byte with fastavro's encoding.

Input columns are in their snapshot (Arrow) form, ``ColumnType.arrow()``; event fields as in
``EVENT_ARROW``.
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
from typing import BinaryIO, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.types import ColumnType

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same library fastavro reads zstandard blocks with
    from backports import zstd

_BIN = pa.large_binary()  # 64-bit offsets: one segment may exceed 2 GiB of encoded rows
_EMPTY = pa.scalar(b"", _BIN)
_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)  # the 7-bit groups of a varint, low first
MAGIC = b"Obj\x01"
BLOCK_RECORDS = 16_000
_T = TypeVar("_T")
_R = TypeVar("_R")  # fastavro's default block size: readers see the blocks they are used to


@dataclass(frozen=True, slots=True)
class Field:
    """How one record field is encoded: ``type`` as the column's product type, or an event field's
    Avro primitive (``long``, ``int``, ``string``); ``nullable`` for ``["null", T]`` unions."""

    name: str
    type: ColumnType
    nullable: bool = True


def encode_records(batch: pa.RecordBatch, fields: Sequence[Field], union_index: int | None = None) -> pa.Array:
    """Each row of ``batch`` as its Avro binary record (a ``large_binary`` array, one record per row).

    ``union_index``: the record's branch in a union schema (a segment's union of row records),
    written before the record as Avro writes a union value.
    """
    rows = len(batch)
    pieces: list[pa.Array] = []
    run = _Run(rows)
    if union_index is not None:
        branch = np.frombuffer(_varint_bytes(union_index), dtype=np.uint8)  # the same bytes on every row
        run.add(np.broadcast_to(branch, (rows, len(branch))))
    for f in fields:
        payload = _field(batch.column(f.name), f, run)
        if payload is not None:
            pieces.append(run.close())
            pieces.append(payload)
            run = _Run(rows)
    if run.width:
        pieces.append(run.close())
    if not pieces:
        return pa.array([b""] * rows, _BIN)
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, _EMPTY)


def encode_blocks(tables: Sequence[tuple[pa.RecordBatch, Sequence[Field], int | None]],
                  order: np.ndarray | None = None, block_records: int = BLOCK_RECORDS) -> list[pa.Array]:
    """The records of several record batches (each with its fields and union branch), in ``order``
    (positions into the batches' rows, one after the other) or as given, cut into blocks.

    Chunks are encoded on every core at once: numpy and Arrow let go of the GIL for their loops.
    """
    chunks = [(batch.slice(start, size), fields, branch) for batch, fields, branch in tables
              for size in [_chunk_rows(len(batch), block_records)] for start in range(0, len(batch), size)]
    encoded = _map(lambda chunk: encode_records(*chunk), chunks)
    if order is None:
        return encoded
    records = pa.concat_arrays(encoded).take(pa.array(order))
    return [records.slice(start, block_records) for start in range(0, len(records), block_records)]


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


# -- one field, all rows ---------------------------------------------------------------------


class _Run:
    """The byte cells of consecutive fixed-width and varint fields, side by side in one matrix: the
    first ``counts`` bytes of each field's cells are its encoding; compacted into one binary array at once."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.width = 0
        self.cells: list[np.ndarray] = []
        self.counts: list[np.ndarray | None] = []  # None: every row uses all of the cells' width

    def add(self, cells: np.ndarray, counts: np.ndarray | None = None) -> None:
        self.cells.append(cells)
        self.counts.append(counts)
        self.width += cells.shape[1]

    def close(self) -> pa.Array:
        cells = self.cells[0] if len(self.cells) == 1 else np.hstack(self.cells)
        variable = [c for c in self.counts if c is not None]
        if not variable:
            data = cells.reshape(-1)
            lengths = np.full(self.rows, self.width, dtype=np.int64)
        else:
            mask = np.empty(cells.shape, dtype=bool)
            at = 0
            for piece, counts in zip(self.cells, self.counts, strict=True):
                width = piece.shape[1]
                mask[:, at:at + width] = True if counts is None else np.arange(width) < counts[:, None]
                at += width
            data = np.compress(mask.reshape(-1), cells.reshape(-1))  # several times faster than cells[mask]
            fixed = sum(c.shape[1] for c, n in zip(self.cells, self.counts, strict=True) if n is None)
            lengths = sum(variable, start=np.full(self.rows, fixed, dtype=np.int64))
        offsets = np.zeros(self.rows + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return pa.Array.from_buffers(_BIN, self.rows, [None, pa.py_buffer(offsets),
                                                       pa.py_buffer(np.ascontiguousarray(data))])


def _field(array: pa.Array | pa.ChunkedArray, f: Field, run: _Run) -> pa.Array | None:
    """Adds the field's fixed part to ``run``; returns its variable-length payload (bytes, text), if any."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    valid = None
    if array.null_count:
        if not f.nullable:
            raise ValueError(f"field {f.name} holds nulls but is not nullable")
        valid = np.asarray(array.is_valid())
    if f.nullable:  # the ["null", T] union's branch: 0 (null) or 1, zigzag-encoded
        branch = np.full((len(array), 1), 2, dtype=np.uint8)
        if valid is not None:
            branch[~valid, 0] = 0
        run.add(branch)
    kind = f.type.kind
    if kind == "boolean":
        run.add(np.asarray(array.cast(pa.uint8()).fill_null(0)).reshape(-1, 1), _present(valid, 1))
    elif kind in ("float", "double"):
        dtype = np.float32 if kind == "float" else np.float64
        cells = _primitive(array, dtype).reshape(-1, 1).view(np.uint8)
        run.add(cells, _present(valid, cells.shape[1]))
    elif kind in ("byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz", "time"):
        _varints(_integers(array), valid, run)
    else:
        if kind == "decimal":
            payload = _decimal_bytes(array, f.type)
        elif kind in ("string", "number", "binary"):
            payload = array.cast(_BIN)
        else:  # pragma: no cover - every kind is handled above
            raise AssertionError(kind)
        _varints(np.asarray(pc.binary_length(payload).fill_null(0), dtype=np.int64), valid, run)
        return payload.fill_null(b"") if valid is not None else payload
    return None


def _primitive(array: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype, len(array), array.offset * width)


def _integers(array: pa.Array) -> np.ndarray:
    typ = array.type
    if pa.types.is_timestamp(typ):
        array = array.view(pa.int64())
    elif pa.types.is_date32(typ):
        array = array.view(pa.int32())
    return _primitive(array, array.type.to_pandas_dtype()).astype(np.int64, copy=False)


def _present(valid: np.ndarray | None, width: int) -> np.ndarray | None:
    """Byte counts of fixed-width cells: all of them, none for nulls."""
    return None if valid is None else valid.astype(np.int64) * width


def _varints(values: np.ndarray, valid: np.ndarray | None, run: _Run) -> None:
    """Zigzag varints of int64 ``values`` (Avro int and long): low 7-bit groups first, high bit = more."""
    u = ((values << 1) ^ (values >> 63)).view(np.uint64)
    high = int(u.max()) if len(u) else 0
    width = 1
    while high >> (7 * width):
        width += 1
    cells = np.empty((len(u), width), dtype=np.uint8)
    counts = np.ones(len(u), dtype=np.int64)
    for k in range(width):
        shifted = u >> np.uint64(7 * k) if k else u
        cells[:, k] = shifted.astype(np.uint8) & 0x7F
        if k + 1 < width:
            more = shifted > 0x7F
            cells[:, k] |= more.view(np.uint8) << 7
            counts += more
    run.add(cells, counts if valid is None else counts * valid)


def _decimal_bytes(array: pa.Array, typ: ColumnType) -> pa.Array:
    """Avro decimals: the unscaled value as the shortest big-endian two's complement."""
    if not pa.types.is_decimal128(array.type):  # wider than Delta holds: exact text in the snapshot form
        return pa.array([None if v is None else _unscaled_bytes(decimal.Decimal(v), typ.scale)
                         for v in array.to_pylist()], _BIN)
    rows = len(array)
    little = np.frombuffer(array.buffers()[1], np.uint8, rows * 16, array.offset * 16).reshape(rows, 16)
    big = little[:, ::-1]
    sign = np.where(big[:, 0] >= 0x80, 0xFF, 0).astype(np.uint8)
    # A leading byte is redundant when it only repeats the sign and the next byte keeps the sign bit.
    redundant = (big[:, :-1] == sign[:, None]) & ((big[:, 1:] & 0x80) == (sign[:, None] & 0x80))
    skip = np.cumprod(redundant, axis=1).sum(axis=1)
    # Like fastavro (and Java's BigInteger), -2^(8n-1) takes n+1 bytes: (|v|.bit_length() + 8) // 8.
    rest_zero = np.cumprod((big == 0)[:, ::-1], axis=1).sum(axis=1) >= 15 - skip
    skip = skip - ((sign == 0xFF) & (big[np.arange(rows), skip] == 0x80) & rest_zero & (skip > 0))
    lengths = 16 - skip
    data = big[np.arange(16)[None, :] >= skip[:, None]]
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    validity = None  # rebuilt: the array's own bitmap may start at a bit offset
    if array.null_count:
        validity = pa.py_buffer(np.packbits(np.asarray(array.is_valid()), bitorder="little"))
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(_BIN, rows, buffers, null_count=array.null_count)


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
