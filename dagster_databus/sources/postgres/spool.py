"""A PostgreSQL transaction too large to hold in memory, on its way to the change log.

An open transaction's rows go to a temporary folder, a piece at a time, once it holds ``SPOOL_ROWS`` of them:
each piece is every table's rows of a stretch of the transaction, as Arrow IPC files, so the pieces in order are
the transaction in order. The commit gives the window its SCN and time; the log writer then reads the pieces back
one at a time into one segment (``core.batch.SpooledBatch``), so capture's memory stays flat however large the
transaction.

A transaction the server streams before its commit (protocol 2, ``Streamed``) is spooled the same way; its
subtransactions that roll back are told by Stream Abort, and their rows are left out as the pieces are read back.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import DatabusError
from dagster_databus.sources.postgres.rows import TableRows, change_rows

# Rows of one open transaction held in memory; past them, its rows go to disk.
SPOOL_ROWS = 100_000

Piece = Mapping[str, tuple[TableSchema, list[pa.Array]]]


class Spool:
    """One transaction's rows, in pieces on disk, read back as change batches of its window."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.pieces: list[list[tuple[str, TableSchema, Path]]] = []
        self.tables: set[str] = set()  # with rows spooled

    def write(self, piece: Piece) -> None:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="databus-spool-"))
        files: list[tuple[str, TableSchema, Path]] = []
        for name, (schema, arrays) in piece.items():
            path = self.folder / f"{len(self.pieces):06d}-{len(files):04d}.arrow"
            batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
                writer.write_batch(batch)
            files.append((name, schema, path))
            self.tables.add(name)
        if files:
            self.pieces.append(files)

    def read(self, window: int, commit_ms: int, dropped: np.ndarray | None = None,
             marks: tuple[np.ndarray, np.ndarray] | None = None) -> Iterator[ChangeBatch]:
        """The pieces as change batches of window ``window``, one at a time. ``marks`` (the first ``__seq`` of
        each run of rows of one subtransaction, and that subtransaction) with ``dropped`` (subtransactions rolled
        back) leave rows out; ``__seq`` numbers the rows kept from 0."""
        seq = 0
        for files in self.pieces:
            loaded = []
            for name, schema, path in files:
                with pa.memory_map(str(path)) as source:
                    arrays = list(pa.ipc.open_file(source).get_batch(0).columns)
                if dropped is not None and marks is not None and len(dropped):
                    subs = marks[1][np.searchsorted(marks[0], np.asarray(arrays[-1]), side="right") - 1]
                    keep = pa.array(~np.isin(subs, dropped))
                    arrays = [pc.filter(a, keep) for a in arrays]
                if len(arrays[-1]):
                    loaded.append((name, schema, arrays))
            if not loaded:
                continue
            # Renumbered in the order they came: rows left out leave no gaps.
            every = np.concatenate([np.asarray(arrays[-1]) for _, _, arrays in loaded])
            numbers = np.empty(len(every), np.int32)
            numbers[np.argsort(every, kind="stable")] = np.arange(seq, seq + len(every), dtype=np.int32)
            seq += len(every)
            tables, start = {}, 0
            for name, schema, arrays in loaded:
                count = len(arrays[-1])
                arrays[-1] = pa.array(numbers[start:start + count])
                start += count
                window_column = pa.array(np.full(count, window, np.int64))
                commit = pa.array(np.full(count, commit_ms, np.int64))
                tables[name] = change_rows(schema, arrays, window_column, commit,
                                           f"the change events of the transaction committed at SCN {window}")
            yield ChangeBatch(tables)

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def spill(tables: Mapping[str, TableRows], spool: Spool) -> None:
    """The open transaction's rows of ``tables`` into ``spool``, as one piece."""
    piece = {name: (table.schema, arrays) for name, table in tables.items()
             if (arrays := table.take_open()) is not None}
    if piece:
        spool.write(piece)


class Streamed:
    """A transaction the server streams before its commit: its rows by table, spooled as they grow, the runs of
    rows of each of its subtransactions, which of them rolled back, and the DDL and TRUNCATEs its stream told
    (recorded at its commit)."""

    def __init__(self) -> None:
        self.tables: dict[str, TableRows] = {}
        self.spool = Spool()
        self.seq = 0
        self.held = 0  # rows held in memory
        self.marks: list[tuple[int, int]] = []  # (first seq, subtransaction xid) of each run of rows
        self.counts: dict[int, int] = {}  # rows of each subtransaction
        self.aborted: set[int] = set()
        self.ddl: list[tuple[str, str]] = []  # (table, statement)
        self.refused: DatabusError | None = None  # what refused one of its changes, raised if its commit counts

    def refuse(self, exc: DatabusError) -> None:
        """Keep what refused a change, and let go of the rows: the transaction fails or is dropped at its commit."""
        self.refused = exc
        self.tables.clear()
        self.spool.close()
        self.held = 0

    def add(self, table: TableRows, op: str, row: tuple[object, ...], subxid: int) -> None:
        if not self.marks or self.marks[-1][1] != subxid:
            self.marks.append((self.seq, subxid))
        table.add(op, row, self.seq, 0)  # type: ignore[arg-type]
        self.counts[subxid] = self.counts.get(subxid, 0) + 1
        self.seq += 1
        self.held += 1
        if self.held >= SPOOL_ROWS:
            self.spill()

    def spill(self) -> None:
        spill(self.tables, self.spool)
        self.held = 0

    @property
    def kept(self) -> int:
        """Rows of subtransactions that did not roll back."""
        return sum(n for sub, n in self.counts.items() if sub not in self.aborted)

    def read(self, window: int, commit_ms: int) -> Iterator[ChangeBatch]:
        starts, subs = (np.array(v, np.int64) for v in zip(*self.marks, strict=True))
        return self.spool.read(window, commit_ms, np.array(sorted(self.aborted), np.int64), (starts, subs))
