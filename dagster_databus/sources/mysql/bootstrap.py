"""Reading a MySQL/MariaDB table by primary-key ranges, each range on its own connection (a task's).

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

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError
from dagster_databus.sources.base import ALL_ROWS, KeyRange, RangeRead, RowSelection, TableSnapshot
from dagster_databus.sources.filters import Filter, filter_for, select_clause
from dagster_databus.sources.keys import keyset_pages, row_key, split_keys
from dagster_databus.sources.mysql.connect import Connection, Cursor, MySQLError
from dagster_databus.sources.mysql.dialect import FILTERS
from dagster_databus.sources.mysql.types import bootstrap_value, select_expression
from dagster_databus.sources.mysql.versions import binlog_end

# The table watermark reads write a row to (``sql/mysql/signal.sql``; install creates it).
SIGNAL_TABLE = "_databus_signal"


def mysql_filter(table: str, columns: Sequence[str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for MySQL/MariaDB, naming ``columns`` of ``table`` (None: no
    filter). Its text holds no ``%`` (modulo renders as MOD()), so pymysql's parameter formatting leaves it be."""
    return filter_for(where, FILTERS, table, {c: f"`{c}`" for c in columns})


def key_ranges(cursor: Cursor, table: str, key: Sequence[str], rows_per_range: int,
               rows: RowSelection = ALL_ROWS, columns: Sequence[str] = (), first: int | None = None
               ) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` of the selected rows (``keys.split_keys``); a filter may name
    ``columns``."""
    cols = ", ".join(f"`{k}`" for k in key)
    marks = ", ".join(["%s"] * len(key))
    chosen = mysql_filter(table, columns, rows.where)

    def key_at(after: tuple[Any, ...] | None, n: int) -> tuple[Any, ...] | None:
        where, params = select_clause(cols, marks, KeyRange(after, rows.keys.through), chosen)
        cursor.execute(f"SELECT {cols} FROM `{table}` {where}ORDER BY {cols} LIMIT 1 OFFSET %s", (*params, n))
        return cursor.fetchone()

    return split_keys(key_at, rows_per_range, rows.keys, first)


def check_selection(cursor: Cursor, table: str, key: Sequence[str], rows: RowSelection,
                    columns: Sequence[str] = ()) -> None:
    """Check the filter (``sources.filters``) and run the selection's query on no rows: the server names what
    its own check finds."""
    where, params = select_clause(", ".join(f"`{k}`" for k in key), ", ".join(["%s"] * len(key)), rows.keys,
                                  mysql_filter(table, columns, rows.where))
    try:
        cursor.execute(f"SELECT 1 FROM `{table}` {where}LIMIT 0", params)
        cursor.fetchall()
    except MySQLError as exc:
        raise ConfigError("snapshot.where", f"MySQL cannot select {rows.describe()} of {table!r}: "
                          f"{exc.args[-1] if exc.args else exc}",
                          "write the condition in MySQL's SQL, naming the table's columns") from None


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
    """The connection a range's task opens from its spec's ``connection`` (``MysqlSnapshots.task_connection``)."""
    return Connection(**connection, autocommit=True, charset="utf8mb4")


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read``, in its own consistent snapshot at the position it reports."""
    spec, schema, where = read.spec, read.schema, read.ranges[index]
    table, key, page = schema.table, schema.primary_key, int(spec["page_rows"])
    names = ", ".join(select_expression(c) for c in schema.columns)
    kcols = ", ".join(f"`{k}`" for k in key)
    marks = ", ".join(["%s"] * len(key))
    key_index = [schema.column_names.index(k) for k in key]
    convert = schema.batch(lambda c: bootstrap_value(c, spec["zero_dates"]), f"bootstrap of {table}")
    chosen = mysql_filter(table, schema.column_names, read.where)  # checked again where it runs
    conn = open_task_connection(spec["connection"])
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP read in UTC, as the binlog has it
        position = snapshot_position(cur, int(spec["era"]), read.source, spec.get("reads") == "watermark")
    except BaseException:
        conn.close()
        raise

    def fetch(keys: KeyRange) -> list[Any]:
        clause, params = select_clause(kcols, marks, keys, chosen)
        cur.execute(f"SELECT {names} FROM `{table}` {clause}ORDER BY {kcols} LIMIT %s", (*params, page))
        return list(cur.fetchall())

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for rows in keyset_pages(fetch, where, row_key(key_index), page):
                yield convert(rows)
            cur.execute("COMMIT")
        finally:
            conn.close()

    return TableSnapshot(scn=position, schema=schema, batches=batches())
