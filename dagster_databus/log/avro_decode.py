"""Avro object container files (change-log segments) decoded in bulk, straight into Arrow columns.

fastavro decodes one record at a time into a Python dict (3 to 8 µs a record here, by width), and
turning those dicts into Arrow columns costs half as much again. Here every record of a group of
blocks is decoded by one numba kernel: each union branch (one row record per table and schema
version) becomes a tiny program, one op code per field, that the kernel interprets record by record.
It writes a record's fields into a column of an int64 matrix, one row per field (for bytes and text,
where the value lies in the block; for decimals, the two halves of the 128-bit value), in a range of
columns of the record's branch, and their validity into a uint8 matrix alike. Each branch's Arrow
columns are then cut from its rows with numpy: no Python runs per value. The columns are exactly what
``avro_columnar.encode_records`` takes (``ColumnType.arrow()``, event fields as ``int64``/``int32``/
``string``), so tests compare them with fastavro's values mapped through ``ColumnType.to_arrow``.

A segment's readers need its metadata (``databus.rows``) to know which branch is which table::

    metadata, blocks = read_container(f)
    decoder = Decoder(json.loads(metadata["avro.schema"]), branches)  # ValueError: use fastavro
    for name, batch, positions in decoder.decode(blocks):
        ...

What the decoder cannot decode exactly (other Avro shapes, fields not as ``branches`` describes
them, values fastavro or ``ColumnType.to_arrow`` would refuse) raises ``ValueError``; callers fall
back to fastavro, which reports its own error if the data is damaged.
"""

from __future__ import annotations

import decimal
import json
import os
import sys
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import numba
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dagster_databus.core.types import NUMBER_LOGICAL_TYPE, TIME_LOGICAL_TYPE, ColumnType
from dagster_databus.log.avro_columnar import MAGIC, Field

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same library fastavro reads zstandard blocks with
    from backports import zstd

# Records decoded per kernel call: big enough that the per-column numpy and Arrow calls are noise,
# small enough that the (slots x records) matrices stay a few tens of MB.
GROUP_ROWS = 65_536

Branches = Mapping[str, Sequence[Field]]
Decoded = tuple[str, pa.RecordBatch, npt.NDArray[np.int64]]

# -- the container ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block:
    """One data block of a container: its record count and its decompressed record bytes."""

    count: int
    data: bytes
    offset: int  # where the block starts in the file, for error messages


def read_container(f: BinaryIO, start: int = 0, end: int | None = None) -> tuple[dict[str, str], Iterator[Block]]:
    """The container's metadata (``avro.schema``, ``avro.codec``, the writer's own keys; text, as
    fastavro's ``reader.metadata`` holds it) and an iterator over its blocks, read lazily from ``f``.

    With ``start``/``end``, only the blocks that begin at a byte offset in [start, end): the first is
    found by its sync marker, so readers of consecutive ranges (several tasks of one large file) each
    read whole blocks and together every block exactly once. ``f`` must be seekable then.

    ``ValueError`` for what is not an Avro object container, a codec other than ``null``, ``deflate``
    and ``zstandard``, and (while iterating) truncated blocks or a wrong sync marker.
    """
    reader = _Reader(f)
    if reader.read(4) != MAGIC:
        raise ValueError("not an Avro object container file: it does not start with Obj\\x01")
    raw: dict[str, bytes] = {}
    while count := reader.long():  # an Avro map: blocks of entries up to an empty one
        if count < 0:  # a negative count is followed by the block's size in bytes
            reader.long()
            count = -count
        for _ in range(count):
            key = reader.blob()
            raw[key.decode()] = reader.blob()
    sync = reader.read(16)
    try:
        metadata = {key: value.decode() for key, value in raw.items()}
    except UnicodeDecodeError as e:
        raise ValueError(f"container metadata that is not UTF-8 text: {e}") from None
    codec = metadata.get("avro.codec", "null")
    if codec not in _DECOMPRESS:
        raise ValueError(f"container codec {codec!r}: this decoder reads {', '.join(_DECOMPRESS)}")
    if start > reader.position and not reader.skip_past(sync, start - len(sync)):
        return metadata, iter(())
    return metadata, _blocks(reader, sync, codec, end)


def _blocks(reader: _Reader, sync: bytes, codec: str, end: int | None = None) -> Iterator[Block]:
    decompress = _DECOMPRESS[codec]
    while True:
        offset = reader.position
        if end is not None and offset >= end:
            return
        count = reader.long(eof_ok=True)
        if count is None:
            return
        size = reader.long()
        if count < 0 or size < 0:
            raise ValueError(f"block at byte {offset}: negative record count {count} or size {size}")
        packed = reader.read(size)
        if reader.read(16) != sync:
            raise ValueError(f"block at byte {offset}: the sync marker after it is not the file's")
        try:
            data = decompress(packed)
        except Exception as e:  # zlib.error, zstd.ZstdError: damaged data, whatever the library
            raise ValueError(f"block at byte {offset}: {codec} data does not decompress: {e}") from None
        yield Block(count, data, offset)


_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "null": lambda data: data,
    "deflate": lambda data: zlib.decompress(data, -15),  # raw deflate, as Avro specifies
    "zstandard": lambda data: zstd.decompress(data),
}


class _Reader:
    """Header and block framing from a file: a few small reads per block, so plain Python."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.position = 0

    def read(self, size: int) -> bytes:
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError(f"the container ends at byte {self.position + len(data)}, inside what starts "
                             f"at byte {self.position}")
        self.position += size
        return data

    def long(self, eof_ok: bool = False) -> int | None:
        u, shift = 0, 0
        while True:
            byte = self.f.read(1)
            if not byte:
                if eof_ok and not shift:
                    return None
                raise ValueError(f"the container ends at byte {self.position}, inside a number")
            self.position += 1
            u |= (byte[0] & 0x7F) << shift
            if byte[0] < 0x80:
                return (u >> 1) ^ -(u & 1)
            shift += 7
            if shift > 63:
                raise ValueError(f"a number longer than 10 bytes at byte {self.position}")

    def skip_past(self, marker: bytes, start: int, chunk: int = 1 << 16) -> bool:
        """Move to just after the first ``marker`` at or after byte ``start``; False at the end of the file."""
        self.f.seek(start)
        position, tail = start, b""
        while data := self.f.read(chunk):
            window = tail + data
            found = window.find(marker)
            if found >= 0:
                self.position = position - len(tail) + found + len(marker)
                self.f.seek(self.position)
                return True
            tail = window[-(len(marker) - 1):]
            position += len(data)
        return False

    def blob(self) -> bytes:
        size = self.long()
        assert size is not None
        if size < 0:
            raise ValueError(f"negative length {size} at byte {self.position}")
        return self.read(size)


# -- the branches' programs ---------------------------------------------------------------------

# Field op codes the kernel interprets. Two-slot ops: _BYTES keeps (start in the block, length),
# _DEC128 the 128-bit unscaled value as (low, high) 64-bit halves.
_LONG, _BOOL, _FLOAT, _DOUBLE, _BYTES, _DEC128 = range(6)
_TWO_SLOTS = (_BYTES, _DEC128)
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_SKIP_OPS = {"boolean": _BOOL, "int": _LONG, "long": _LONG, "float": _FLOAT, "double": _DOUBLE, "bytes": _BYTES,
             "string": _BYTES}
_PRIMITIVE_KINDS = {"boolean": "boolean", "int": "integer", "long": "long", "float": "float", "double": "double",
                    "string": "string", "bytes": "binary"}
_LOGICAL_KINDS = {("int", "date"): "date", ("long", "timestamp-micros"): "timestamp",
                  ("long", "local-timestamp-micros"): "timestamp_ntz", ("long", TIME_LOGICAL_TYPE): "time",
                  ("string", NUMBER_LOGICAL_TYPE): "number"}
# Shape of a field's Avro type: (nullable, primitive, logicalType, precision, scale).
_Shape = tuple[bool, str, str | None, int, int]


def fields_of(record: Mapping[str, Any]) -> list[Field]:
    """The fields of an Avro record schema as ``Field`` s, each Avro type read back as the product type
    ``ColumnType.avro`` writes it as (Avro ``int`` as ``integer``: byte and short are not told apart).

    ``ValueError`` for types no product type is written as (records, arrays, maps, enums, fixed,
    other logical types, unions other than ``["null", T]``).
    """
    fields = []
    for spec in _record_fields(record):
        nullable, primitive, logical, precision, scale = _shape(spec["type"], spec["name"])
        if primitive == "bytes" and logical == "decimal":
            column = ColumnType.decimal(precision, scale)
        elif logical is not None:
            kind = _LOGICAL_KINDS.get((primitive, logical))
            if kind is None:
                raise ValueError(f"field {spec['name']}: logical type {logical!r} on {primitive} is not a product type")
            column = ColumnType(kind)  # type: ignore[arg-type]
        else:
            column = ColumnType(_PRIMITIVE_KINDS[primitive])  # type: ignore[arg-type]
        fields.append(Field(spec["name"], column, nullable))
    return fields


def _record_fields(record: Any) -> list[dict[str, Any]]:
    if not (isinstance(record, Mapping) and record.get("type") == "record" and isinstance(record.get("fields"), list)):
        raise ValueError(f"not an Avro record schema: {_short(record)}")
    for spec in record["fields"]:
        if not (isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and "type" in spec):
            raise ValueError(f"record {record.get('name')!r}: not an Avro field: {_short(spec)}")
    return record["fields"]


def _shape(typ: Any, field: str) -> _Shape:
    """A field's Avro type as (nullable, primitive, logicalType, precision, scale)."""
    if isinstance(typ, list):
        if len(typ) == 2 and _primitive(typ[0], field)[0] == "null" and _primitive(typ[1], field)[0] != "null":
            return (True, *_primitive(typ[1], field))
        raise ValueError(f"field {field}: union {_short(typ)}: this decoder reads only [\"null\", T] unions")
    primitive = _primitive(typ, field)
    if primitive[0] == "null":
        raise ValueError(f"field {field}: a null-only field is not a product type")
    return (False, *primitive)


def _primitive(typ: Any, field: str) -> tuple[str, str | None, int, int]:
    if isinstance(typ, str) and typ in _PRIMITIVES:
        return typ, None, 0, 0
    if isinstance(typ, Mapping) and typ.get("type") in _PRIMITIVES:
        logical = typ.get("logicalType")
        if logical == "decimal":
            precision, scale = typ.get("precision"), typ.get("scale", 0)
            if typ["type"] != "bytes" or type(precision) is not int or type(scale) is not int:
                raise ValueError(f"field {field}: decimal {_short(typ)}: this decoder reads bytes decimals "
                                 "with an integer precision and scale")
            return "bytes", "decimal", precision, scale
        return typ["type"], logical if isinstance(logical, str) else None, 0, 0
    raise ValueError(f"field {field}: Avro type {_short(typ)} is not one this decoder reads "
                     "(primitives, logical types of primitives, [\"null\", T])")


def _expected(f: Field) -> _Shape:
    """The shape ``encode_records`` writes ``f`` in."""
    shape = _shape(f.type.avro(), f.name)
    return (f.nullable, *shape[1:])


def _op(f: Field) -> int:
    kind = f.type.kind
    if kind == "decimal" and not f.type.as_text_in_delta:
        return _DEC128
    if kind in ("decimal", "number", "string", "binary"):
        return _BYTES
    return {"boolean": _BOOL, "float": _FLOAT, "double": _DOUBLE}.get(kind, _LONG)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True, slots=True)
class _Branch:
    name: str
    fields: tuple[Field, ...]  # empty for branches only skipped over
    ops: tuple[int, ...]
    nullable: tuple[bool, ...]
    slots: tuple[int, ...]
    width: int
    schema: pa.Schema | None  # None: not wanted, its records are only skipped over


def _branch(name: str, record: Mapping[str, Any], wanted: Sequence[Field] | None) -> _Branch:
    specs = _record_fields(record)
    shapes = [_shape(spec["type"], spec["name"]) for spec in specs]
    if wanted is None:  # only skipped over: the encoding is all that matters
        ops = tuple(_SKIP_OPS[shape[1]] for shape in shapes)
        fields: tuple[Field, ...] = ()
        schema = None
    else:
        fields = tuple(wanted)
        names = [spec["name"] for spec in specs]
        if names != [f.name for f in fields]:
            raise ValueError(f"branch {name}: the container's fields {names} are not the expected "
                             f"{[f.name for f in fields]}")
        for f, shape in zip(fields, shapes, strict=True):
            if shape != _expected(f):
                raise ValueError(f"branch {name}, field {f.name}: the container's Avro type "
                                 f"{_short(next(s['type'] for s in specs if s['name'] == f.name))} is not how "
                                 f"{'nullable ' if f.nullable else ''}{f.type} is written ({_short(f.type.avro())})")
        ops = tuple(_op(f) for f in fields)
        # Nullable like the writer's input: pa.field's default, as in TableSchema.arrow and EVENT_SCHEMA.
        schema = pa.schema([pa.field(f.name, f.type.arrow()) for f in fields])
    slots, width = [], 0
    for op in ops:
        slots.append(width)
        width += 2 if op in _TWO_SLOTS else 1
    return _Branch(name, fields, ops, tuple(shape[0] for shape in shapes), tuple(slots), width, schema)


def _full_name(record: Mapping[str, Any]) -> str:
    """The record's full name as fastavro reports it (``return_record_name=True``)."""
    name = record.get("name")
    if not isinstance(name, str):
        raise ValueError(f"a record without a name: {_short(record)}")
    namespace = record.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


# -- decoding -----------------------------------------------------------------------------------


class Decoder:
    """Decodes the blocks of containers of one writer schema: a union of records (a segment) or a record.

    ``branches`` maps record full names to their fields as ``encode_records`` was given them; only
    those branches are decoded into batches, the records of others are skipped over. ``None``
    decodes every branch with the fields ``fields_of`` reads from the schema.
    """

    def __init__(self, schema: Any, branches: Branches | None = None) -> None:
        self.union = isinstance(schema, list)
        records = schema if self.union else [schema]
        names = [_full_name(r) if isinstance(r, Mapping) else "" for r in records]
        if not names or not all(isinstance(r, Mapping) and r.get("type") == "record" for r in records):
            raise ValueError(f"writer schema {_short(schema)}: this decoder reads a record or a union of records")
        if len(set(names)) != len(names):
            raise ValueError(f"writer schema: the union names a record twice ({names})")
        if branches is not None and set(branches) - set(names):
            raise ValueError(f"branches {sorted(set(branches) - set(names))} are not in the container's schema "
                             f"(it has {names})")
        self.names = tuple(names)
        self.branches = tuple(
            _branch(name, record, (branches.get(name) if branches is not None else fields_of(record)))
            for name, record in zip(names, records, strict=True))
        # The kernel's matrices: a column per record of a wanted branch, each branch in a range of
        # columns of its own; row 0 its records' positions, then its fields' slots. Fields of branches
        # only skipped over have slot -1: nothing is written for them.
        self._wanted = np.array([b.schema is not None for b in self.branches], dtype=np.bool_)
        self._rows = 1 + max((b.width for b in self.branches if b.schema is not None), default=0)
        self._ops = np.array([op for b in self.branches for op in b.ops], dtype=np.int64)
        self._nullable = np.array([n for b in self.branches for n in b.nullable], dtype=np.bool_)
        self._slots = np.array([1 + s if b.schema is not None else -1 for b in self.branches for s in b.slots],
                               dtype=np.int64)
        self._first_op = np.cumsum([0, *(len(b.ops) for b in self.branches)], dtype=np.int64)

    def decode(self, blocks: Iterable[Block], rows: int = GROUP_ROWS, workers: int = 1) -> Iterator[Decoded]:
        """(branch name, its rows as a record batch, their positions) per wanted branch, for groups of
        blocks of at least ``rows`` records; positions count the records of every branch from the
        first block given (so ``np.argsort`` of a group's positions restores the interleaved order).

        ``workers`` > 1 decodes that many groups at once on threads (the kernels let go of the GIL),
        still yielding in order.
        """
        groups = self.groups(blocks, rows)
        if workers <= 1:
            for group, first in groups:
                yield from self.decode_blocks(group, first)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="avro-decode") as pool:
            pending: deque[Future[list[Decoded]]] = deque()
            for group, first in groups:
                pending.append(pool.submit(self.decode_blocks, group, first))
                if len(pending) > workers:  # one more in flight than threads: none waits for the reader
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()

    @staticmethod
    def groups(blocks: Iterable[Block], rows: int = GROUP_ROWS) -> Iterator[tuple[list[Block], int]]:
        """Consecutive blocks of at least ``rows`` records, each with the position of its first record."""
        group: list[Block] = []
        count = first = 0
        for block in blocks:
            group.append(block)
            count += block.count
            if count >= rows:
                yield group, first
                group, first, count = [], first + count, 0
        if group:
            yield group, first

    def decode_blocks(self, blocks: Sequence[Block], first: int = 0) -> list[Decoded]:
        """The records of ``blocks`` (consecutive, or not: each holds whole records), positions from ``first``."""
        n = sum(b.count for b in blocks)
        raw = blocks[0].data if len(blocks) == 1 else b"".join(b.data for b in blocks)
        data = np.frombuffer(raw, dtype=np.uint8)
        ends = np.cumsum([len(b.data) for b in blocks], dtype=np.int64)
        counts = np.array([b.count for b in blocks], dtype=np.int64)
        # Each wanted branch writes to a range of columns of its own: room for every record for a lone
        # branch; else none until its first record, then 1024 columns, doubling (up to the records still
        # to come) whenever it fills them. A full range stops the kernel at its record; the range grows
        # in place if it is the last one (as it is while a segment holds one table after another), else
        # moves past the last one (only that branch's cells are copied); the kernel resumes there.
        # Ranges left behind by moves make at most about as many columns again as there are records:
        # the matrices start that wide, so they are seldom copied whole. Sized by records, not by
        # branches x records: NumPy asks for huge pages for arrays this large, so all of them is likely
        # to be backed by memory, written to or not.
        wanted = np.flatnonzero(self._wanted)
        room = np.zeros(len(self.branches), dtype=np.int64)
        column = np.zeros(len(self.branches), dtype=np.int64)
        if len(wanted) == 1:
            room[wanted] = n
        top = int(room.sum())  # the first column after every range
        vals, valid = _matrices(self._rows, top if len(wanted) <= 1 else 2 * n + 1_024 * len(wanted))
        held = np.zeros(len(self.branches), dtype=np.int64)
        state = np.zeros(4, dtype=np.int64)  # where the kernel goes on: block, record in it, byte, record
        while True:
            status = _decode(data, ends, counts, state, self.union, self._first_op, self._ops, self._nullable,
                             self._slots, self._wanted, first, room, column, held, vals, valid)
            if status[0] != _FULL:
                break
            b, size = status[1], int(held[status[1]])
            extra = min(n - int(state[3]), max(size, 1_024))
            moved = column[b] + room[b] != top
            need = top + extra + (size if moved else 0)
            if need > vals.shape[1]:
                vals, valid = _matrices(self._rows, max(need, vals.shape[1] * 3 // 2), vals, valid, top)
            if moved:
                vals[:, top:top + size] = vals[:, column[b]:column[b] + size]
                valid[:, top:top + size] = valid[:, column[b]:column[b] + size]
                column[b], room[b] = top, size
                top += size
            room[b] += extra
            top += extra
        if status[0]:
            raise ValueError(self._failure(status, blocks, ends))
        out = []
        for b in wanted.tolist():
            branch, start, size = self.branches[b], int(column[b]), int(held[b])
            if not size:
                continue
            branch_vals = vals[1:1 + branch.width, start:start + size]
            branch_valid = valid[1:1 + branch.width, start:start + size]
            arrays = [_column(branch, j, branch_vals, branch_valid, data, size) for j in range(len(branch.fields))]
            out.append((branch.name, pa.RecordBatch.from_arrays(arrays, schema=branch.schema),
                        vals[0, start:start + size].copy()))
        return out

    def _failure(self, status: tuple[int, int, int, int], blocks: Sequence[Block], ends: np.ndarray) -> str:
        code, record, op, at = status
        if code == _TRAILING:  # ``record`` is the block's index, ``at`` where its records end
            block = blocks[record]
            return (f"the block at byte {block.offset} holds {int(ends[record] - at)} bytes after its "
                    f"{block.count} records")
        k = int(np.searchsorted(np.cumsum([b.count for b in blocks]), record, side="right"))
        where = f"record {record - sum(b.count for b in blocks[:k])} of the block at byte {blocks[k].offset}"
        if op >= 0:
            b = int(np.searchsorted(self._first_op, op, side="right")) - 1
            branch = self.branches[b]
            names = [f.name for f in branch.fields] or [f"#{i}" for i in range(len(branch.ops))]
            where += f" (branch {branch.name}, field {names[op - self._first_op[b]]})"
        what = {_TRUNCATED: "runs past the end of its block",
                _BAD_BRANCH: f"names union branch {at}, the schema has {len(self.branches)}",
                _BAD_NULL: f"has union index {at} in a [\"null\", T] field",
                _TOO_WIDE: "holds a decimal wider than 128 bits"}[code]
        return f"{where} {what}"


def _matrices(rows: int, length: int, old_vals: np.ndarray | None = None, old_valid: np.ndarray | None = None,
              used: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's value and validity matrices: at least ``rows`` x ``length``, holding the first ``used``
    columns of the old ones.

    Kept per thread between calls (up to ``_SCRATCH_BYTES``): fresh memory costs a page fault per page
    written, and at this size malloc maps it fresh every time; on some machines that costs as much as
    decoding. So nothing decoded may point into them: columns are copied out.
    """
    # Rows padded off a multiple of 4 KiB: the cells one record writes fall in different cache sets.
    length = -(-length // 512) * 512 + 8
    kept = getattr(_SCRATCH, "matrices", None)
    if old_vals is None and kept is not None and kept[0].shape[0] >= rows and kept[0].shape[1] >= length:
        return kept
    if kept is not None:
        rows = max(rows, kept[0].shape[0])
    vals = np.empty((rows, length), dtype=np.int64)
    valid = np.empty((rows, length), dtype=np.uint8)
    if old_vals is not None and old_valid is not None:
        rows = min(rows, old_vals.shape[0])
        vals[:rows, :used] = old_vals[:rows, :used]
        valid[:rows, :used] = old_valid[:rows, :used]
    if vals.nbytes + valid.nbytes <= _SCRATCH_BYTES:
        _SCRATCH.matrices = vals, valid
    return vals, valid


_SCRATCH = threading.local()
_SCRATCH_BYTES = 64 << 20


def decode_segment(source: str | os.PathLike[str] | BinaryIO, branches: Branches | None = None,
                   rows: int = GROUP_ROWS, workers: int = 1, byte_range: tuple[int, int] | None = None
                   ) -> Iterator[Decoded]:
    """Every wanted branch's records of a container file (path or binary file), a group of blocks at
    a time: (record full name, record batch, positions of its rows among the records read). With
    ``byte_range``, only the blocks that begin in it (``read_container``).

    The container's schema is checked against ``branches`` before this returns (``ValueError`` if
    it cannot be decoded); damaged data raises ``ValueError`` while iterating.
    """
    f: BinaryIO = open(source, "rb") if isinstance(source, str | os.PathLike) else source  # noqa: SIM115
    owned = f is not source
    try:
        metadata, blocks = read_container(f, *(byte_range or (0, None)))
        if "avro.schema" not in metadata:
            raise ValueError("the container has no avro.schema metadata")
        decoder = Decoder(json.loads(metadata["avro.schema"]), branches)
    except BaseException:
        if owned:
            f.close()
        raise
    return _decode_file(f, owned, decoder, blocks, rows, workers)


def _decode_file(f: BinaryIO, owned: bool, decoder: Decoder, blocks: Iterator[Block], rows: int,
                 workers: int) -> Iterator[Decoded]:
    try:
        yield from decoder.decode(blocks, rows, workers)
    finally:
        if owned:
            f.close()


# -- columns from the kernel's matrices ---------------------------------------------------------

_INT_RANGES = {"byte": (np.int8, -(2**7), 2**7 - 1), "short": (np.int16, -(2**15), 2**15 - 1),
               "integer": (np.int32, -(2**31), 2**31 - 1),
               # fastavro reads a date as date.fromordinal: years 1..9999.
               "date": (np.int32, -719_162, 2_932_896)}
# fastavro reads timestamps as epoch + timedelta: years 1..9999 (0001-01-01 .. 9999-12-31 23:59:59.999999).
_TIMESTAMP_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_MAX_OFFSET = 2**31 - 1  # string and binary arrays have 32-bit offsets


def _column(branch: _Branch, j: int, vals: np.ndarray, valid: np.ndarray, data: np.ndarray, n: int) -> pa.Array:
    f, op, s = branch.fields[j], branch.ops[j], branch.slots[j]
    validity, nulls = None, 0
    if f.nullable:
        present = int(np.count_nonzero(valid[s]))
        if present < n:
            validity, nulls = pa.py_buffer(np.packbits(valid[s], bitorder="little")), n - present
    kind, typ = f.type.kind, f.type.arrow()
    values = vals[s]
    if op == _LONG:
        if kind in _INT_RANGES:
            dtype, low, high = _INT_RANGES[kind]
            _check_range(f, values, low, high)
            values = values.astype(dtype)
        else:
            if kind in ("timestamp", "timestamp_ntz"):
                _check_range(f, values, *_TIMESTAMP_RANGE)
            values = values.copy()  # the matrices are used again
        buffers = [pa.py_buffer(values)]
    elif op == _BOOL:
        buffers = [pa.py_buffer(np.packbits(values.astype(np.bool_), bitorder="little"))]
    elif op == _FLOAT:  # the float's 4 bytes, kept as bits: -0.0 and NaN payloads stay as written
        buffers = [pa.py_buffer(values.astype(np.uint32).view(np.float32))]
    elif op == _DOUBLE:
        buffers = [pa.py_buffer(values.copy())]
    elif op == _DEC128:
        buffers = [pa.py_buffer(_decimal128(f, values, vals[s + 1]))]
    else:
        starts, lengths = values, vals[s + 1]
        if kind == "decimal":  # wider than Delta holds: the exact plain text
            return _decimal_text(f, data, starts, lengths, valid[s] if f.nullable else None, validity, nulls, n)
        offsets, payload = _gather(f, data, starts, lengths)
        array = pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(payload)], nulls)
        if kind == "number":
            return _number_text(f, array, offsets, payload)
        if kind == "string":  # fastavro refuses text that is not UTF-8; Arrow strings must be UTF-8 too
            try:
                array.validate(full=True)
            except pa.ArrowInvalid as e:
                raise ValueError(f"field {f.name}: {e}") from None
        return array
    return pa.Array.from_buffers(typ, n, [validity, *buffers], nulls)


def _check_range(f: Field, values: np.ndarray, low: int, high: int) -> None:
    """Values fastavro (or ``ColumnType.to_arrow``) would refuse are refused here too."""
    if len(values) and (values.min() < low or values.max() > high):
        bad = values[(values < low) | (values > high)][0]
        raise ValueError(f"field {f.name}: value {bad} is outside what {f.type} holds ({low}..{high})")


def _decimal128(f: Field, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Arrow's decimal128 buffer (little-endian 128-bit unscaled values) from their 64-bit halves."""
    # fastavro rounds values of more digits than the precision; to_arrow then refuses them.
    top_high, top_low = _halves(10**f.type.precision)
    bottom_high, bottom_low = _halves(-(10**f.type.precision))
    low_u = low.view(np.uint64)  # the low half compares unsigned, the high half signed
    above = (high > top_high) | ((high == top_high) & (low_u >= top_low))
    below = (high < bottom_high) | ((high == bottom_high) & (low_u <= bottom_low))
    if np.any(above | below):
        raise ValueError(f"field {f.name}: a value with more than {f.type.precision} digits")
    out = np.empty((len(low), 2), dtype=np.int64)
    out[:, 0], out[:, 1] = low, high
    return out


def _halves(value: int) -> tuple[np.int64, np.uint64]:
    """A 128-bit two's complement value as its (signed high, unsigned low) 64-bit halves."""
    value &= (1 << 128) - 1
    return np.uint64(value >> 64).astype(np.int64), np.uint64(value & (2**64 - 1))


def _gather(f: Field, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """32-bit offsets and the values' bytes, copied out of the block side by side."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _MAX_OFFSET:
        raise ValueError(f"field {f.name}: {offsets[-1]} bytes in one batch, more than a {f.type.arrow()} "
                         "array holds; decode fewer rows at a time")
    payload = np.empty(int(offsets[-1]), dtype=np.uint8)
    _copy(data, starts, lengths, offsets, payload)
    return offsets.astype(np.int32), payload


def _number_text(f: Field, array: pa.Array, offsets: np.ndarray, payload: np.ndarray) -> pa.Array:
    """``number`` columns: the text as ``to_arrow(from_avro(text))`` gives it. That is the text itself
    when it is plain (``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``), as this project writes it; otherwise
    (hand-made files) the whole column goes through ``decimal`` like fastavro's path."""
    if _plain_numbers(payload, offsets, np.asarray(array.is_valid()) if array.null_count else
                      np.ones(len(array), dtype=np.bool_)):
        return array
    try:
        array.validate(full=True)  # UTF-8, as for strings
        return f.type.to_arrow([None if v is None else decimal.Decimal(v) for v in array.to_pylist()])
    except (decimal.InvalidOperation, pa.ArrowInvalid) as e:
        raise ValueError(f"field {f.name}: text that is not a decimal: {e!r}") from None


def _decimal_text(f: Field, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None,
                  validity: pa.Buffer | None, nulls: int, n: int) -> pa.Array:
    """Decimals wider than Delta holds, as ``plain_decimal`` of fastavro's value: all ``scale`` digits."""
    present = np.ones(n, dtype=np.bool_) if valid is None else valid.astype(np.bool_)
    stride = f.type.precision + 3  # sign, point, and a zero before the point when every digit is after it
    text = np.empty(n * stride, dtype=np.uint8)
    text_lengths = np.empty(n, dtype=np.int64)
    failed = _decimals_as_text(data, starts, lengths, present, f.type.precision, f.type.scale, stride, text,
                               text_lengths)
    if failed >= 0:
        raise ValueError(f"field {f.name}: a value with more than {f.type.precision} digits")
    text.flags.writeable = False  # read-only like the blocks: one compiled _copy for both
    offsets, payload = _gather(f, text, np.arange(n, dtype=np.int64) * stride, text_lengths)
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(payload)], nulls)


# -- kernels ------------------------------------------------------------------------------------

_OK, _TRUNCATED, _BAD_BRANCH, _BAD_NULL, _TOO_WIDE, _TRAILING, _FULL = range(7)
_U7F = np.uint64(0x7F)
_U1 = np.uint64(1)
_U8 = np.uint64(8)
_ALL_ONES = np.uint64(2**64 - 1)


@numba.njit(cache=True, nogil=True)
def _varint(data: np.ndarray, pos: int, end: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """A zigzag varint (Avro int and long) at ``pos``: (value, position after it); position -1 when it
    runs past ``end`` or past 64 bits."""
    if pos >= end:
        return np.int64(0), np.int64(-1)
    b = data[pos]
    if b < 0x80:  # one byte: most values, every union index and null marker
        return np.int64(b >> 1) ^ -np.int64(b & 1), np.int64(pos + 1)
    u = np.uint64(b) & _U7F
    shift = np.uint64(7)
    pos += 1
    while True:
        if pos >= end:
            return np.int64(0), np.int64(-1)
        b = data[pos]
        pos += 1
        if shift == np.uint64(63) and b > 1:  # the tenth byte holds the 64th bit only
            return np.int64(0), np.int64(-1)
        u |= (np.uint64(b) & _U7F) << shift
        if b < 0x80:
            return np.int64(u >> _U1) ^ -np.int64(u & _U1), np.int64(pos)
        shift += np.uint64(7)
        if shift > np.uint64(63):
            return np.int64(0), np.int64(-1)


@numba.njit(cache=True, nogil=True)
def _decode(data: np.ndarray, ends: np.ndarray, counts: np.ndarray, state: np.ndarray, union: bool,
            first_op: np.ndarray, ops: np.ndarray, nullable: np.ndarray, slots: np.ndarray, wanted: np.ndarray,
            first: int, room: np.ndarray, column: np.ndarray, held: np.ndarray, vals: np.ndarray,
            valid: np.ndarray) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    """Decode ``counts[k]`` records from each block (its bytes end at ``ends[k]``) by the branches'
    programs, from where ``state`` says: (block, record in it, byte, record overall).

    A record of wanted branch b goes to column ``c = column[b] + held[b]``: its position (``first`` +
    its index) to ``vals[0, c]``, field j to ``vals[slots[j], c]`` (and the next row for two-slot
    ops), a nullable field's validity to ``valid[slots[j], c]``. When ``held[b]`` reaches ``room[b]``
    the kernel stops before that record, ``state`` pointing at it, and returns (_FULL, b, ...).

    Returns (status, record or branch, op index or -1, detail); status 0 when every block was
    decoded exactly.
    """
    branches = len(first_op) - 1
    k, i, pos, rec = state[0], state[1], state[2], state[3]
    while k < len(counts):
        end = ends[k]
        while i < counts[k]:
            at = pos
            b = np.int64(0)
            if union:
                if pos < end and data[pos] < 0x80:  # up to 64 branches: one byte
                    b, pos = np.int64(data[pos] >> 1) ^ -np.int64(data[pos] & 1), pos + 1
                else:
                    b, pos = _varint(data, pos, end)
                if pos < 0:
                    return _TRUNCATED, rec, -1, 0
                if b < 0 or b >= branches:
                    return _BAD_BRANCH, rec, -1, b
            c = np.int64(0)
            if wanted[b]:
                if held[b] == room[b]:
                    state[0], state[1], state[2], state[3] = k, i, at, rec
                    return _FULL, b, -1, 0
                c = column[b] + held[b]
                vals[0, c] = first + rec
                held[b] += 1
            for j in range(first_op[b], first_op[b + 1]):
                s = slots[j]  # -1: a branch only skipped over
                op = ops[j]
                if nullable[j]:
                    if pos < end and data[pos] == 2:  # the usual present marker: one byte, no varint call
                        index = np.int64(1)
                        pos += 1
                    else:
                        index, pos = _varint(data, pos, end)
                        if pos < 0:
                            return _TRUNCATED, rec, j, 0
                    if index == 0:
                        if s >= 0:
                            valid[s, c] = 0
                            vals[s, c] = 0
                            if op >= _BYTES:  # two slots: a null string has no bytes to gather
                                vals[s + 1, c] = 0
                        continue
                    if index != 1:
                        return _BAD_NULL, rec, j, index
                    if s >= 0:
                        valid[s, c] = 1
                if op == _LONG:
                    if pos < end and data[pos] < 0x80:  # small values: one byte
                        v = np.int64(data[pos] >> 1) ^ -np.int64(data[pos] & 1)
                        pos += 1
                    else:
                        v, pos = _varint(data, pos, end)
                        if pos < 0:
                            return _TRUNCATED, rec, j, 0
                    if s >= 0:
                        vals[s, c] = v
                elif op == _BYTES:
                    if pos < end and data[pos] < 0x80:  # lengths up to 63: one byte
                        size, start = np.int64(data[pos] >> 1) ^ -np.int64(data[pos] & 1), pos + 1
                    else:
                        size, start = _varint(data, pos, end)
                    if start < 0 or size < 0 or start + size > end:
                        return _TRUNCATED, rec, j, 0
                    if s >= 0:
                        vals[s, c] = start
                        vals[s + 1, c] = size
                    pos = start + size
                elif op == _DOUBLE:
                    if pos + 8 > end:
                        return _TRUNCATED, rec, j, 0
                    if s >= 0:
                        v = np.int64(0)
                        for t in range(8):  # little-endian, as Avro writes it: the bits of the double
                            v |= np.int64(data[pos + t]) << (8 * t)
                        vals[s, c] = v
                    pos += 8
                elif op == _FLOAT:
                    if pos + 4 > end:
                        return _TRUNCATED, rec, j, 0
                    if s >= 0:
                        v = np.int64(0)
                        for t in range(4):
                            v |= np.int64(data[pos + t]) << (8 * t)
                        vals[s, c] = v
                    pos += 4
                elif op == _BOOL:
                    if pos >= end:
                        return _TRUNCATED, rec, j, 0
                    if s >= 0:
                        vals[s, c] = 1 if data[pos] != 0 else 0  # like fastavro: any byte but 0 is true
                    pos += 1
                else:  # _DEC128: big-endian two's complement, sign-extended into 128 bits
                    size, start = _varint(data, pos, end)
                    if start < 0 or size < 0 or start + size > end:
                        return _TRUNCATED, rec, j, 0
                    low = np.uint64(0)
                    high = np.uint64(0)
                    if size > 0:
                        sign = data[start] >> 7
                        if sign:
                            low = _ALL_ONES
                            high = _ALL_ONES
                        lead = start  # the first of the (at most 16) bytes that make the value
                        if size > 16:  # longer than needed: the extra leading bytes may only repeat the sign
                            lead = start + size - 16
                            for t in range(start, lead):
                                if data[t] != (0xFF if sign else 0):
                                    return _TOO_WIDE, rec, j, 0
                            if data[lead] >> 7 != sign:
                                return _TOO_WIDE, rec, j, 0
                        for t in range(lead, start + size):
                            high = (high << _U8) | (low >> np.uint64(56))
                            low = (low << _U8) | np.uint64(data[t])
                    if s >= 0:
                        vals[s, c] = np.int64(low)
                        vals[s + 1, c] = np.int64(high)
                    pos = start + size
            i += 1
            rec += 1
        if pos != end:
            return _TRAILING, k, -1, pos
        k += 1
        i = 0
    return _OK, 0, -1, 0


@numba.njit(cache=True, nogil=True)
def _copy(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(len(starts)):
        at, start = offsets[i], starts[i]
        for t in range(lengths[i]):
            out[at + t] = data[start + t]


@numba.njit(cache=True, nogil=True)
def _plain_numbers(text: np.ndarray, offsets: np.ndarray, present: np.ndarray) -> bool:  # pragma: no cover
    """Whether every present value is plain decimal text, ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``."""
    for i in range(len(offsets) - 1):
        at, end = offsets[i], offsets[i + 1]
        if not present[i]:
            continue
        if text[at] == 0x2D:  # -
            at += 1
        if at == end or not 0x30 <= text[at] <= 0x39:
            return False
        if text[at] == 0x30 and at + 1 < end and text[at + 1] != 0x2E:  # a leading zero
            return False
        while at < end and 0x30 <= text[at] <= 0x39:
            at += 1
        if at < end:
            if text[at] != 0x2E or at + 1 == end:  # .
                return False
            at += 1
            while at < end:
                if not 0x30 <= text[at] <= 0x39:
                    return False
                at += 1
    return True


@numba.njit(cache=True, nogil=True)
def _decimals_as_text(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, present: np.ndarray,
                      precision: int, scale: int, stride: int, out: np.ndarray,
                      out_lengths: np.ndarray) -> int:  # pragma: no cover - compiled
    """Each present value (big-endian two's complement unscaled bytes) as plain text with ``scale``
    fractional digits, at ``i * stride`` in ``out``; the index of a value of more than ``precision``
    digits, or -1."""
    widest = 0
    for i in range(len(lengths)):
        widest = max(widest, lengths[i])
    limbs = np.zeros((widest + 3) // 4 + 1, dtype=np.uint64)  # 32-bit limbs of the magnitude, low first
    digits = np.empty(10 * len(limbs) + 9, dtype=np.uint8)  # decimal digits, low first
    billion = np.uint64(1_000_000_000)
    for i in range(len(lengths)):
        at = i * stride
        if not present[i]:
            out_lengths[i] = 0
            continue
        start, size = starts[i], lengths[i]
        negative = size > 0 and data[start] >= 0x80
        used = (size + 3) // 4
        limbs[:used + 1] = 0
        for t in range(size):  # the magnitude: for a negative value, invert and add one
            byte = data[start + size - 1 - t]
            if negative:
                byte = ~byte & 0xFF
            limbs[t // 4] |= np.uint64(byte) << np.uint64(8 * (t % 4))
        if negative:
            t = 0
            while True:
                limbs[t] += np.uint64(1)
                if limbs[t] < np.uint64(1 << 32):
                    break
                limbs[t] = 0
                t += 1
            if t == used:
                used += 1
        count = 0
        while used > 0:  # divide by 10^9, nine digits at a time
            remainder = np.uint64(0)
            for t in range(used - 1, -1, -1):
                current = (remainder << np.uint64(32)) | limbs[t]
                limbs[t] = current // billion
                remainder = current % billion
            while used > 0 and limbs[used - 1] == 0:
                used -= 1
            for _ in range(9):
                digits[count] = remainder % np.uint64(10)
                remainder //= np.uint64(10)
                count += 1
        while count > 0 and digits[count - 1] == 0:
            count -= 1
        if count > precision:
            return i
        if negative:
            out[at] = 0x2D
            at += 1
        if count <= scale:
            out[at] = 0x30
            at += 1
        else:
            for t in range(count - 1, scale - 1, -1):
                out[at] = 0x30 + digits[t]
                at += 1
        if scale > 0:
            out[at] = 0x2E
            at += 1
            for t in range(scale - 1, -1, -1):
                out[at] = 0x30 + (digits[t] if t < count else 0)
                at += 1
        out_lengths[i] = at - i * stride
    return -1
