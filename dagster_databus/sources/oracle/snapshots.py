"""Consistent reads of an Oracle source's tables, ``AS OF`` one database SCN: in this process by keyset pages,
or cut into key ranges for tasks (``bootstrap.read_range`` reads one); fingerprints are computed here from such
a read."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing

from dagster_databus.core.progress import Progress, quiet
from dagster_databus.sources.base import ALL_KEYS, ALL_ROWS, RangeRead, RowSelection, SourceFingerprint, TableSnapshot
from dagster_databus.sources.fingerprints import in_buckets, streamed_fingerprint
from dagster_databus.sources.oracle.bootstrap import check_selection, key_ranges, pages_as_of
from dagster_databus.sources.oracle.catalog import OracleCatalog
from dagster_databus.sources.oracle.poll import current_scn
from dagster_databus.sources.oracle.sql import quote
from dagster_databus.sources.oracle.types import oracle_value


class OracleSnapshots:
    """Flashback reads of the source's tables, in this process or cut into key ranges for tasks."""

    def __init__(self, catalog: OracleCatalog) -> None:
        self.catalog = catalog
        self.config = catalog.config
        self.name = catalog.name

    def snapshot(self, table: str, batch_rows: int | None = None) -> TableSnapshot:
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
        batches = pages_as_of(conn, actual, select, keys, scn.value, batch_rows, ALL_KEYS, None, len(schema.columns),
                              convert)
        return TableSnapshot(scn=scn, schema=schema, batches=batches)

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """Key ranges of the table as of the database SCN now; every range is read as of that SCN."""
        schema = self.catalog.preflight()[table]
        mapping = self.catalog.columns(table)
        actual = self.catalog.table(table)
        keys = [quote(mapping[k]) for k in schema.primary_key]
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            scn = current_scn(cur)
            ranges = key_ranges(cur, actual, keys, scn.value, rows_per_range, rows,
                                self.catalog.quoted_columns(table), first)
        c = self.config
        spec = {"connection": {"user": c.user, "password": c.resolved_password(), "dsn": c.dsn},
                "table": actual, "key": keys, "page_rows": min(rows_per_range, 10_000),
                "columns": [[quote(mapping[col.name]), col.source_type] for col in schema.columns]}
        return RangeRead("oracle", self.name, schema, spec, ranges, scn=scn, where=rows.where)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.catalog.preflight()[table]
        keys = [quote(self.catalog.columns(table)[k]) for k in schema.primary_key]
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            check_selection(cur, self.catalog.table(table), keys, rows, self.catalog.quoted_columns(table))

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return streamed_fingerprint(self.snapshot(table), progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        return in_buckets(self.snapshot(table), buckets)
