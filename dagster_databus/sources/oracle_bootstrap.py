"""Parallel bootstrap of an Oracle table in Spark tasks, every task reading ``AS OF SCN`` the same
SCN: the union of the key ranges is exactly the table at that SCN."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dagster_databus.core.types import ColumnType
from dagster_databus.errors import DatabusError, for_task
from dagster_databus.sources.oracle_sql import after_clause, through_clause


def key_ranges(cursor: Any, table: str, keys: Sequence[str], scn: int, rows_per_range: int) -> list[list[Any] | None]:
    """Upper boundaries cutting the table (as of ``scn``) into ranges of about ``rows_per_range`` rows."""
    order = ", ".join(keys)
    first = f"SELECT {order} FROM {table} AS OF SCN :scn ORDER BY {order} FETCH FIRST :n ROWS ONLY"
    following = (f"SELECT {order} FROM {table} AS OF SCN :scn WHERE {after_clause(keys, 'a')} ORDER BY {order} "
                 "FETCH FIRST :n ROWS ONLY")
    bounds: list[list[Any] | None] = []
    cursor.execute(first, scn=scn, n=rows_per_range)
    while len(rows := cursor.fetchall()) == rows_per_range:
        last = list(rows[-1])
        bounds.append(last)
        cursor.execute(following, scn=scn, n=rows_per_range, **{f"a{i}": v for i, v in enumerate(last)})
    return [*bounds, None]


class OracleTableSource(DataSource):
    """Options: ``connection`` (JSON), ``table`` (quoted), ``columns`` (JSON [[name, quoted column, type,
    declared type]]),
    ``key`` (JSON quoted key columns), ``bounds`` (JSON), ``scn``, ``page_rows``."""

    @classmethod
    def name(cls) -> str:
        return "databus_oracle_table"

    def schema(self) -> str:
        return ", ".join(f"`{n}` {ColumnType.parse(t).spark()}" for n, _, t, _ in json.loads(self.options["columns"]))

    def reader(self, schema: Any) -> DataSourceReader:
        return OracleTableReader(dict(self.options))


class OracleTableReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        bounds = json.loads(self.options["bounds"])
        return [InputPartition(json.dumps({"after": lo, "through": hi}))
                for lo, hi in zip([None, *bounds[:-1]], bounds, strict=True)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        try:
            yield from self._read(partition)
        except DatabusError as exc:
            raise for_task(exc) from None

    def _read(self, partition: InputPartition) -> Iterator[Any]:
        import oracledb

        from dagster_databus.core.schema import Column, TableSchema
        from dagster_databus.sources.oracle_types import oracle_value, output_type_handler, select_expression

        opts, spec = self.options, json.loads(partition.value)
        columns = json.loads(opts["columns"])
        keys = json.loads(opts["key"])
        typed = [Column(name, ColumnType.parse(kind), declared) for name, _, kind, declared in columns]
        # The raw key columns trail the exact-value expressions: keyset paging binds them as they are.
        exact = [select_expression(quoted, declared, quoted) for _, quoted, _, declared in columns]
        select = ", ".join([*exact, *keys])
        schema = TableSchema(opts.get("source", ""), opts["table"], tuple(typed), ())
        page, scn, table = int(opts["page_rows"]), int(opts["scn"]), opts["table"]
        convert = schema.batch(oracle_value, f"bootstrap of {table} as of SCN {scn}")
        after, through = spec["after"], spec["through"]
        with oracledb.connect(**json.loads(opts["connection"])) as conn, conn.cursor() as cur:
            conn.outputtypehandler = output_type_handler
            while True:
                where, binds = [], {"scn": scn, "n": page}
                if after is not None:
                    where.append(f"({after_clause(keys, 'a')})")
                    binds |= {f"a{i}": v for i, v in enumerate(after)}
                if through is not None:
                    where.append(through_clause(keys, "t"))
                    binds |= {f"t{i}": v for i, v in enumerate(through)}
                clause = f" WHERE {' AND '.join(where)}" if where else ""
                cur.execute(f"SELECT {select} FROM {table} AS OF SCN :scn{clause} ORDER BY {', '.join(keys)} "
                            "FETCH FIRST :n ROWS ONLY", binds)
                rows = cur.fetchall()
                if not rows:
                    break
                yield convert(rows)
                if len(rows) < page:
                    break
                after = list(rows[-1][len(typed):])
