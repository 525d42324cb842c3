"""Avro object container files (change-log segments) decoded in bulk, straight into Arrow columns.

fastavro decodes one record at a time into a Python dict (3 to 8 µs a record here, by width), and
turning those dicts into Arrow columns costs half as much again. Here every record of a group of
blocks is decoded by one numba kernel (``decode_kernels``): each union branch (one row record per
table and schema version) becomes a tiny program (``decode_program``), one op code per field, that
the kernel interprets record by record. It writes a record's fields into a column of an int64
matrix, one row per field (for bytes and text, where the value lies in the block; for decimals,
the two halves of the 128-bit value), in a range of columns of the record's branch, and their
validity into a uint8 matrix alike. Each branch's Arrow columns are then cut from its rows with
numpy (``decode_columns``): no Python runs per value. The columns are exactly what
``encoder.encode_records`` takes (``ColumnType.arrow()``, event fields as ``int64``/``int32``/
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
import io
import json
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dagster_databus.core.kernels import few
from dagster_databus.core.types import ColumnType
from dagster_databus.log.avro.container import Block, read_container
from dagster_databus.log.avro.decode_columns import branch_column
from dagster_databus.log.avro.decode_kernels import (
    BAD_BRANCH,
    BAD_NULL,
    FULL,
    TOO_WIDE,
    TRAILING,
    TRUNCATED,
    Status,
    decode_records,
)
from dagster_databus.log.avro.decode_program import compile_branch, full_name
from dagster_databus.log.avro.fields import Field, fields_of, short

# Records decoded per kernel call: big enough that the per-column numpy and Arrow calls are noise,
# small enough that the (slots x records) matrices stay a few tens of MB.
GROUP_ROWS = 65_536
# Fewer records than this in a group are decoded by fastavro, not the kernel (see ``Decoder._decode_small``); more
# in a process whose kernels have not run yet (``core.kernels.few``).
SMALL_RECORDS = 2_000

Branches = Mapping[str, Sequence[Field]]
Decoded = tuple[str, pa.RecordBatch, npt.NDArray[np.int64]]


class Decoder:
    """Decodes the blocks of containers of one writer schema: a union of records (a segment) or a record.

    ``branches`` maps record full names to their fields as ``encode_records`` was given them; only
    those branches are decoded into batches, the records of others are skipped over. ``None``
    decodes every branch with the fields ``fields_of`` reads from the schema.
    """

    def __init__(self, schema: Any, branches: Branches | None = None) -> None:
        self.union = isinstance(schema, list)
        records = schema if self.union else [schema]
        names = [full_name(r) if isinstance(r, Mapping) else "" for r in records]
        if not names or not all(isinstance(r, Mapping) and r.get("type") == "record" for r in records):
            raise ValueError(f"writer schema {short(schema)}: this decoder reads a record or a union of records")
        if len(set(names)) != len(names):
            raise ValueError(f"writer schema: the union names a record twice ({names})")
        if branches is not None and set(branches) - set(names):
            raise ValueError(f"branches {sorted(set(branches) - set(names))} are not in the container's schema "
                             f"(it has {names})")
        self.names = tuple(names)
        self._schema = schema
        self.branches = tuple(
            compile_branch(name, record, (branches.get(name) if branches is not None else fields_of(record)))
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
        if few(n, SMALL_RECORDS):
            try:
                return self._decode_small(blocks, first)
            except Exception:  # bytes fastavro or Arrow refuse: the kernel decodes them again and names the fault
                pass
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
            status = decode_records(data, ends, counts, state, self.union, self._first_op, self._ops, self._nullable,
                             self._slots, self._wanted, first, room, column, held, vals, valid)
            if status[0] != FULL:
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
            arrays = [branch_column(branch, j, branch_vals, branch_valid, data, size)
                      for j in range(len(branch.fields))]
            out.append((branch.name, pa.RecordBatch.from_arrays(arrays, schema=branch.schema),
                        vals[0, start:start + size].copy()))
        return out

    def _decode_small(self, blocks: Sequence[Block], first: int) -> list[Decoded]:
        """``decode_blocks`` by fastavro, a record at a time, into the same batches: a few records cost it
        microseconds, and the kernel costs seconds to compile on a machine whose cache does not hold it yet.
        Whatever it cannot decode raises, and the kernel decodes the group again to say what is wrong."""
        import fastavro

        parsed = fastavro.parse_schema(_without_decimals(self._schema))
        index = {name: i for i, name in enumerate(self.names)}
        rows: list[list[tuple[int, dict[str, Any]]]] = [[] for _ in self.branches]
        position = first
        for block in blocks:
            data = io.BytesIO(block.data)
            for _ in range(block.count):
                read: Any = fastavro.schemaless_reader(data, parsed, return_record_name=self.union)
                name, value = read if self.union else (self.names[0], read)
                if self._wanted[index[name]]:
                    rows[index[name]].append((position, value))
                position += 1
            if data.tell() != len(block.data):
                raise ValueError(f"the block at byte {block.offset} holds {len(block.data) - data.tell()} bytes "
                                 f"after its {block.count} records")
        out = []
        for branch, held in zip(self.branches, rows, strict=True):
            if not held or branch.schema is None:
                continue
            arrays = [f.type.to_arrow([_exact(f.type, value[f.name]) for _, value in held]) for f in branch.fields]
            out.append((branch.name, pa.RecordBatch.from_arrays(arrays, schema=branch.schema),
                        np.array([p for p, _ in held], dtype=np.int64)))
        return out

    def _failure(self, status: Status, blocks: Sequence[Block], ends: np.ndarray) -> str:
        code, record, op, at = status[0], int(status[1]), status[2], int(status[3])
        if code == TRAILING:  # ``record`` is the block's index, ``at`` where its records end
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
        what = {TRUNCATED: "runs past the end of its block",
                BAD_BRANCH: f"names union branch {at}, the schema has {len(self.branches)}",
                BAD_NULL: f"has union index {at} in a [\"null\", T] field",
                TOO_WIDE: "holds a decimal wider than 128 bits"}[code]
        return f"{where} {what}"


def _without_decimals(schema: Any) -> Any:
    """The schema with its decimals read as their bytes: fastavro rounds a decimal of more digits than its
    precision to fit, where the kernel (and ``_exact``) refuses it."""
    if isinstance(schema, list):
        return [_without_decimals(s) for s in schema]
    if isinstance(schema, Mapping):
        if schema.get("logicalType") == "decimal":
            return schema["type"]
        return {k: _without_decimals(v) if k in ("type", "fields") else v for k, v in schema.items()}
    return schema


def _exact(column: ColumnType, value: Any) -> Any:
    """A value fastavro read (decimals as their two's-complement bytes) as the canonical value."""
    if column.kind != "decimal" or value is None:
        return column.from_avro(value)
    unscaled = int.from_bytes(value, "big", signed=True)
    if abs(unscaled) >= 10 ** column.precision:
        raise ValueError(f"a decimal of more than {column.precision} digits")
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return decimal.Decimal((int(unscaled < 0), digits, -column.scale))  # exact: no context rounds it


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
    kept: tuple[np.ndarray, np.ndarray] | None = getattr(_SCRATCH, "matrices", None)
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
