"""Parallel bootstrap of a MySQL/MariaDB table in Spark tasks.

The driver cuts the primary-key space into ranges by walking the key index (keys only, keyset
pagination). Each task opens its own ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, reads
MariaDB's ``binlog_snapshot_file/position`` for it (P_i), and reads its range by keyset
pagination, stamping every row with ``__scn = P_i``. The snapshot is committed at min(P_i):
replaying the log from there is exact because the MERGE only applies an event to a row whose
``__scn`` is older than the event, and an event at or before P_i is already in range i.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dagster_databus.core.types import ColumnType
from dagster_databus.errors import DatabusError, for_task


def key_ranges(cursor: Any, table: str, key: Sequence[str], rows_per_range: int) -> list[list[Any] | None]:
    """Boundaries (inclusive upper keys) cutting the table into ranges of about ``rows_per_range`` rows."""
    cols = ", ".join(f"`{k}`" for k in key)
    marks = ", ".join(["%s"] * len(key))
    bounds: list[list[Any] | None] = []
    last: list[Any] | None = None
    while True:
        if last is None:
            cursor.execute(f"SELECT {cols} FROM `{table}` ORDER BY {cols} LIMIT %s", (rows_per_range,))
        else:
            cursor.execute(f"SELECT {cols} FROM `{table}` WHERE ({cols}) > ({marks}) ORDER BY {cols} LIMIT %s",
                           (*last, rows_per_range))
        rows = cursor.fetchall()
        if len(rows) < rows_per_range:
            break
        last = list(rows[-1])
        bounds.append(last)
    return [*bounds, None]  # the last range is open-ended: keys inserted later land somewhere


class MysqlTableSource(DataSource):
    """Options: ``connection`` (JSON), ``table``, ``columns`` (JSON [[name, type, COLUMN_TYPE]]), ``key`` (JSON),
    ``bounds`` (JSON list of upper keys, null for open), ``page_rows``, ``zero_dates``."""

    @classmethod
    def name(cls) -> str:
        return "databus_mysql_table"

    def schema(self) -> str:
        columns = json.loads(self.options["columns"])
        return ", ".join(f"`{n}` {ColumnType.parse(t).spark()}" for n, t, _ in columns) + ", `__scn` long"

    def reader(self, schema: Any) -> DataSourceReader:
        return MysqlTableReader(dict(self.options))


class MysqlTableReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        bounds = json.loads(self.options["bounds"])
        lowers = [None, *bounds[:-1]]
        return [InputPartition(json.dumps({"after": lo, "through": hi})) for lo, hi in zip(lowers, bounds,
                                                                                           strict=True)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        try:
            yield from self._read(partition)
        except DatabusError as exc:
            raise for_task(exc) from None

    def _read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from dagster_databus.core.schema import Column, TableSchema
        from dagster_databus.core.scn import Scn
        from dagster_databus.sources.mysql_connect import Connection
        from dagster_databus.sources.mysql_types import bootstrap_value, select_expression

        spec = json.loads(partition.value)
        opts = self.options
        conn_args = json.loads(opts["connection"])
        table = opts["table"]
        columns = [Column(n, ColumnType.parse(t), source_type) for n, t, source_type in json.loads(opts["columns"])]
        key = json.loads(opts["key"])
        page = int(opts["page_rows"])
        names = ", ".join(select_expression(c) for c in columns)
        kcols = ", ".join(f"`{k}`" for k in key)
        marks = ", ".join(["%s"] * len(key))
        key_index = [[c.name for c in columns].index(k) for k in key]
        schema = TableSchema(opts.get("source", ""), table, tuple(columns), tuple(key))
        convert = schema.batch(lambda c: bootstrap_value(c, opts.get("zero_dates", "error")),  # type: ignore[arg-type]
                               f"bootstrap of {table}")
        arrow_schema = schema.arrow(with_meta=False).append(pa.field("__scn", pa.int64()))
        conn = Connection(**conn_args, autocommit=True, charset="utf8mb4")
        try:
            cur = conn.cursor()
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP read in UTC, as the binlog has it
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {k.lower(): v for k, v in cur.fetchall()}
            position = Scn.from_binlog(int(status["binlog_snapshot_file"].rsplit(".", 1)[1]),
                                       int(status["binlog_snapshot_position"]), int(opts.get("era", "0"))).value
            after, through = spec["after"], spec["through"]
            while True:
                where, params = [], []
                if after is not None:
                    where.append(f"({kcols}) > ({marks})")
                    params += after
                if through is not None:
                    where.append(f"({kcols}) <= ({marks})")
                    params += through
                clause = f"WHERE {' AND '.join(where)} " if where else ""
                cur.execute(f"SELECT {names} FROM `{table}` {clause}ORDER BY {kcols} LIMIT %s", (*params, page))
                rows = cur.fetchall()
                if not rows:
                    break
                batch = convert(rows)
                yield pa.RecordBatch.from_arrays([*batch.columns, pa.array([position] * len(rows), pa.int64())],
                                                 schema=arrow_schema)
                if len(rows) < page:
                    break
                after = [rows[-1][i] for i in key_index]
            cur.execute("COMMIT")
        finally:
            conn.close()
