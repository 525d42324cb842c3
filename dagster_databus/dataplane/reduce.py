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
    one with the highest (``__scn``, ``__seq``)."""

    def __init__(self, schema: pa.Schema, key: Sequence[str], budget_bytes: int = DEFAULT_BUDGET,
                 spill_dir: Path | None = None) -> None:
        self.schema, self.key = schema, list(key)
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
                yield from _newest(pa.Table.from_batches(held, self.schema), self.key).to_batches()
                return
            for writer in self._writers:
                writer.close()
            for n in range(SPILL_FILES):
                with pa.memory_map(str(self._spill / f"{n}.arrow")) as source:
                    part = pa.ipc.open_stream(source).read_all()
                yield from _newest(part, self.key).to_batches()
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


def _newest(data: pa.Table, key: Sequence[str]) -> pa.Table:
    """The row with the highest (``__scn``, ``__seq``) of each key."""
    if data.num_rows == 0:
        return data
    scn, seq = data["__scn"].to_numpy(), data["__seq"].to_numpy()
    if len(scn) > 1 and not np.all((np.diff(scn) > 0) | ((np.diff(scn) == 0) & (np.diff(seq) > 0))):
        data = data.sort_by([("__scn", "ascending"), ("__seq", "ascending")])
    # In (scn, seq) order the newest event of a key is its last row.
    rows = pa.array(np.arange(data.num_rows, dtype=np.int64))
    last = (pa.table([*(data[k] for k in key), rows], names=[*(f"k{i}" for i in range(len(key))), "row"])
            .group_by([f"k{i}" for i in range(len(key))], use_threads=False).aggregate([("row", "max")]))
    return data.take(pa.array(np.sort(last["row_max"].to_numpy())))
