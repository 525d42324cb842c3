"""Row events into a change batch, by column: their row images are kept as bytes as they arrive and
decoded a table at a time when a batch is built (``kernels.scan``, then one ``values`` cutter a column),
so a poll builds no Python object per row.

An update whose key's stored bytes change (a change of case in a case-insensitive key too) becomes
a delete of the old key and an insert of the new one. ``__seq`` numbers the changes of a transaction
in binlog order across its tables. A transaction too large to keep as bytes is decoded as it arrives,
so memory holds its columns, not its row images.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import NamedTuple, NoReturn

import numpy as np
import pyarrow as pa

from dagster_databus.core.batch import ChangeBatch, table_rows
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import BinlogEventError
from dagster_databus.sources.mysql.wire import kernels as k
from dagster_databus.sources.mysql.wire.codes import DELETE_ROWS, UPDATE_ROWS, event_type
from dagster_databus.sources.mysql.wire.packed import rows_layout
from dagster_databus.sources.mysql.wire.values import Cutter

WRITE, UPDATE, DELETE = 0, 1, 2
_OP_NAMES = pa.array(["i", "u", "d"], pa.string())  # by op code: WRITE, UPDATE, DELETE
# A transaction's row images kept as bytes up to this much; past it they are decoded as they arrive.
FLUSH_BYTES = 16 << 20
# Row images decoded at once: the scan notes two 8-byte numbers a column for each.
SLICE_IMAGES = 1 << 16
_NUMBERED = np.zeros(0, np.int32)  # in place of per-change arrays already used up


class RowsEvent(NamedTuple):
    """A row event's table id, what it does, and its row images (the bytes after the column bitmaps)."""

    table_id: int
    kind: int
    images: memoryview


def parse_rows(code: int, body: memoryview, columns: int | None, where: str, source: str) -> RowsEvent:
    """The parts of a row event's body; ``columns`` is its table map's column count (None: a table capture
    skips, whose images are not checked)."""
    table_id = int.from_bytes(body[:6], "little")
    count, pos, images = rows_layout(code, body)
    kind = UPDATE if code in UPDATE_ROWS else DELETE if code in DELETE_ROWS else WRITE
    if columns is not None:
        # Every column present; the bits past the last column are whatever the server left (MySQL sets them).
        # One bitmap, or an update's two (of its before and after images).
        every = (1 << count) - 1
        middle = (pos + images) // 2 if kind == UPDATE else images
        whole = int.from_bytes(body[pos:middle], "little") & every == every
        if kind == UPDATE:
            whole = whole and int.from_bytes(body[middle:images], "little") & every == every
        if count != columns or not whole:
            raise BinlogEventError(
                f"{event_type(code)} ending at {where} carries {'only some' if count == columns else count} of the "
                f"table's {columns} columns: the row was logged with binlog_row_image other than FULL",
                "SET GLOBAL binlog_row_image = 'FULL' (and in my.cnf, and in every session that sets it), then run "
                f"`databus bootstrap --source {source}`: the changes logged without whole rows cannot be rebuilt",
                position=where)
    return RowsEvent(table_id, kind, body[images:])


@dataclass(frozen=True, slots=True)
class Shape:
    """A table as a table map shapes it: its schema and how each column is cut out of row images."""

    schema: TableSchema
    widths: np.ndarray
    key: np.ndarray  # the key columns' indexes
    cutters: tuple[Cutter, ...]


# A run's row for each event: where its images are in the run's bytes, what it does, how many images it holds,
# its number in its transaction, its window, and its commit time in ms. Rows of machine integers, one after
# the other: a million one-row events are 56 MB, not a million tuples the garbage collector walks.
START, END, KIND, IMAGES, EVENT, WINDOW, STAMP = range(7)
_META = 7  # items a row


@dataclass(slots=True)
class _Run:
    """Undecoded row events of one shape, in binlog order: their row images' bytes, and a meta row each."""

    shape: Shape
    data: bytearray = field(default_factory=bytearray)
    meta: array[int] = field(default_factory=lambda: array("q"))


@dataclass(slots=True)
class _Changes:
    """Decoded changes of one shape: snapshot columns, op codes, and for each change its window, its
    event's number in the window, its place among the event's changes, and its commit time."""

    shape: Shape
    columns: list[pa.Array]
    ops: np.ndarray
    windows: np.ndarray
    events: np.ndarray
    local: np.ndarray
    stamps: np.ndarray
    seqs: np.ndarray = field(default_factory=lambda: _NUMBERED)

    def __len__(self) -> int:
        return len(self.ops)


class Transactions:
    """The changes of whole transactions, gathered until a batch is built, and of the one being read.

    ``add`` a row event to the open transaction, ``commit`` it at its SCN (or ``discard`` it), ``build``
    the committed ones into a ``ChangeBatch``. The open transaction's events go straight into the runs of
    their shapes, behind a mark of where each run stood before it: committing forgets the marks, discarding
    cuts the runs back to them. A one-row transaction costs one meta row, not a run of its own."""

    def __init__(self, refuse: Callable[[TableSchema, int, object, str, str], NoReturn]) -> None:
        self._refuse = refuse
        self._runs: dict[int, _Run] = {}  # by id(shape): the committed events, then the open transaction's
        self._marks: dict[int, tuple[int, int]] = {}  # the runs the open transaction added to: (bytes, events) before
        self._decoded: list[_Changes] = []  # committed and decoded (large transactions)
        self._open_decoded: list[_Changes] = []
        self._open_bytes = 0
        self._open_events = 0
        self._open_seq = 0  # the next __seq of the open transaction, once part of it is decoded
        self._scns: list[int] = []  # each committed window's SCN
        self._shapes: dict[str, Shape] = {}  # the shape each table has in the committed windows
        self.rows = 0  # row images committed so far (a batch's size)
        self._open_rows = 0
        self._reshaped = False  # whether the open transaction gives a table another shape than _shapes holds

    # -- reading ------------------------------------------------------------------------

    def add(self, shape: Shape, event: RowsEvent, stamp_ms: int, where: str) -> None:
        status, images = k.count(np.frombuffer(event.images, np.uint8), 2 if event.kind == UPDATE else 1,
                                 shape.widths)
        if status != k.OK:
            _refuse_images(status, where)
        key = id(shape)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = _Run(shape)
        data = run.data
        start = len(data)
        if key not in self._marks:
            self._marks[key] = (start, len(run.meta))  # in meta's items, not rows
            if self._shapes.get(shape.schema.table, shape) is not shape:
                self._reshaped = True
        data += event.images
        run.meta.extend((start, len(data), event.kind, images, self._open_events, len(self._scns), stamp_ms))
        self._open_events += 1
        self._open_rows += images
        self._open_bytes += len(data) - start
        if self._open_bytes > FLUSH_BYTES:
            self._decode_open()

    @property
    def shapes(self) -> dict[str, Shape]:
        """The shape of each table in the committed windows."""
        return dict(self._shapes)

    @property
    def pending(self) -> bool:
        """Whether the open transaction has row changes."""
        return bool(self._marks or self._open_decoded)

    def reshapes(self) -> bool:
        """Whether the open transaction gives a table a shape other than the committed windows' (the batch
        before it must be built first: a batch holds one shape per table)."""
        return self._reshaped and bool(self._shapes)  # noted as the transaction's events came: _shapes holds then

    def commit(self, scn: int) -> None:
        """Close the open transaction as the window at ``scn``."""
        if not self.pending:
            return
        if self._open_decoded:
            self._decode_open()
            self._decoded += self._open_decoded
            for changes in self._open_decoded:
                self._shapes[changes.shape.schema.table] = changes.shape
        for key in self._marks:
            shape = self._runs[key].shape
            self._shapes[shape.schema.table] = shape
        self._scns.append(scn)
        self.rows += self._open_rows
        self._marks = {}
        self._forget_open()

    def discard(self) -> None:
        """Forget the open transaction (rolled back, or read only in part)."""
        if self._marks:
            self._take_open()
        self._forget_open()

    def _forget_open(self) -> None:
        self._open_decoded = []
        self._reshaped = False
        self._open_bytes = self._open_events = self._open_seq = self._open_rows = 0

    def _take_open(self) -> list[_Run]:
        """The open transaction's undecoded events, cut out of the runs into runs of their own."""
        taken = []
        for key, (at, events) in self._marks.items():
            run = self._runs[key]
            if not events:  # the run holds nothing else
                del self._runs[key]
                taken.append(run)
                continue
            part = _Run(run.shape, run.data[at:], run.meta[events:])
            _rows(part)[:, [START, END]] -= at
            taken.append(part)
            del run.data[at:], run.meta[events:]
        self._marks = {}
        return taken

    # -- building -----------------------------------------------------------------------

    def build(self) -> ChangeBatch | None:
        """The committed windows as one batch (None when they hold no change); the open one stays."""
        open_runs = self._take_open()
        decoded = [part for run in self._runs.values() for part in self._decode(run, "committed")]
        _number(decoded, continue_from=None)
        parts = self._decoded + decoded
        scns = np.array(self._scns, np.int64)
        self._runs, self._decoded, self._scns, self._shapes, self.rows = {}, [], [], {}, 0
        # The open transaction's windows count from 0 again in the next batch.
        for run in open_runs:
            _rows(run)[:, WINDOW] = 0
            self._runs[id(run.shape)] = run
            self._marks[id(run.shape)] = (0, 0)
        for changes in self._open_decoded:
            changes.windows[:] = 0
        by_table: dict[str, list[_Changes]] = {}
        for changes in parts:
            if len(changes):
                by_table.setdefault(changes.shape.schema.table, []).append(changes)
        if not by_table:
            return None
        batch = ChangeBatch({table: _table_batch(group, scns) for table, group in by_table.items()})
        # What the decoding's intermediate arrays held goes back to the system, not kept for later: a
        # large transaction's peak is its batch, not its batch plus the pool's leftovers.
        pa.default_memory_pool().release_unused()
        return batch

    def _decode_open(self) -> None:
        """Decode the open transaction's row images so far, numbering its changes on from before."""
        decoded = [part for run in self._take_open() for part in self._decode(run, "open")]
        self._open_seq = _number(decoded, continue_from=self._open_seq)
        self._open_decoded += decoded
        self._open_bytes = 0
        pa.default_memory_pool().release_unused()

    def _decode(self, run: _Run, state: str) -> list[_Changes]:
        """A run's changes, decoded a slice of its events at a time: the scan's offsets of a slice, not of
        the whole run, are held at once."""
        meta = _rows(run)
        bounds = _slices(meta[:, IMAGES], SLICE_IMAGES)
        return [self._decode_slice(run, state, meta[a:b]) for a, b in pairwise(bounds)]

    def _decode_slice(self, run: _Run, state: str, meta: np.ndarray) -> _Changes:
        """The changes of the events of ``run`` whose meta rows are ``meta``."""
        shape = run.shape
        data = np.frombuffer(run.data, np.uint8) if run.data else np.zeros(0, np.uint8)
        counts = meta[:, IMAGES]
        starts, ends = np.ascontiguousarray(meta[:, START]), np.ascontiguousarray(meta[:, END])
        kinds_of_events = meta[:, KIND].astype(np.int8)
        per_row = np.where(kinds_of_events == UPDATE, 2, 1).astype(np.int64)
        total = int(counts.sum())
        ncols = len(shape.widths)
        off = np.zeros((total, ncols), np.int64)
        ln = np.zeros((total, ncols), np.int64)
        status, _, _ = k.scan(data, starts, ends, per_row, shape.widths, off, ln, True)
        assert status == k.OK  # each event was walked when it arrived
        image_event = np.repeat(np.arange(len(meta), dtype=np.int32), counts)
        kinds = kinds_of_events[image_event]
        local = _local_index(image_event)
        update = kinds == UPDATE
        before = np.flatnonzero(update & (local % 2 == 0))
        changed = np.zeros(len(before), np.bool_)
        if len(before):
            k.keys_changed(data, off, ln, before, shape.key, changed)
        keep = ~update
        keep[before] = changed  # the old key goes when the key changed
        keep[before + 1] = True
        ops = np.where(kinds == DELETE, 2, 0).astype(np.int8)
        ops[before] = 2
        ops[before + 1] = np.where(changed, 0, 1)  # the new key comes, or the row changes
        chosen = np.flatnonzero(keep)
        windows = meta[:, WINDOW].astype(np.int32)
        scns = self._scns

        def where(image: int) -> str:
            window = int(windows[image_event[image]])
            if state == "committed" or window < len(scns):
                return f"the transaction committed at SCN {scns[window]}"
            return "the transaction being read"

        columns = []
        for index, cut in enumerate(shape.cutters):
            def refuse(image: int, value: object, reason: str, index: int = index) -> NoReturn:
                self._refuse(shape.schema, index, value, reason, where(int(chosen[image])))

            columns.append(cut(data, np.ascontiguousarray(off[chosen, index]),
                               np.ascontiguousarray(ln[chosen, index]), refuse))
        del off, ln
        change_event = image_event[chosen]
        return _Changes(shape, columns, ops[chosen], windows[change_event],
                        meta[:, EVENT].astype(np.int32)[change_event], _local_index(change_event),
                        meta[:, STAMP][change_event])


def _rows(run: _Run) -> np.ndarray:
    """A run's meta rows as a matrix over the same memory (writes go through to the run)."""
    return np.frombuffer(run.meta, np.int64).reshape(-1, _META)


def _slices(counts: np.ndarray, most: int) -> list[int]:
    """Event boundaries cutting events with ``counts`` images into slices of about ``most`` images (an
    event is never cut; a slice holds at least one)."""
    bounds, held = [0], 0
    for i, count in enumerate(counts.tolist()):
        if held and held + count > most:
            bounds.append(i)
            held = 0
        held += count
    bounds.append(len(counts))
    return bounds


def _refuse_images(status: int, where: str) -> NoReturn:
    """An event's row images, walked as it arrived, do not fill its bytes exactly."""
    what = "ends inside a row" if status == k.TRUNCATED else "has bytes after its last row"
    raise BinlogEventError(
        f"the row event ending at {where} {what}: its rows do not match the columns of its table map",
        "the binlog is damaged there, or the server writes a column layout this version does not read; "
        "report the server version and the column types", position=where)


def _local_index(events: np.ndarray) -> np.ndarray:
    """Each item's place among the items of its event (an event's items are contiguous)."""
    if not len(events):
        return np.zeros(0, np.int32)
    starts = np.flatnonzero(np.concatenate([[True], events[1:] != events[:-1]]))
    return (np.arange(len(events)) - np.repeat(starts, np.diff(np.append(starts, len(events))))).astype(np.int32)


def _number(parts: list[_Changes], continue_from: int | None) -> int:
    """Give each change its ``__seq``: its place among its transaction's changes in binlog order, across
    tables. With ``continue_from``, the parts are all of the open transaction, part of which was numbered
    before; returns the next number."""
    if not parts:
        return continue_from or 0
    windows = np.concatenate([c.windows for c in parts])
    order = np.lexsort((np.concatenate([c.local for c in parts]), np.concatenate([c.events for c in parts]),
                        windows))
    in_order = windows[order]
    starts = np.flatnonzero(np.concatenate([[True], in_order[1:] != in_order[:-1]]))
    seqs = np.empty(len(order), np.int64)
    seqs[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    seqs += continue_from or 0
    at = 0
    for c in parts:
        c.seqs = seqs[at:at + len(c)].astype(np.int32)
        c.events = c.local = _NUMBERED  # what numbering needed, let go
        at += len(c)
    return int(seqs.max()) + 1 if len(seqs) else (continue_from or 0)


def _table_batch(parts: list[_Changes], scns: np.ndarray) -> pa.RecordBatch:
    """One table's changes as its record batch of a change batch, in commit order. Each piece of ``parts``
    is let go as soon as it is joined, so memory holds the batch and at most one column twice."""
    schema = parts[0].shape.schema
    columns = []
    for _ in schema.columns:
        pieces = [c.columns.pop(0) for c in parts]
        columns.append(pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0])
        del pieces

    def joined(name: str) -> np.ndarray:
        out = np.concatenate([getattr(c, name) for c in parts])
        for c in parts:
            setattr(c, name, _NUMBERED)
        return out

    windows, seqs, ops, stamps = joined("windows"), joined("seqs"), joined("ops"), joined("stamps")
    order = np.lexsort((seqs, windows))
    if not np.array_equal(order, np.arange(len(order))):
        taken = pa.array(order)
        columns = [c.take(taken) for c in columns]
        windows, seqs, ops, stamps = windows[order], seqs[order], ops[order], stamps[order]
    where = f"the change events of the transactions committed at SCN {scns[windows[0]]} to {scns[windows[-1]]}"
    window_scns = pa.array(scns[windows], pa.int64())
    del windows
    op_names = pa.DictionaryArray.from_arrays(pa.array(ops, pa.int8()), _OP_NAMES).cast(pa.string())
    return table_rows(schema, columns, scn=window_scns, window_scn=window_scns, seq=pa.array(seqs, pa.int32()),
                      op=op_names, commit_ts_ms=pa.array(stamps, pa.int64()), where=where)
