"""Consistent reads of a SQLite source's tables: in this process (one read transaction, with the txlog's
newest SCN), or cut into key ranges for tasks (``bootstrap.read_range`` reads one); fingerprints are computed
here from such a read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path

import pyarrow as pa

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.sources.base import ALL_ROWS, RangeRead, RowSelection, SourceFingerprint, TableSnapshot
from dagster_databus.sources.fingerprints import in_buckets, streamed_fingerprint
from dagster_databus.sources.sqlite.bootstrap import check_selection, key_ranges
from dagster_databus.sources.sqlite.catalog import SqliteCatalog
from dagster_databus.sources.sqlite.database import SqliteDatabase, high_water_mark
from dagster_databus.sources.sqlite.text import named_invalid_text, naming_invalid_text
from dagster_databus.sources.sqlite.types import read_expression, sqlite_value


class SqliteSnapshots:
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
        spec = {"path": str(Path(self.config.path).resolve()), "busy_timeout_s": self.config.busy_timeout_ms / 1000,
                "page_rows": min(rows_per_range, 10_000)}
        return RangeRead("sqlite", self.name, schema, spec, ranges, scn=None, where=rows.where)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        with closing(self.database.connect()) as conn:
            schema = self.catalog.schemas()[table]
            check_selection(conn, table, schema.primary_key, rows, schema.column_names)

    def snapshot(self, table: str, batch_rows: int | None = None) -> TableSnapshot:
        batch_rows = batch_rows or 50_000
        schema = self.catalog.schemas()[table]
        conn = self.database.connect()
        # One read transaction: the txlog high-water mark and the table's rows come from
        # the same database state, so the snapshot is exactly the source at that SCN.
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

        return TableSnapshot(scn=scn, schema=schema, batches=named_invalid_text(
            batches(), schema, f"bootstrap of {table}", self.database.connect))

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return streamed_fingerprint(self.snapshot(table), progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        return in_buckets(self.snapshot(table), buckets)
