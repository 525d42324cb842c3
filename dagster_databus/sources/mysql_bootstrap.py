"""Reading a MySQL/MariaDB table by primary-key ranges, each range on its own connection (a task's).

The driver cuts the key space into ranges by walking the key index (keys only, keyset pagination).
On MariaDB each range opens its own ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, reads the
binlog position of that snapshot (``binlog_snapshot_file/position``) and reads its range by keyset
pages: the range's rows are the table at that position (``RangeRead`` says why the union is exact).
MySQL proper reports no such position, so its table is one range whose position is pinned under a
brief global read lock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError
from dagster_databus.sources.base import KeyRange, RangeRead, TableSnapshot, range_pages, split_keys


def key_ranges(cursor: Any, table: str, key: Sequence[str], rows_per_range: int) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` rows (``base.split_keys``)."""
    cols = ", ".join(f"`{k}`" for k in key)
    marks = ", ".join(["%s"] * len(key))

    def first_keys(after: tuple[Any, ...] | None) -> list[Any]:
        where = f"WHERE ({cols}) > ({marks}) " if after is not None else ""
        cursor.execute(f"SELECT {cols} FROM `{table}` {where}ORDER BY {cols} LIMIT %s",
                       (*(after or ()), rows_per_range))
        return list(cursor.fetchall())

    return split_keys(first_keys, rows_per_range)


def snapshot_position(cur: Any, era: int, source: str) -> Scn:
    """Start a consistent-snapshot transaction on ``cur`` and return the binlog position it sees."""
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
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    finally:
        cur.execute("UNLOCK TABLES")
    if not row:
        raise CaptureNotInstalledError(f"MySQL source {source!r} has binary logging off",
                                       "enable log_bin under [mysqld] and restart the server", source=source)
    return Scn.from_binlog(int(row[0].rsplit(".", 1)[1]), int(row[1]), era)


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read``, in its own consistent snapshot at the position it reports."""
    from dagster_databus.sources.mysql_connect import Connection
    from dagster_databus.sources.mysql_types import bootstrap_value, select_expression

    spec, schema, where = read.spec, read.schema, read.ranges[index]
    table, key, page = schema.table, schema.primary_key, int(spec["page_rows"])
    names = ", ".join(select_expression(c) for c in schema.columns)
    kcols = ", ".join(f"`{k}`" for k in key)
    marks = ", ".join(["%s"] * len(key))
    key_index = [schema.column_names.index(k) for k in key]
    convert = schema.batch(lambda c: bootstrap_value(c, spec["zero_dates"]), f"bootstrap of {table}")
    conn = Connection(**spec["connection"], autocommit=True, charset="utf8mb4")
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP read in UTC, as the binlog has it
        position = snapshot_position(cur, int(spec["era"]), read.source)
    except BaseException:
        conn.close()
        raise

    def fetch(clause: str, params: list[Any]) -> list[Any]:
        cur.execute(f"SELECT {names} FROM `{table}` {clause}ORDER BY {kcols} LIMIT %s", (*params, page))
        return cur.fetchall()

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for rows in range_pages(fetch, kcols, marks, where, key_index, page):
                yield convert(rows)
            cur.execute("COMMIT")
        finally:
            conn.close()

    return TableSnapshot(scn=position, schema=schema, batches=batches())
