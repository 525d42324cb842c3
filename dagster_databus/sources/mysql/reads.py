"""Consistent reads of a MySQL source's tables: in this process (the local engine's bootstrap), cut into key
ranges for tasks (``read_range`` reads one, on its own connection), and the reconciliation fingerprint, computed
by the server (``sql/mysql/fingerprint*.sql``). Watermark reads need the signal table, which install creates here.

The driver cuts the key space into ranges by walking the key index (keys only, keyset pagination).
On MariaDB each range opens its own ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, reads the
binlog position of that snapshot (``binlog_snapshot_file/position``) and reads its range by keyset
pages: the range's rows are the table at that position (``RangeRead`` says why the union is exact).
MySQL proper reports no such position: each range pins one with a watermark written to the signal
table (``snapshot_position``), or, with ``bootstrap_reads: lock``, the table is one range whose position
is pinned under a brief global read lock.

A refresh filter (``RowSelection.where``) runs as ``sources.filters`` rendered it from its parsed tree, its
text literals bound as parameters (so neither backslash escapes nor the server's sql_mode can change them),
never as typed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError, ConfigError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import (
    ALL_KEYS,
    ALL_ROWS,
    RangeRead,
    RangeSpec,
    RowSelection,
    SourceFingerprint,
    TableRead,
)
from dagster_databus.sources.filters import Filter
from dagster_databus.sources.fingerprints import in_background
from dagster_databus.sources.generic.reads import KeyedReads, KeyedTable, page_rows, spec_of
from dagster_databus.sources.keys import row_key
from dagster_databus.sources.mysql.catalog import MysqlCatalog
from dagster_databus.sources.mysql.connect import Connection, Cursor, MySQLError, Row
from dagster_databus.sources.mysql.dialect import READS
from dagster_databus.sources.mysql.servers import MysqlServers
from dagster_databus.sources.mysql.types import ZeroDates, bootstrap_value, fingerprint_part, select_expression
from dagster_databus.sources.mysql.versions import binlog_end

# The table watermark reads write a row to (``sql/mysql/signal.sql``; install creates it).
SIGNAL_TABLE = "_databus_signal"


@dataclass(frozen=True)
class MysqlRangeSpec(RangeSpec):
    """A MySQL range's task connects with ``connection`` (``MysqlReads.task_connection``) and pins its snapshot
    as ``reads`` (``bootstrap_reads`` resolved) says."""

    connection: Mapping[str, Any] = field(repr=False)  # holds the password
    zero_dates: ZeroDates
    era: int
    reads: str


class MysqlReads:
    """Bootstrap reads of the source's tables, in this process or cut into key ranges for tasks; fingerprints
    computed by the server, and the rows of chosen buckets."""

    def __init__(self, servers: MysqlServers, catalog: MysqlCatalog) -> None:
        self.servers = servers
        self.catalog = catalog
        self.config = servers.config
        self.name = servers.name

    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead:
        """A consistent, keyset-paginated read of ``table`` at a known binlog position, on one connection."""
        batch_rows = batch_rows or self.config.bootstrap_chunk_rows
        schema = self.catalog.preflight()[table]  # the live shape: the read below sees it
        conn = self.servers.connect()
        cur = conn.cursor()
        scn = self._read_only_snapshot(cur)
        columns = ", ".join(select_expression(c) for c in schema.columns)
        key_index = [schema.column_names.index(k) for k in schema.primary_key]
        convert = schema.batch(lambda c: bootstrap_value(c, self.config.zero_dates), f"bootstrap of {table}")
        pages = _keyed(cur, table, schema.primary_key, None).pages(columns, batch_rows, ALL_KEYS, row_key(key_index))
        return TableRead(scn=scn, schema=schema, batches=_batches_then_close(conn, cur, pages, convert))

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """Key ranges each read in its own consistent snapshot, pinned to a binlog position as
        ``bootstrap_reads`` says (``snapshot_position``); with ``lock`` the whole table is one
        range pinned under a brief global read lock."""
        schema = self.catalog.preflight()[table]
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            reads = self._bootstrap_reads(cur)
            # Under ``lock`` a bootstrap reads one range, pinned under the lock once; a verification's one slice is
            # pinned the same way whatever its bounds.
            ranges = (_selected(cur, table, schema, rows).ranges(rows_per_range, rows.keys, first)
                      if reads != "lock" or first is not None else (rows.keys,))
        spec = MysqlRangeSpec(connection=self.task_connection(), zero_dates=self.config.zero_dates,
                              era=self.servers.era, page_rows=page_rows(rows_per_range), reads=reads)
        return RangeRead("mysql", self.name, schema, spec, ranges, scn=None, where=rows.where)

    def task_connection(self) -> dict[str, Any]:
        """What a range's task connects with (``open_task_connection``): the active server's address, the
        login and the TLS settings (file paths: the files must be readable on the executors too), as plain
        data that travels in the Spark job."""
        return {**self.servers.connection_settings(), "database": self.config.database}

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.catalog.preflight()[table]
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            _selected(cur, table, schema, rows).check(rows)

    # -- fingerprints ------------------------------------------------------------------

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        """Computed by the server in one aggregate query (``sql/mysql/fingerprint.sql``): no rows travel."""
        from dagster_databus.core.fingerprint import Fingerprint

        schema = self.catalog.preflight()[table]
        conn = self.servers.connect()
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
                cur.execute(_fingerprint_sql("fingerprint.sql", schema))
                for bucket, rows, digest_sum in cur.fetchall():
                    fingerprint.add_bucket(int(bucket), int(rows), int(digest_sum))
                cur.execute("COMMIT")
            finally:
                conn.close()
            return fingerprint

        return SourceFingerprint(scn, schema, in_background(work), pushed_down=True)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableRead:
        schema = self.catalog.preflight()[table]
        conn = self.servers.connect()
        cur = conn.cursor()
        scn = self._read_only_snapshot(cur)
        cur.execute(_fingerprint_sql("fingerprint_rows.sql", schema, buckets))
        convert = schema.batch(lambda c: bootstrap_value(c, self.config.zero_dates), f"reconciliation of {table}")

        def pages() -> Iterator[list[Row]]:
            while page := cur.fetchmany(self.config.bootstrap_chunk_rows):  # to an empty page
                yield list(page)

        return TableRead(scn=scn, schema=schema, batches=_batches_then_close(conn, cur, pages(), convert))

    # -- how ranges are pinned to binlog positions -------------------------------------

    def install_signal_table(self) -> tuple[str, ...]:
        """Install's part for watermark reads: the signal table (``sql/mysql/signal.sql``), created when reads
        here are watermark reads and it is missing. The objects created."""
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            if self._reads_here(cur)[0] != "watermark" or not self._signal_problem(cur):
                return ()
            try:
                cur.execute(sqlfiles.load("mysql", "signal.sql"))
            except MySQLError as exc:
                grant = (f"GRANT CREATE, INSERT, DELETE ON `{self.config.database}`.`{SIGNAL_TABLE}` TO "
                         f"'{self.config.user}'")
                raise CaptureNotInstalledError(
                    f"cannot create the signal table {self.config.database}.{SIGNAL_TABLE} for watermark "
                    f"reads: {exc.args[-1] if exc.args else exc}",
                    f"as an administrator: {grant}; or set bootstrap_reads: lock", source=self.name) from None
        return (SIGNAL_TABLE,)

    def uninstall_signal_table(self) -> tuple[str, ...]:
        """This source's row of the signal table, and the table once no other source's row is left in it; what
        was dropped."""
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            if self._signal_problem(cur) is not None:
                return ()
            cur.execute(sqlfiles.load("mysql", "forget_signal.sql"), (self.name,))
            cur.execute(f"SELECT COUNT(*) FROM `{SIGNAL_TABLE}`")
            left = cur.fetchone()
            if left is None or left[0] == 0:
                cur.execute(sqlfiles.load("mysql", "drop_signal.sql"))
            conn.commit()
        return () if left and left[0] else (f"table {SIGNAL_TABLE}",)

    def _read_only_snapshot(self, cur: Cursor) -> Scn:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP in UTC, as the binlog and the snapshot have it
        return snapshot_position(cur, self.servers.era, self.name)

    def _reads_here(self, cur: Cursor) -> tuple[str, bool]:
        """(``bootstrap_reads`` with ``auto`` resolved for this server, whether it reports snapshot positions)."""
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
        reports = cur.fetchone() is not None
        reads = self.config.bootstrap_reads
        return (("snapshot" if reports else "watermark") if reads == "auto" else reads), reports

    def _bootstrap_reads(self, cur: Cursor) -> str:
        """``bootstrap_reads`` resolved for this server and checked: a watermark read's signal table first."""
        reads, reports = self._reads_here(cur)
        if reads == "snapshot" and not reports:
            raise ConfigError(self.servers.field("bootstrap_reads"), f"{self.servers.describe()} reports no binlog "
                              "position for a consistent snapshot (binlog_snapshot_file is MariaDB's)",
                              "set bootstrap_reads: watermark (or auto), or lock")
        if reads == "watermark":
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_order_commits'")
            order = cur.fetchone()  # MySQL's; MariaDB always commits in binlog order
            if order is not None and str(order[1]).upper() == "OFF":
                raise ConfigError(self.servers.field("bootstrap_reads"), f"{self.servers.describe()} has "
                                  "binlog_order_commits OFF, so a committed watermark does not show that earlier "
                                  "transactions are visible",
                                  "SET GLOBAL binlog_order_commits = ON (and in my.cnf), or set bootstrap_reads: lock")
            problem = self._signal_problem(cur)
            if problem:
                raise CaptureNotInstalledError(problem, f"run `databus install --source {self.name}`, or set "
                                               "bootstrap_reads: lock", source=self.name)
        return reads

    def _signal_problem(self, cur: Cursor) -> str | None:
        """Why watermark reads cannot write their signal row here, or None."""
        cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (self.config.database, SIGNAL_TABLE))
        if cur.fetchone() is None:
            return (f"the signal table {self.config.database}.{SIGNAL_TABLE} that watermark reads write to does not "
                    "exist")
        return None


def _batches_then_close(conn: Connection, cur: Cursor, pages: Iterable[list[Any]],
                        convert: Callable[[list[Any]], pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each page of rows read in a read-only snapshot, converted; the snapshot ends and the connection
    closes when the reader is done (or stops early)."""
    try:
        for rows in pages:
            yield convert(rows)
    finally:
        cur.execute("COMMIT")
        conn.close()


def _fingerprint_sql(name: str, schema: TableSchema, buckets: Sequence[int] = ()) -> str:
    parts = {c.name: fingerprint_part(c) for c in schema.columns}
    return sqlfiles.render(
        "mysql", name, table=f"`{schema.table}`",
        key_text=f"CONCAT({', '.join(parts[k] for k in schema.primary_key)})",
        row_text=f"CONCAT({', '.join(parts[c] for c in schema.column_names)})",
        columns=", ".join(select_expression(c) for c in schema.columns),
        buckets=", ".join(str(int(b)) for b in buckets) or "NULL")


def mysql_filter(table: str, columns: Sequence[str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for MySQL/MariaDB, naming ``columns`` of ``table`` (None: no
    filter)."""
    return READS.filter(table, READS.quoted(columns), where)


def _keyed(cursor: Cursor, table: str, key: Sequence[str], chosen: Filter | None) -> KeyedReads:
    return KeyedReads(READS, cursor, KeyedTable(table, READS.quote(table), tuple(map(READS.quote, key)), chosen))


def _selected(cursor: Cursor, table: str, schema: TableSchema, rows: RowSelection) -> KeyedReads:
    """The key-range queries of ``rows`` of ``table`` on ``cursor``, its filter checked (naming its columns)."""
    return _keyed(cursor, table, schema.primary_key, mysql_filter(table, schema.column_names, rows.where))


def snapshot_position(cur: Cursor, era: int, source: str, watermark: bool = False) -> Scn:
    """Start a consistent-snapshot transaction on ``cur`` and return a binlog position such that the
    snapshot holds every transaction up to it, and the log after it holds the rest of the table's story.

    The position is the snapshot's own where MariaDB reports it, or one pinned under a brief global read
    lock. With ``watermark`` (an autocommit ``cur``) the position is noted first, then a row is written
    to the signal table (``sql/mysql/signal.sql``): commits reach InnoDB in binlog order, so when that
    write has committed, every transaction up to the position is visible to the snapshot started after
    it. The snapshot may hold later transactions too; the merge replays them from the log over its rows
    (an event applies only over an older row), so no lock is needed."""
    if watermark:
        file, offset = binlog_end(cur, source)
        cur.execute(f"REPLACE INTO `{SIGNAL_TABLE}` (source, written_at, position) VALUES (%s, NOW(6), %s)",
                    (source, f"{file}:{offset}"))
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        return Scn.from_binlog(int(file.rsplit(".", 1)[1]), offset, era)
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    status = {k.lower(): v for k, v in cur.fetchall()}
    if status.get("binlog_snapshot_file"):
        # MariaDB reports the binlog position that matches this transaction's snapshot.
        return Scn.from_binlog(int(status["binlog_snapshot_file"].rsplit(".", 1)[1]),
                               int(status["binlog_snapshot_position"]), era)
    # MySQL: hold a global read lock just long enough to pin the position to the snapshot.
    cur.execute("COMMIT")
    cur.execute("FLUSH TABLES WITH READ LOCK")
    try:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        file, offset = binlog_end(cur, source)
    finally:
        cur.execute("UNLOCK TABLES")
    return Scn.from_binlog(int(file.rsplit(".", 1)[1]), offset, era)


def open_task_connection(connection: Mapping[str, Any]) -> Connection:
    """The connection a range's task opens from its spec's ``connection`` (``MysqlReads.task_connection``)."""
    return Connection(**connection, autocommit=True, charset="utf8mb4")


def read_range(read: RangeRead, index: int) -> TableRead:
    """Range ``index`` of ``read``, in its own consistent snapshot at the position it reports."""
    spec, schema, where = spec_of(read, MysqlRangeSpec), read.schema, read.ranges[index]
    table = schema.table
    names = ", ".join(select_expression(c) for c in schema.columns)
    key_index = [schema.column_names.index(k) for k in schema.primary_key]
    convert = schema.batch(lambda c: bootstrap_value(c, spec.zero_dates), f"bootstrap of {table}")
    chosen = mysql_filter(table, schema.column_names, read.where)  # checked again where it runs
    conn = open_task_connection(spec.connection)
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP read in UTC, as the binlog has it
        position = snapshot_position(cur, spec.era, read.source, spec.reads == "watermark")
    except BaseException:
        conn.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for rows in _keyed(cur, table, schema.primary_key, chosen).pages(names, spec.page_rows, where,
                                                                               row_key(key_index)):
                yield convert(rows)
            cur.execute("COMMIT")
        finally:
            conn.close()

    return TableRead(scn=position, schema=schema, batches=batches())
