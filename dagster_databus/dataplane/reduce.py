"""The newest change per key, reduced in-process from a stream of change batches in bounded memory.

Batches are held in memory up to a budget; past it, they are spilled by the key's stored hash
bucket (``__partition``) into Arrow IPC files, so every event of a key lands in one file, and each
file is then reduced on its own. Either way the result streams out as record batches: nothing
holds the whole change set at once.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SPILL_FILES = 32
DEFAULT_BUDGET = 256 * 2**20


@dataclass(slots=True)
class ChangeStats:
    """What a change stream held: events by operation, distinct windows, bytes spilled."""

    events_by_op: dict[str, int] = field(default_factory=dict)
    windows: int = 0
    spilled_bytes: int = 0

    @property
    def events(self) -> int:
        return sum(self.events_by_op.values())


class NewestPerKey:
    """Feed change batches in log order with ``add``; ``results`` then yields one row per key, the
    one with the highest (``__scn``, ``__seq``).

    ``at_commit``: a key's row is its state at the commit of its last transaction, whatever order the rows
    changed in within it (``_at_commit``); a key whose state then depends on whether the snapshot held it
    before comes out with ``__op`` = ``HELD_ONLY``, for the MERGE to apply only where it holds the key."""

    def __init__(self, schema: pa.Schema, key: Sequence[str], budget_bytes: int = DEFAULT_BUDGET,
                 spill_dir: Path | None = None, at_commit: bool = False) -> None:
        self.schema, self.key, self.at_commit = schema, list(key), at_commit
        self.budget, self.spill_dir = budget_bytes, spill_dir
        self.stats = ChangeStats()
        self._held: list[pa.RecordBatch] = []
        self._held_bytes = 0
        self._last_window: int | None = None
        self._spill: Path | None = None
        self._writers: list[pa.ipc.RecordBatchStreamWriter] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._count(batch)
        if self._spill is None and self._held_bytes + batch.nbytes > self.budget:
            self._start_spilling()
        if self._spill is None:
            self._held.append(batch)
            self._held_bytes += batch.nbytes
        else:
            self._write(batch)

    def extend(self, batches: Iterable[pa.RecordBatch]) -> NewestPerKey:
        for batch in batches:
            self.add(batch)
        return self

    def results(self) -> Iterator[pa.RecordBatch]:
        """The reduced rows; spill files are removed once read (or when the iterator is closed)."""
        try:
            if self._spill is None:
                held, self._held = self._held, []
                yield from _newest(pa.Table.from_batches(held, self.schema), self.key, self.at_commit).to_batches()
                return
            for writer in self._writers:
                writer.close()
            for n in range(SPILL_FILES):
                with pa.memory_map(str(self._spill / f"{n}.arrow")) as source:
                    part = pa.ipc.open_stream(source).read_all()
                yield from _newest(part, self.key, self.at_commit).to_batches()
                del part
        finally:
            self.close()

    def close(self) -> None:
        for writer in self._writers:
            writer.close()
        self._writers = []
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def _count(self, batch: pa.RecordBatch) -> None:
        ops = batch.column(batch.schema.get_field_index("__op"))
        for value, count in zip(*_value_counts(ops), strict=True):
            self.stats.events_by_op[value] = self.stats.events_by_op.get(value, 0) + count
        # Batches arrive in log order, so a window's events are contiguous: count where the window changes.
        windows = batch.column(batch.schema.get_field_index("__window_scn")).to_numpy()
        starts = int(np.count_nonzero(windows[1:] != windows[:-1])) + 1
        if self._last_window is not None and windows[0] == self._last_window:
            starts -= 1
        self.stats.windows += starts
        self._last_window = int(windows[-1])

    def _start_spilling(self) -> None:
        self._spill = Path(tempfile.mkdtemp(prefix="databus-reduce-", dir=self.spill_dir))
        self._writers = [pa.ipc.new_stream(str(self._spill / f"{n}.arrow"), self.schema) for n in range(SPILL_FILES)]
        held, self._held, self._held_bytes = self._held, [], 0
        for batch in held:
            self._write(batch)

    def _write(self, batch: pa.RecordBatch) -> None:
        buckets = pc.bit_wise_and(batch.column(batch.schema.get_field_index("__partition")),
                                  pa.scalar(SPILL_FILES - 1, pa.int32())).to_numpy()
        order = np.argsort(buckets, kind="stable")
        bounds = np.searchsorted(buckets[order], np.arange(SPILL_FILES + 1))
        ordered = batch.take(pa.array(order))
        for n in range(SPILL_FILES):
            if bounds[n + 1] > bounds[n]:
                self._writers[n].write_batch(ordered.slice(bounds[n], bounds[n + 1] - bounds[n]))
        self.stats.spilled_bytes += batch.nbytes


def _value_counts(array: pa.Array) -> tuple[list[str], list[int]]:
    counts = pc.value_counts(array)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


def _newest(data: pa.Table, key: Sequence[str], at_commit: bool = False) -> pa.Table:
    """The row with the highest (``__scn``, ``__seq``) of each key; with ``at_commit``, its state at commit."""
    if data.num_rows == 0:
        return data
    scn, seq = data["__scn"].to_numpy(), data["__seq"].to_numpy()
    if len(scn) > 1 and not np.all((np.diff(scn) > 0) | ((np.diff(scn) == 0) & (np.diff(seq) > 0))):
        data = data.sort_by([("__scn", "ascending"), ("__seq", "ascending")])
    # In (scn, seq) order the newest event of a key is its last row.
    keys = same_keys([data[k] for k in key])
    rows = pa.array(np.arange(data.num_rows, dtype=np.int64))
    names = [f"k{i}" for i in range(len(key))]
    last = pa.table([*keys, rows], names=[*names, "row"]).group_by(names, use_threads=False).aggregate([("row", "max")])
    chosen = np.sort(last["row_max"].to_numpy())
    if at_commit:
        return _at_commit(data, keys, chosen)
    return data.take(pa.array(chosen))


def same_keys(columns: Sequence[pa.Array | pa.ChunkedArray]) -> list[pa.Array | pa.ChunkedArray]:
    """Key columns as the sources compare them, for grouping and matching: a float's -0 is its 0 (Arrow's hashes
    tell them apart; every source's ``=`` and the MERGE's do not)."""
    return [pc.add(c, pa.scalar(0, c.type)) if pa.types.is_floating(c.type) else c for c in columns]


HELD_ONLY = "c"  # a reduced row's ``__op``: the image applies only where the snapshot holds the key (``_at_commit``)


def _at_commit(data: pa.Table, keys: list[pa.Array | pa.ChunkedArray], chosen: np.ndarray) -> pa.Table:
    """Each key's state at the commit of its last transaction, from the newest events (``chosen``).

    Within a transaction a key's events are not always in the order of one row's life: a DEFERRABLE key
    permuted by one statement (``SET id = 6 - id``) inserts key 5 (the row that was 1) before it deletes
    key 5 (the row that was 5). Rows with the key are counted instead: an insert adds one, a delete takes
    one, an update neither, and at commit the key has one row or none. A transaction that adds one leaves the
    key; one that takes one removes it; one that adds as many as it takes leaves it as it was before,
    which the events alone show when the count went below zero on the way (the key was held), and which
    otherwise only the snapshot knows (``HELD_ONLY``). A key that stays takes its transaction's last image."""
    op_column = data["__op"]

    def is_op(*values: str) -> np.ndarray:
        return np.asarray(pc.is_in(op_column, pa.array(values, op_column.type)).to_numpy(zero_copy_only=False))

    # A key whose newest event inserts or updates has a row at commit: that event's row is after every other.
    # The others: a delete, or a reduced row that holds only where held (a reduce of reduced rows: the
    # Spark engine's route step reduces each log segment before the shuffle).
    last_deletes = chosen[is_op("d", HELD_ONLY)[chosen]]
    adds = np.flatnonzero(is_op("i", HELD_ONLY))
    names = [f"k{i}" for i in range(len(keys))]
    if len(last_deletes) and len(adds):
        # Only a key whose last transaction also added a row with it can end otherwise than its newest event says.
        txn = data["__scn"]
        added = pa.table([*(pc.take(k, pa.array(adds)) for k in keys), pc.take(txn, pa.array(adds))],
                         names=[*names, "txn"])
        ending = pa.table([*(pc.take(k, pa.array(last_deletes)) for k in keys), pc.take(txn, pa.array(last_deletes)),
                           pa.array(last_deletes)], names=[*names, "txn", "row"])
        last_deletes = np.sort(ending.join(added, keys=[*names, "txn"], join_type="left semi",
                                           use_threads=False)["row"].to_numpy())
    if not len(last_deletes) or not len(adds):
        return data.take(pa.array(chosen))
    wanted = pa.table([pc.take(k, pa.array(last_deletes)) for k in keys], names=names)
    wanted = wanted.append_column("kid", pa.array(np.arange(len(last_deletes), dtype=np.int64)))
    events = pa.table([*keys, pa.array(np.arange(data.num_rows, dtype=np.int64))], names=[*names, "row"])
    events = events.join(wanted, keys=names, join_type="inner", use_threads=False)
    kid, row = events["kid"].to_numpy(), events["row"].to_numpy()
    found = np.unique(kid)  # every key but one holding NULL (refused at capture), which no join matches
    order = np.lexsort((row, kid))
    kid, row = kid[order], row[order]
    # A transaction is the unit: the events of one share its SCN (a window may hold several, a txlog's).
    txn = data["__scn"].to_numpy()[row]
    op = pc.take(op_column, pa.array(row)).to_numpy(zero_copy_only=False)
    delta = (op == "i").astype(np.int64) - (op == "d").astype(np.int64)
    start = np.ones(len(row), bool)
    start[1:] = (kid[1:] != kid[:-1]) | (txn[1:] != txn[:-1])
    starts = np.flatnonzero(start)
    segment = np.cumsum(start) - 1
    total = np.cumsum(delta)
    running = total - (total[starts] - delta[starts])[segment]
    ends = np.append(starts[1:], len(row)) - 1
    net, dipped = running[ends], np.minimum.reduceat(running, starts) < 0
    moved = np.maximum.reduceat((delta != 0) | (op == HELD_ONLY), starts)
    image = np.maximum.reduceat(np.where(op != "d", np.arange(len(row)), -1), starts)  # 'c' rows are images
    stays = (net > 0) | ((net == 0) & (dipped | ~moved))
    held_only = (net == 0) & moved & ~dipped
    # A transaction that leaves the key as it was: as the one before it left it, when there is one here.
    seg_kid = kid[starts]
    definite = np.where(~held_only, np.arange(len(starts)), -1)
    before = np.maximum.accumulate(definite)
    last_of_key = np.append(seg_kid[1:] != seg_kid[:-1], True)
    last = np.flatnonzero(last_of_key)
    b = before[last]
    inherits = held_only[last] & (b >= 0) & (seg_kid[np.maximum(b, 0)] == seg_kid[last])
    stays_at_end = np.where(inherits, stays[np.maximum(b, 0)], stays[last])
    held = ~inherits & held_only[last]
    at = np.where(stays_at_end | held, image[last], ends[last])
    replaced = row[at]
    # Each replaced row says what it does, whatever event it was: a held-only row (a reduce of reduced rows
    # hands some in) that inherits a decided state stays as an update, or goes as a delete.
    said = np.where(held, HELD_ONLY, np.where(stays_at_end, np.where(op[at] == HELD_ONLY, "u", op[at]), "d"))
    keep = np.setdiff1d(chosen, last_deletes[found], assume_unique=True)
    picked = np.sort(np.concatenate([keep, replaced]))
    result = data.take(pa.array(picked))
    at_picked = np.searchsorted(picked, replaced)
    if not np.array_equal(said, result["__op"].take(pa.array(at_picked)).to_numpy(zero_copy_only=False)):
        out = result["__op"].to_numpy(zero_copy_only=False).astype(object)
        out[at_picked] = said
        result = result.set_column(result.schema.get_field_index("__op"), "__op",
                                   pa.array(out, result.schema.field("__op").type))
    return result


class PieceEdges:
    """The events of a piece of a log segment that the reduce must not fold (``NewestPerKey(at_commit=True)``
    needs a transaction's events whole): those of its first and last SCN, whose transactions may go on in the
    pieces before and after it. Feed batches in log order to ``split``, which returns what may be reduced;
    ``rest`` then gives the held events, as they were, for the reduce after the shuffle."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.head: list[pa.RecordBatch] = []  # the first SCN's events
        self.tail: list[pa.RecordBatch] = []  # the highest SCN's so far
        self.tail_scn: int | None = None

    def split(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        scns = batch.column(batch.schema.get_field_index("__scn")).to_numpy()
        if self.first is None:
            self.first = int(scns[0])
        first = scns == self.first
        if first.any():
            self.head.append(batch.filter(pa.array(first)))
        top = int(scns[-1])  # log order: SCNs never go down
        ready: list[pa.RecordBatch] = []
        if self.tail_scn is not None and top > self.tail_scn:
            ready, self.tail = self.tail, []  # its transaction ended before this batch's last one
        self.tail_scn = top
        last = (scns == top) & ~first
        if last.any():
            self.tail.append(batch.filter(pa.array(last)))
        middle = ~first & ~last
        if middle.any():
            ready.append(batch.filter(pa.array(middle)))
        return ready

    def rest(self) -> list[pa.RecordBatch]:
        return [*self.head, *self.tail]
