"""Introspection of a MySQL source's tables: columns, mapped types and the unique key, from
``information_schema``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from functools import partial
from typing import Any

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConfigError
from dagster_databus.sources.catalog import (
    check_column_name,
    require_mapped,
    require_unique_key,
    resolve_key,
    table_schemas,
)
from dagster_databus.sources.mysql.servers import MysqlServers
from dagster_databus.sources.mysql.types import mysql_column_type


class MysqlSchemas(MysqlServers):
    """The configured tables' schemas, read from the server capture reads."""

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            self._schemas = table_schemas(self.config.tables, partial(self._table_schema, cur))
        return self._schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def _table_schema(self, cur: Any, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        where = self._field(f"tables[{index}]")
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_DEFAULT, EXTRA, VERSION() "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (self.config.database, table))
        rows = cur.fetchall()
        if not rows:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s ORDER BY 1",
                        (self.config.database,))
            existing = ", ".join(r[0] for r in cur.fetchall()) or "(none)"
            raise ConfigError(f"{where}.name", f"table {table!r} does not exist in database {self.config.database!r}",
                              f"use one of the database's tables: {existing}")
        columns, unmapped = [], []
        for name, _data_type, column_type, default, extra, version in rows:
            check_column_name(name, table, where)
            ctype = mysql_column_type(column_type)
            default = _sql_default(default, extra, ctype, "mariadb" in str(version).lower())
            if ctype is None:
                unmapped.append(f"{name} {column_type}")
                continue
            columns.append(Column(name=name, type=ctype, source_type=column_type, default=default))
        require_mapped(self.name, table, unmapped, "MySQL", "change the column to a mapped type")
        key = resolve_key(columns, key, table, where)
        cur.execute("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s AND NON_UNIQUE = 0", (self.config.database, table))
        unique: dict[str, set[str]] = {}
        for index_name, column in cur.fetchall():
            unique.setdefault(index_name, set()).add(column)
        require_unique_key(key, unique.values(), table, where)
        return TableSchema(source=self.name, table=table, columns=tuple(columns), primary_key=key)


def _sql_default(default: Any, extra: str, ctype: ColumnType | None, mariadb: bool) -> str | None:
    """A column's default as SQL literal text (``core.defaults``), or in parentheses when it is an expression.
    MariaDB reports it so; MySQL reports a literal's bare value and marks expressions ``DEFAULT_GENERATED``."""
    if default is None or (mariadb and str(default).upper() == "NULL"):
        return None
    text = str(default)
    if mariadb:
        return text
    if "DEFAULT_GENERATED" in str(extra).upper() or text.upper().startswith(("CURRENT_TIMESTAMP", "NOW(")):
        return f"({text})"
    if ctype is not None and ctype.kind in ("byte", "short", "integer", "long", "decimal", "float", "double"):
        return text
    return "'" + text.replace("'", "''") + "'"
