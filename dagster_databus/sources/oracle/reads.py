"""Consistent reads of an Oracle source's tables, ``AS OF`` one database SCN: in this process by keyset pages,
or cut into key ranges for tasks (``read_range`` reads one, on its own connection), every range ``AS OF SCN`` the
same SCN, so the union of the ranges is exactly the table at that SCN; fingerprints are computed here from such
a read.

A refresh filter (``RowSelection.where``) runs as ``sources.filters`` rendered it from its parsed tree, with
its text literals as binds ``:w0, :w1, ...``, never as typed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.sources.base import ALL_KEYS, ALL_ROWS, KeyRange, RangeRead, RangeSpec, RowSelection, TableRead
from dagster_databus.sources.filters import Filter
from dagster_databus.sources.generic.reads import KeyedReads, KeyedTable, StreamedFingerprints, page_rows, spec_of
from dagster_databus.sources.oracle.catalog import OracleCatalog
from dagster_databus.sources.oracle.dialect import READS
from dagster_databus.sources.oracle.sql import quote
from dagster_databus.sources.oracle.stream import current_scn
from dagster_databus.sources.oracle.types import oracle_value

if TYPE_CHECKING:
    import oracledb


@dataclass(frozen=True)
class OracleRangeSpec(RangeSpec):
    """An Oracle range's task connects with ``connection`` (user, password, dsn) and reads ``table`` (quoted) by
    ``key`` (quoted), selecting ``columns`` ((quoted column, declared type) in schema order)."""

    connection: Mapping[str, Any] = field(repr=False)  # holds the password
    table: str
    key: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]


class OracleReads(StreamedFingerprints):
    """Flashback reads of the source's tables, in this process or cut into key ranges for tasks."""

    def __init__(self, catalog: OracleCatalog) -> None:
        self.catalog = catalog
        self.config = catalog.config
        self.name = catalog.name

    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead:
        """A flashback read ``AS OF SCN`` of the database SCN now, by primary-key keyset pages, on one connection."""
        batch_rows = batch_rows or self.config.bootstrap_chunk_rows
        schema = self.catalog.preflight()[table]
        mapping = self.catalog.columns(table)
        conn = self.catalog.connect()
        with closing(conn.cursor()) as cur:
            scn = current_scn(cur)
        actual = self.catalog.table(table)
        keys = [quote(mapping[k]) for k in schema.primary_key]
        # The raw key columns trail the exact-value expressions: keyset paging binds them as they are.
        select = ", ".join([self.catalog.select_list(table, schema.column_names), *keys])
        convert = schema.batch(oracle_value, f"bootstrap of {table} as of SCN {scn.value}")
        batches = pages_as_of(conn, table, actual, select, keys, scn.value, batch_rows, ALL_KEYS, None,
                              len(schema.columns), convert)
        return TableRead(scn=scn, schema=schema, batches=batches)

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """Key ranges of the table as of the database SCN now; every range is read as of that SCN."""
        schema = self.catalog.preflight()[table]
        mapping = self.catalog.columns(table)
        actual = self.catalog.table(table)
        keys = [quote(mapping[k]) for k in schema.primary_key]
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            scn = current_scn(cur)
            chosen = oracle_filter(actual, self.catalog.quoted_columns(table), rows.where)
            ranges = _keyed(cur, table, actual, keys, chosen, scn.value).ranges(rows_per_range, rows.keys, first)
        c = self.config
        spec = OracleRangeSpec(connection={"user": c.user, "password": c.resolved_password(), "dsn": c.dsn},
                               table=actual, key=tuple(keys), page_rows=page_rows(rows_per_range),
                               columns=tuple((quote(mapping[col.name]), col.source_type) for col in schema.columns))
        return RangeRead("oracle", self.name, schema, spec, ranges, scn=scn, where=rows.where)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.catalog.preflight()[table]
        actual = self.catalog.table(table)
        keys = [quote(self.catalog.columns(table)[k]) for k in schema.primary_key]
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            chosen = oracle_filter(actual, self.catalog.quoted_columns(table), rows.where)
            KeyedReads(READS, cur, KeyedTable(table, actual, tuple(keys), chosen, shown=actual)).check(rows)


def oracle_filter(table: str, columns: Mapping[str, str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for Oracle (None: no filter); ``table`` as named or quoted,
    ``columns`` maps the snapshot's column names to their quoted dictionary names."""
    return READS.filter(table.strip('"'), columns, where)


def _keyed(cursor: oracledb.Cursor, name: str, table: str, keys: Sequence[str], chosen: Filter | None,
           scn: int) -> KeyedReads:
    """The key-range queries of ``table`` (quoted) as of ``scn`` on ``cursor``."""
    return KeyedReads(READS, cursor, KeyedTable(name, f"{table} AS OF SCN :scn", tuple(keys), chosen,
                                                binds={"scn": scn}, shown=table))


def read_range(read: RangeRead, index: int) -> TableRead:
    """Range ``index`` of ``read`` as of ``read.scn``."""
    import oracledb

    from dagster_databus.sources.oracle.types import output_type_handler, select_expression

    assert read.scn is not None  # Oracle ranges always read at one SCN
    spec, schema, where = spec_of(read, OracleRangeSpec), read.schema, read.ranges[index]
    # The raw key columns trail the exact-value expressions: keyset paging binds them as they are.
    exact = [select_expression(quoted, declared, quoted) for quoted, declared in spec.columns]
    select, scn = ", ".join([*exact, *spec.key]), read.scn.value
    convert = schema.batch(oracle_value, f"bootstrap of {schema.table} as of SCN {scn}")
    quoted = dict(zip(schema.column_names, (q for q, _ in spec.columns), strict=True))
    chosen = oracle_filter(schema.table, quoted, read.where)  # checked again where it runs
    conn = oracledb.connect(**spec.connection)
    conn.outputtypehandler = output_type_handler
    batches = pages_as_of(conn, schema.table, spec.table, select, spec.key, scn, spec.page_rows, where, chosen,
                          len(schema.columns), convert)
    return TableRead(scn=read.scn, schema=schema, batches=batches)


def pages_as_of(conn: oracledb.Connection, name: str, table: str, select: str, keys: Sequence[str], scn: int,
                page: int, start: KeyRange, predicate: Filter | None, width: int,
                convert: Callable[[list[Any]], pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` (quoted) as of SCN ``scn`` in key range ``start`` (and ``predicate``), ``page``
    rows per query in key order, converted. ``select`` lists ``width`` exact-value expressions and then the
    raw key columns ``keys``, which keyset paging binds as they are and ``convert`` leaves out. The
    connection closes when the reader is done (or stops early)."""
    cur = conn.cursor()
    try:
        for rows in _keyed(cur, name, table, keys, predicate, scn).pages(select, page, start,
                                                                          lambda row: tuple(row[width:])):
            yield convert(rows)
    finally:
        cur.close()
        conn.close()
