"""Reconciliation fingerprints of a MySQL table, computed by the server (``sql/mysql/fingerprint*.sql``).
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import SourceFingerprint, TableSnapshot
from dagster_databus.sources.fingerprints import in_background
from dagster_databus.sources.mysql.bootstrap import MysqlBootstrap
from dagster_databus.sources.mysql.types import bootstrap_value, fingerprint_part, select_expression


class MysqlFingerprint(MysqlBootstrap):
    """Fingerprints computed by the server, and the rows of chosen buckets."""

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        """Computed by the server in one aggregate query (``sql/mysql/fingerprint.sql``): no rows travel."""
        from dagster_databus.core.fingerprint import Fingerprint

        schema = self.preflight()[table]
        conn = self.connect()
        cur = conn.cursor()
        try:
            scn = self._read_only_snapshot(cur)
        except BaseException:
            conn.close()
            raise
        progress(f"{table}: the server computes the fingerprint at SCN {scn} (one aggregate query over the "
                 "whole table; it reports no progress of its own)")

        def work() -> Fingerprint:
            fingerprint = Fingerprint()
            try:
                cur.execute(self._fingerprint_sql("fingerprint.sql", schema))
                for bucket, rows, digest_sum in cur.fetchall():
                    fingerprint.add_bucket(int(bucket), int(rows), int(digest_sum))
                cur.execute("COMMIT")
            finally:
                conn.close()
            return fingerprint

        return SourceFingerprint(scn, schema, in_background(work), pushed_down=True)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        schema = self.preflight()[table]
        conn = self.connect()
        cur = conn.cursor()
        scn = self._read_only_snapshot(cur)
        cur.execute(self._fingerprint_sql("fingerprint_rows.sql", schema, buckets))
        convert = schema.batch(lambda c: bootstrap_value(c, self.config.zero_dates), f"reconciliation of {table}")

        pages = iter(lambda: cur.fetchmany(self.config.bootstrap_chunk_rows) or None, None)  # to an empty page
        return TableSnapshot(scn=scn, schema=schema, batches=self._batches_then_close(conn, cur, pages, convert))


    @staticmethod
    def _fingerprint_sql(name: str, schema: TableSchema, buckets: Sequence[int] = ()) -> str:
        parts = {c.name: fingerprint_part(c) for c in schema.columns}
        return sqlfiles.render(
            "mysql", name, table=f"`{schema.table}`",
            key_text=f"CONCAT({', '.join(parts[k] for k in schema.primary_key)})",
            row_text=f"CONCAT({', '.join(parts[c] for c in schema.column_names)})",
            columns=", ".join(select_expression(c) for c in schema.columns),
            buckets=", ".join(str(int(b)) for b in buckets) or "NULL")
