"""Consistent reads of a PostgreSQL source's tables: in this process (the local engine's bootstrap,
reconciliation), or cut into key ranges for tasks (``bootstrap.read_range`` reads one); each at the exact LSN
of a snapshot exported with a temporary slot (``bootstrap`` says why that is exact). Fingerprints are
computed here from such a read (``sources.fingerprints``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any

import pyarrow as pa

from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.scn import Scn
from dagster_databus.sources.base import ALL_KEYS, ALL_ROWS, RangeRead, RowSelection, SourceFingerprint, TableSnapshot
from dagster_databus.sources.fingerprints import in_buckets, streamed_fingerprint
from dagster_databus.sources.postgres.bootstrap import (
    SnapshotLease,
    TableQueries,
    begin_at,
    copied,
    exported_snapshot,
    postgres_filter,
)
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import Connection, PostgresConnector
from dagster_databus.sources.postgres.slots import settled_scn


class PostgresSnapshots:
    """Bootstrap reads of the source's tables, in this process or cut into key ranges for tasks."""

    def __init__(self, connector: PostgresConnector, catalog: PostgresCatalog) -> None:
        self.connector = connector
        self.catalog = catalog
        self.config = connector.config
        self.name = connector.name

    def snapshot(self, table: str, batch_rows: int | None = None) -> TableSnapshot:
        """A keyset-paginated read of ``table`` on one connection, at the exported snapshot's LSN."""
        batch_rows = batch_rows or self.config.bootstrap_chunk_rows
        schema = self.catalog.preflight()[table]  # the live shape: the read below sees it
        exported = exported_snapshot(self.connector.spec(), self.config.snapshot_wait_s)
        try:
            conn = self.connector.connect()
        except BaseException:
            exported.close()
            raise
        scn = self._settled(conn, exported.scn)
        cur = begin_at(conn, exported.name)
        queries = TableQueries(self.config.schema_, schema)

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                yield from copied(cur, queries, ALL_KEYS, None, batch_rows, f"bootstrap of {table}")
            finally:
                conn.close()
                exported.close()

        return TableSnapshot(scn=scn, schema=schema, batches=batches())

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """Key ranges that tasks read, all in one exported snapshot. The snapshot (and its temporary slot) lives
        as long as the returned read or a copy of it (``bootstrap.SnapshotLease``)."""
        schema = self.catalog.preflight()[table]
        chosen = postgres_filter(table, schema.column_names, rows.where)
        exported = exported_snapshot(self.connector.spec(), self.config.snapshot_wait_s)
        try:
            with closing(self.connector.connect()) as conn:
                scn = self._settled(conn, exported.scn)
                cur = begin_at(conn, exported.name)
                ranges = TableQueries(self.config.schema_, schema).ranges(cur, rows_per_range, rows, chosen, first)
        except BaseException:
            exported.close()
            raise
        spec: dict[str, Any] = {"connection": self.connector.spec(), "schema": self.config.schema_,
                                "snapshot": exported.name, "page_rows": min(rows_per_range, 10_000),
                                "lease": SnapshotLease(exported)}
        return RangeRead("postgres", self.name, schema, spec, ranges, scn=scn, where=rows.where)

    def _settled(self, conn: Connection, consistent: Scn) -> Scn:
        return settled_scn(conn, self.config.slot_name, self.config.publication_name, consistent)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.catalog.preflight()[table]
        chosen = postgres_filter(table, schema.column_names, rows.where)
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            TableQueries(self.config.schema_, schema).check(cur, rows, chosen)

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return streamed_fingerprint(self.snapshot(table), progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        return in_buckets(self.snapshot(table), buckets)
