"""Reading a SQLite table by primary-key ranges, each range on its own connection (a task's).

Each range reads the txlog's high-water mark and its rows in one read transaction, so its rows are
the table exactly at that SCN (``RangeRead`` says why the union of ranges read at different SCNs is
exact). The tasks open the database file by its path: it must be readable there from every Spark
executor, which holds for local Spark and for a cluster on the database's machine.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from dagster_databus.core.identifiers import quote_sqlite
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import (
    ALL_ROWS,
    KeyRange,
    RangeRead,
    RowSelection,
    TableSnapshot,
    key_clause,
    keyset_pages,
    row_key,
    split_keys,
)


def key_ranges(conn: sqlite3.Connection, table: str, key: Sequence[str], rows_per_range: int,
               rows: RowSelection = ALL_ROWS) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` of the selected rows (``base.split_keys``)."""
    cols = ", ".join(quote_sqlite(k) for k in key)
    marks = ", ".join("?" * len(key))

    def key_at(after: tuple[Any, ...] | None, n: int) -> tuple[Any, ...] | None:
        where, params = key_clause(cols, marks, KeyRange(after, rows.keys.through), rows.where)
        return conn.execute(f"SELECT {cols} FROM {quote_sqlite(table)} {where}ORDER BY {cols} LIMIT 1 OFFSET ?",
                            (*params, n)).fetchone()

    return split_keys(key_at, rows_per_range, rows.keys)


def check_selection(conn: sqlite3.Connection, table: str, key: Sequence[str], rows: RowSelection) -> None:
    """Prepare the selection's query (no row is read): SQLite names an unknown column or a syntax error."""
    where, params = key_clause(", ".join(quote_sqlite(k) for k in key), ", ".join("?" * len(key)), rows.keys,
                               rows.where)
    try:
        conn.execute(f"SELECT 1 FROM {quote_sqlite(table)} {where}LIMIT 0", params).fetchall()
    except sqlite3.Error as exc:
        raise ConfigError("snapshot.where", f"SQLite cannot select {rows.describe()} of {table!r}: {exc}",
                          "write the condition in SQLite's SQL, naming the table's columns") from None


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read``, with the txlog high-water mark of the same read transaction."""
    from dagster_databus.sources.sqlite.types import sqlite_value

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
            "on the database's machine, or set merge.engine: local", source=read.source) from None
    columns = ", ".join(quote_sqlite(c.name) for c in schema.columns)
    cols = ", ".join(quote_sqlite(k) for k in key)
    marks = ", ".join("?" * len(key))
    key_index = [schema.column_names.index(k) for k in key]
    convert = schema.batch(sqlite_value, f"bootstrap of {schema.table}")

    def page(keys: KeyRange) -> list[Any]:
        clause, params = key_clause(cols, marks, keys, read.where)
        return conn.execute(f"SELECT {columns} FROM {quote_sqlite(schema.table)} {clause}ORDER BY {cols} LIMIT ?",
                            (*params, page_rows)).fetchall()

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for rows in keyset_pages(page, where, row_key(key_index), page_rows):
                yield convert(rows)
        finally:
            conn.close()

    return TableSnapshot(scn=position, schema=schema, batches=batches())
