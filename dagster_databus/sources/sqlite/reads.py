"""Consistent reads of a SQLite source's tables: in this process (one read transaction, with the txlog's
newest SCN), or cut into key ranges for tasks (``read_range`` reads one, on its own connection); fingerprints are
computed here from such a read.

Each range reads the txlog's high-water mark and its rows in one read transaction, so its rows are
the table exactly at that SCN (``RangeRead`` says why the union of ranges read at different SCNs is
exact). The tasks open the database file by its path: it must be readable there from every Spark
executor, which holds for local Spark and for a cluster on the database's machine.

A refresh filter (``RowSelection.where``) runs as ``sources.filters`` rendered it, never as typed, and on a
connection whose authorizer (``reading_only``) lets its statements read the table being read and call the
filter's allowed functions, nothing else: no other table, no ATTACH, no PRAGMA, no other function.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import ALL_ROWS, KeyRange, RangeRead, RangeSpec, RowSelection, TableRead
from dagster_databus.sources.filters import Filter
from dagster_databus.sources.generic.reads import KeyedReads, KeyedTable, StreamedFingerprints, page_rows, spec_of
from dagster_databus.sources.keys import row_key
from dagster_databus.sources.sqlite.catalog import SqliteCatalog
from dagster_databus.sources.sqlite.database import SqliteDatabase, high_water_mark
from dagster_databus.sources.sqlite.dialect import READS
from dagster_databus.sources.sqlite.text import named_invalid_text, naming_invalid_text
from dagster_databus.sources.sqlite.types import read_expression, sqlite_value


@dataclass(frozen=True)
class SqliteRangeSpec(RangeSpec):
    """A SQLite range's task opens the database file at ``path`` (the same on every executor)."""

    path: str
    busy_timeout_s: float


class SqliteReads(StreamedFingerprints):
    """Bootstrap reads of the source's tables, in this process or cut into key ranges for tasks."""

    def __init__(self, database: SqliteDatabase, catalog: SqliteCatalog) -> None:
        self.database = database
        self.catalog = catalog
        self.config = database.config
        self.name = database.name

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """Key ranges each read in its own read transaction with the txlog high-water mark it sees."""
        schema = self.catalog.schemas()[table]
        with closing(self.database.connect()) as conn, naming_invalid_text(conn, schema, f"bootstrap of {table}"):
            ranges = key_ranges(conn, table, schema.primary_key, rows_per_range, rows, schema.column_names, first)
        spec = SqliteRangeSpec(path=str(Path(self.config.path).resolve()),
                               busy_timeout_s=self.config.busy_timeout_ms / 1000, page_rows=page_rows(rows_per_range))
        return RangeRead("sqlite", self.name, schema, spec, ranges, scn=None, where=rows.where)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        """Check the filter (``sources.filters``) and prepare the selection's query (no row is read): SQLite names
        what its own check finds."""
        with closing(self.database.connect()) as conn:
            schema = self.catalog.schemas()[table]
            where = sqlite_filter(table, schema.column_names, rows.where)
            with reading_only(conn, table, where):
                _keyed(conn, table, schema.primary_key, where).check(rows)

    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead:
        batch_rows = batch_rows or 50_000
        schema = self.catalog.schemas()[table]
        conn = self.database.connect()
        # One read transaction: the txlog high-water mark and the table's rows come from
        # the same database state, so the read is exactly the source at that SCN.
        conn.execute("BEGIN")
        scn = high_water_mark(conn)
        columns = ", ".join(read_expression(c) for c in schema.columns)
        order = ", ".join(quote_ansi(k) for k in schema.primary_key)
        cursor = conn.execute(f"SELECT {columns} FROM {quote_ansi(table)} ORDER BY {order}")
        convert = schema.batch(sqlite_value, f"bootstrap of {table}")

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                while rows := cursor.fetchmany(batch_rows):
                    yield convert(rows)
            finally:
                conn.execute("COMMIT")
                conn.close()

        return TableRead(scn=scn, schema=schema, batches=named_invalid_text(
            batches(), schema, f"bootstrap of {table}", self.database.connect))


def sqlite_filter(table: str, columns: Sequence[str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for SQLite, naming ``columns`` of ``table`` (None: no filter)."""
    return READS.filter(table, READS.quoted(columns), where)


# Functions the product's own select list may call around a column (typeof, to read text carried as bytes):
# each looks at its argument alone.
_READ_FUNCTIONS = frozenset({"typeof"})


@contextmanager
def reading_only(conn: sqlite3.Connection, table: str, where: Filter | None) -> Iterator[None]:
    """While a filtered read runs on ``conn``, statements prepared on it may read ``table`` of the main database
    and call the filter's functions, and do nothing else (SQLite's authorizer): a second fence behind the
    filter's own check. Without a filter, nothing changes."""
    if where is None:
        yield
        return
    conn.set_authorizer(_only(table, where.functions | _READ_FUNCTIONS))
    try:
        yield
    finally:
        conn.set_authorizer(None)


def _only(table: str, functions: frozenset[str]) -> Callable[[int, str | None, str | None, str | None,
                                                                str | None], int]:
    """The authorizer of ``reading_only``: SELECT, reads of ``table``'s columns, calls of ``functions``."""
    def authorize(action: int, arg1: str | None, arg2: str | None, database: str | None, _: str | None) -> int:
        if action == sqlite3.SQLITE_SELECT:
            return sqlite3.SQLITE_OK
        # SQLite names no database for a read it makes of the table's own index for IN (...).
        if action == sqlite3.SQLITE_READ and database in ("main", None) and (arg1 or "").lower() == table.lower():
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in functions:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY  # another table, ATTACH, PRAGMA, another function, any write

    return authorize


def _keyed(conn: sqlite3.Connection, table: str, key: Sequence[str], chosen: Filter | None) -> KeyedReads:
    return KeyedReads(READS, conn.cursor(), KeyedTable(table, quote_ansi(table), tuple(map(quote_ansi, key)), chosen))


def key_ranges(conn: sqlite3.Connection, table: str, key: Sequence[str], rows_per_range: int,
               rows: RowSelection = ALL_ROWS, columns: Sequence[str] = (), first: int | None = None
               ) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` of the selected rows (``keys.split_keys``); a filter may name
    ``columns``."""
    where = sqlite_filter(table, columns, rows.where)
    with reading_only(conn, table, where):
        return _keyed(conn, table, key, where).ranges(rows_per_range, rows.keys, first)


def read_range(read: RangeRead, index: int) -> TableRead:
    """Range ``index`` of ``read``, with the txlog high-water mark of the same read transaction."""
    spec, schema, where = spec_of(read, SqliteRangeSpec), read.schema, read.ranges[index]
    try:
        conn = sqlite3.connect(f"file:{spec.path}?mode=rw", uri=True, isolation_level=None,
                               timeout=spec.busy_timeout_s)
        conn.execute("BEGIN")
        position = Scn(conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0])
    except sqlite3.Error as exc:
        raise SourceUnavailableError(
            f"source {read.source!r}: a task could not read {spec.path}: {exc}",
            "the SQLite file must be readable at the same path from every Spark executor; run the spark engine "
            "on the database's machine, or set merge.engine: local", source=read.source,
            transient="locked" in str(exc)) from None  # a busy writer passes; a missing file does not
    columns = ", ".join(read_expression(c) for c in schema.columns)
    key_index = [schema.column_names.index(k) for k in schema.primary_key]
    convert = schema.batch(sqlite_value, f"bootstrap of {schema.table}")
    try:
        chosen = sqlite_filter(schema.table, schema.column_names, read.where)
    except BaseException:
        conn.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            with reading_only(conn, schema.table, chosen):
                pages = _keyed(conn, schema.table, schema.primary_key, chosen).pages(
                    columns, spec.page_rows, where, row_key(key_index))
                for rows in pages:
                    yield convert(rows)
        finally:
            conn.close()

    return TableRead(scn=position, schema=schema, batches=named_invalid_text(
        batches(), schema, f"bootstrap of {schema.table}",
        lambda: sqlite3.connect(f"file:{spec.path}?mode=rw", uri=True, timeout=spec.busy_timeout_s)))
