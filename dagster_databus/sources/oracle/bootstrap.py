"""Reading an Oracle table by primary-key ranges, each range on its own connection (a task's), every
range ``AS OF SCN`` the same SCN: the union of the ranges is exactly the table at that SCN.

A refresh filter (``RowSelection.where``) runs as ``sources.filters`` rendered it from its parsed tree, with
its text literals as binds ``:w0, :w1, ...``, never as typed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.errors import ConfigError
from dagster_databus.sources.base import ALL_ROWS, KeyRange, RangeRead, RowSelection, TableSnapshot
from dagster_databus.sources.filters import Filter, filter_for
from dagster_databus.sources.keys import keyset_pages, split_keys
from dagster_databus.sources.oracle.dialect import FILTERS
from dagster_databus.sources.oracle.sql import after_clause, through_clause

if TYPE_CHECKING:
    import oracledb


def oracle_filter(table: str, columns: Mapping[str, str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for Oracle (None: no filter); ``table`` as named or quoted,
    ``columns`` maps the snapshot's column names to their quoted dictionary names."""
    return filter_for(where, FILTERS, table.strip('"'), columns)


def key_ranges(cursor: oracledb.Cursor, table: str, keys: Sequence[str], scn: int, rows_per_range: int,
               rows: RowSelection = ALL_ROWS, columns: Mapping[str, str] | None = None, first: int | None = None
               ) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` of the selected rows of the table as of ``scn`` (``keys.split_keys``);
    a filter may name ``columns`` (``oracle_filter``)."""
    order = ", ".join(keys)
    chosen = oracle_filter(table, columns or {}, rows.where)

    def key_at(after: tuple[Any, ...] | None, n: int) -> tuple[Any, ...] | None:
        where, binds = selection_clause(keys, KeyRange(after, rows.keys.through), chosen)
        cursor.execute(f"SELECT {order} FROM {table} AS OF SCN :scn{where} ORDER BY {order} "
                       "OFFSET :n ROWS FETCH NEXT 1 ROWS ONLY", scn=scn, n=n, **binds)
        row: tuple[Any, ...] | None = cursor.fetchone()
        return row

    return split_keys(key_at, rows_per_range, rows.keys, first)


def selection_clause(keys: Sequence[str], where: KeyRange, predicate: Filter | None) -> tuple[str, dict[str, Any]]:
    """" WHERE ..." (or "") selecting the key range and the checked filter ``predicate``, with all binds (Oracle
    has no row-value comparison: ``oracle.sql.after_clause``)."""
    clauses: list[str] = []
    binds: dict[str, Any] = {}
    if where.after is not None:
        clauses.append(f"({after_clause(keys, 'a')})")
        binds |= {f"a{i}": v for i, v in enumerate(where.after)}
    if where.through is not None:
        clauses.append(through_clause(keys, "t"))
        binds |= {f"t{i}": v for i, v in enumerate(where.through)}
    if predicate is not None:
        clauses.append(f"({predicate.sql})")
        binds |= predicate.binds
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), binds


def check_selection(cursor: oracledb.Cursor, table: str, keys: Sequence[str], rows: RowSelection,
                    columns: Mapping[str, str] | None = None) -> None:
    """Check the filter (``sources.filters``) and run the selection's query on no rows: the database names what
    its own check finds."""
    import oracledb

    where, binds = selection_clause(keys, rows.keys, oracle_filter(table, columns or {}, rows.where))
    try:
        cursor.execute(f"SELECT 1 FROM {table}{where} FETCH FIRST 0 ROWS ONLY", **binds)
        cursor.fetchall()
    except oracledb.DatabaseError as exc:
        raise ConfigError("snapshot.where", f"Oracle cannot select {rows.describe()} of {table}: {exc}",
                          "write the condition in Oracle's SQL, naming the table's columns as Oracle knows them") \
            from None


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read`` as of ``read.scn``.

    ``read.spec``: ``connection`` (user, password, dsn), ``table`` and ``key`` (quoted), ``columns``
    ([[quoted column, declared type]] in schema order), ``page_rows``."""
    import oracledb

    from dagster_databus.sources.oracle.types import oracle_value, output_type_handler, select_expression

    assert read.scn is not None  # Oracle ranges always read at one SCN
    spec, schema, where = read.spec, read.schema, read.ranges[index]
    keys: list[str] = list(spec["key"])
    # The raw key columns trail the exact-value expressions: keyset paging binds them as they are.
    exact = [select_expression(quoted, declared, quoted) for quoted, declared in spec["columns"]]
    select, table, page, scn = ", ".join([*exact, *keys]), spec["table"], int(spec["page_rows"]), read.scn.value
    convert = schema.batch(oracle_value, f"bootstrap of {schema.table} as of SCN {scn}")
    quoted = dict(zip(schema.column_names, (q for q, _ in spec["columns"]), strict=True))
    chosen = oracle_filter(schema.table, quoted, read.where)  # checked again where it runs
    conn = oracledb.connect(**spec["connection"])
    conn.outputtypehandler = output_type_handler
    batches = pages_as_of(conn, table, select, keys, scn, page, where, chosen, len(schema.columns), convert)
    return TableSnapshot(scn=read.scn, schema=schema, batches=batches)


def pages_as_of(conn: oracledb.Connection, table: str, select: str, keys: Sequence[str], scn: int, page: int,
                start: KeyRange, predicate: Filter | None, width: int, convert: Callable[[list[Any]], pa.RecordBatch]
                ) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` (quoted) as of SCN ``scn`` in key range ``start`` (and ``predicate``), ``page``
    rows per query in key order, converted. ``select`` lists ``width`` exact-value expressions and then the
    raw key columns ``keys``, which keyset paging binds as they are and ``convert`` leaves out. The
    connection closes when the reader is done (or stops early)."""
    cur = conn.cursor()

    def fetch(keys_range: KeyRange) -> list[Any]:
        clause, binds = selection_clause(keys, keys_range, predicate)
        cur.execute(f"SELECT {select} FROM {table} AS OF SCN :scn{clause} ORDER BY {', '.join(keys)} "
                    "FETCH FIRST :n ROWS ONLY", {"scn": scn, "n": page, **binds})
        rows: list[Any] = cur.fetchall()
        return rows

    try:
        for rows in keyset_pages(fetch, start, lambda row: tuple(row[width:]), page):
            yield convert(rows)
    finally:
        cur.close()
        conn.close()
