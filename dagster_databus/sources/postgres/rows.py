"""A published table's change rows in one poll of a PostgreSQL slot: decoded tuples converted into Arrow
columns every ``FLUSH_ROWS`` rows, the committed transactions' rows taken as a change batch's record batch, and
an open transaction's rows taken out whole when they are too many to hold (``stream.SPOOL_ROWS``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter

import numpy as np
import pyarrow as pa

from dagster_databus.core.batch import table_rows
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import SchemaDriftError
from dagster_databus.sources.postgres.pgoutput import lsn_text
from dagster_databus.sources.postgres.tuples import UNCHANGED, Tuple
from dagster_databus.sources.postgres.types import text_converter

# Rows of a table held as decoded tuples before they are converted into Arrow columns.
FLUSH_ROWS = 10_000


class TableRows:
    """A table in one poll: its schema (from a relation message) and its events so far, as Arrow arrays of
    converted rows, column by column, and the rows not converted yet; the windows (transactions) of the committed
    ones, in order. The open transaction's rows are the tail past them."""

    def __init__(self, schema: TableSchema, names: Sequence[str]) -> None:
        assert list(names) == schema.column_names, f"{schema.table}: tuples hold {names}"  # as catalog.build keeps
        self.schema = schema
        key = [schema.column_names.index(k) for k in schema.primary_key]
        # A row's key, as one value or a tuple of them: compared in C, for each update.
        self.key_of: Callable[[Tuple], object] = itemgetter(*key) if key else lambda row: ()
        self.width = len(names)
        self.columns: list[list[pa.Array]] = [[] for _ in range(self.width + 2)]  # the table's, __op, __seq
        self.rows: list[Tuple] = []
        self.ops: list[str] = []
        self.seqs: list[int] = []
        self.starts: list[tuple[int, int]] = []  # (first row, commit LSN) of each transaction in ``rows``
        self.windows: list[tuple[int, int, int]] = []  # (rows, window SCN, commit ms) per committed transaction
        self.held = 0  # rows held, converted or not
        self.committed = 0  # of which the windows cover

    @property
    def open(self) -> bool:
        return self.held > self.committed

    def add(self, op: str, row: Tuple, seq: int, lsn: int) -> None:
        if not self.starts or self.starts[-1][1] != lsn:
            self.starts.append((len(self.rows), lsn))
        self.rows.append(row)
        self.ops.append(op)
        self.seqs.append(seq)
        self.held += 1
        if len(self.rows) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """The unconverted rows into Arrow arrays, each value by the converter a bootstrap uses."""
        if not self.rows:
            return
        try:
            data = self.schema.batch(text_converter, "")(self.rows)
        except Exception:  # a value refused: converted again by transaction, the error names the one holding it
            for (first, lsn), (end, _) in zip(self.starts, [*self.starts[1:], (len(self.rows), 0)], strict=True):
                where = (f"the change events of the transaction committed at LSN {lsn_text(lsn)}" if lsn
                         else "the change events of a transaction streamed before its commit")
                self.schema.batch(text_converter, where)(self.rows[first:end])
            raise
        for parts, array in zip(self.columns, [*data.columns, pa.array(self.ops), pa.array(self.seqs, pa.int32())],
                                strict=True):
            parts.append(array)
        self.rows, self.ops, self.seqs, self.starts = [], [], [], []

    def commit(self, window: int, commit_ms: int) -> int:
        """The open transaction's rows (how many) belong to window ``window``."""
        rows = self.held - self.committed
        if rows:
            self.windows.append((rows, window, commit_ms))
            self.committed = self.held
        return rows

    def untoasted(self, new: Tuple, old: Tuple | None, source: str) -> Tuple:
        """An update's new row with each unchanged TOASTed value taken from the old row, which only REPLICA IDENTITY
        FULL sends (install sets it on tables that have such columns)."""
        values = list(new)
        for i, value in enumerate(new):
            if value is UNCHANGED:
                if old is None or old[i] is UNCHANGED:
                    table, name = self.schema.table, self.schema.column_names[i]
                    raise SchemaDriftError(
                        f"an update of table {table!r} of source {source!r} left column {name!r} unchanged and out of "
                        "line (TOAST), and the server sent no old row to take its value from: the table's REPLICA "
                        "IDENTITY was not FULL when it was written",
                        f"run `databus install --source {source}` (it sets REPLICA IDENTITY FULL), then "
                        f"`databus bootstrap --source {source}`", source=source, table=table)
                values[i] = old[i]
        return tuple(values)

    def take(self) -> pa.RecordBatch | None:
        """The committed rows as the table's record batch in a change batch; the open transaction's stay."""
        if not self.committed:
            return None
        rows = self._split(self.committed)
        counts, scns, commits = (np.array(v, np.int64) for v in zip(*self.windows, strict=True))
        window, commit = pa.array(np.repeat(scns, counts)), pa.array(np.repeat(commits, counts))
        first, last = self.windows[0][1], self.windows[-1][1]
        self.held, self.committed, self.windows = self.held - self.committed, 0, []
        return change_rows(self.schema, rows, window, commit, f"the change events of SCN {first} to {last}")

    def take_open(self) -> list[pa.Array] | None:
        """The open transaction's rows, taken out: the table's columns, then ``__op`` and ``__seq``."""
        if not self.open:
            return None
        committed = self._split(self.committed)  # the columns now hold the open rows alone
        tail = [parts[0] for parts in self.columns]
        self.columns = [[column] if self.committed else [] for column in committed]
        self.held = self.committed
        return tail

    def _split(self, n: int) -> list[pa.Array]:
        """Every converted column whole (all rows held, flushed first); the first ``n`` rows of each are returned
        and the rest stay held."""
        self.flush()
        rows = []
        for i, parts in enumerate(self.columns):  # a column at a time, its parts let go as it is joined
            whole = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
            self.columns[i] = [whole.slice(n)] if len(whole) > n else []
            rows.append(whole if n >= len(whole) else whole.slice(0, n))
            if len(parts) > 1:
                del parts
                pa.default_memory_pool().release_unused()  # the parts' pages, not kept for arrays of their size
        return rows


def change_rows(schema: TableSchema, rows: Sequence[pa.Array], window: pa.Array, commit: pa.Array,
                where: str) -> pa.RecordBatch:
    """A table's record batch in a change batch, from its converted columns then ``__op`` and ``__seq``, with each
    row's window SCN (its ``__scn`` too: a transaction's events take its commit's) and commit time."""
    width = len(schema.columns)
    columns, (op, seq) = list(rows[:width]), rows[width:]
    return table_rows(schema, columns, scn=window, window_scn=window, seq=seq, op=op, commit_ts_ms=commit,
                      where=where)


def two_shapes(source: str, table: str, lsn: int) -> SchemaDriftError:
    """A transaction changed a table's columns between its row changes: one window cannot hold both shapes."""
    return SchemaDriftError(
        f"a transaction of source {source!r} changed table {table!r}'s columns between its row changes (at "
        f"{lsn_text(lsn)}): its window cannot hold both shapes", f"run `databus bootstrap --source {source}`",
        source=source, table=table)
