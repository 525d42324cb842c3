"""Reading a SQLite table by primary-key ranges, each range on its own connection (a task's).

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
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import ALL_ROWS, KeyRange, RangeRead, RowSelection, TableSnapshot
from dagster_databus.sources.filters import Filter, filter_for, select_clause
from dagster_databus.sources.keys import keyset_pages, row_key, split_keys
from dagster_databus.sources.sqlite.dialect import FILTERS


def sqlite_filter(table: str, columns: Sequence[str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for SQLite, naming ``columns`` of ``table`` (None: no filter)."""
    return filter_for(where, FILTERS, table, {c: quote_ansi(c) for c in columns})


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


def key_ranges(conn: sqlite3.Connection, table: str, key: Sequence[str], rows_per_range: int,
               rows: RowSelection = ALL_ROWS, columns: Sequence[str] = (), first: int | None = None
               ) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` of the selected rows (``keys.split_keys``); a filter may name
    ``columns``."""
    cols = ", ".join(quote_ansi(k) for k in key)
    marks = ", ".join("?" * len(key))
    where = sqlite_filter(table, columns, rows.where)

    def key_at(after: tuple[Any, ...] | None, n: int) -> tuple[Any, ...] | None:
        clause, params = select_clause(cols, marks, KeyRange(after, rows.keys.through), where)
        query = f"SELECT {cols} FROM {quote_ansi(table)} {clause}ORDER BY {cols} LIMIT 1 OFFSET ?"
        row: tuple[Any, ...] | None = conn.execute(query, (*params, n)).fetchone()
        return row

    with reading_only(conn, table, where):
        return split_keys(key_at, rows_per_range, rows.keys, first)


def check_selection(conn: sqlite3.Connection, table: str, key: Sequence[str], rows: RowSelection,
                    columns: Sequence[str] = ()) -> None:
    """Check the filter (``sources.filters``) and prepare the selection's query (no row is read): SQLite names
    what its own check finds."""
    where = sqlite_filter(table, columns, rows.where)
    clause, params = select_clause(", ".join(quote_ansi(k) for k in key), ", ".join("?" * len(key)), rows.keys,
                                   where)
    try:
        with reading_only(conn, table, where):
            conn.execute(f"SELECT 1 FROM {quote_ansi(table)} {clause}LIMIT 0", params).fetchall()
    except sqlite3.Error as exc:
        raise ConfigError("snapshot.where", f"SQLite cannot select {rows.describe()} of {table!r}: {exc}",
                          "write the condition in SQLite's SQL, naming the table's columns") from None


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read``, with the txlog high-water mark of the same read transaction."""
    from dagster_databus.sources.sqlite.text import named_invalid_text
    from dagster_databus.sources.sqlite.types import read_expression, sqlite_value

    spec, schema, where = read.spec, read.schema, read.ranges[index]
    key, page_rows = schema.primary_key, int(spec["page_rows"])
    try:
        conn = sqlite3.connect(f"file:{spec['path']}?mode=rw", uri=True, isolation_level=None,
                               timeout=float(spec["busy_timeout_s"]))
        conn.execute("BEGIN")
        position = Scn(conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0])
    except sqlite3.Error as exc:
        raise SourceUnavailableError(
            f"source {read.source!r}: a task could not read {spec['path']}: {exc}",
            "the SQLite file must be readable at the same path from every Spark executor; run the spark engine "
            "on the database's machine, or set merge.engine: local", source=read.source,
            transient="locked" in str(exc)) from None  # a busy writer passes; a missing file does not
    columns = ", ".join(read_expression(c) for c in schema.columns)
    cols = ", ".join(quote_ansi(k) for k in key)
    marks = ", ".join("?" * len(key))
    key_index = [schema.column_names.index(k) for k in key]
    convert = schema.batch(sqlite_value, f"bootstrap of {schema.table}")
    try:
        chosen = sqlite_filter(schema.table, schema.column_names, read.where)
    except BaseException:
        conn.close()
        raise

    def page(keys: KeyRange) -> list[Any]:
        clause, params = select_clause(cols, marks, keys, chosen)
        return conn.execute(f"SELECT {columns} FROM {quote_ansi(schema.table)} {clause}ORDER BY {cols} LIMIT ?",
                            (*params, page_rows)).fetchall()

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            with reading_only(conn, schema.table, chosen):
                for rows in keyset_pages(page, where, row_key(key_index), page_rows):
                    yield convert(rows)
        finally:
            conn.close()

    return TableSnapshot(scn=position, schema=schema, batches=named_invalid_text(
        batches(), schema, f"bootstrap of {schema.table}",
        lambda: sqlite3.connect(f"file:{spec['path']}?mode=rw", uri=True, timeout=float(spec["busy_timeout_s"]))))
