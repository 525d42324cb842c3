"""The catalog of a MySQL source: the configured tables' columns, mapped types and unique key, from
``information_schema`` of the server capture reads; and the shapes capture decoded last.
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
    null_key_problem,
    null_key_query,
    require_mapped,
    require_unique_key,
    resolve_key,
    table_schemas,
)
from dagster_databus.sources.mysql.connect import Cursor
from dagster_databus.sources.mysql.servers import MysqlServers
from dagster_databus.sources.mysql.types import mysql_column_type


class MysqlCatalog:
    """The configured tables' schemas, read from the server capture reads (again after it changes), and moved
    on by the binlog as capture decodes new shapes of them (``adopt``)."""

    def __init__(self, servers: MysqlServers) -> None:
        self.servers = servers
        self.config = servers.config
        self.name = servers.name
        self._schemas: dict[str, TableSchema] | None = None
        self._generation = servers.generation  # of the server the schemas were read from

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            schemas = table_schemas(self.config.tables, partial(self._table_schema, cur))
        self._schemas, self._generation = schemas, self.servers.generation
        return schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        current = self._current()
        return current if current is not None else self.preflight()

    def adopt(self, schemas: Mapping[str, TableSchema]) -> None:
        """These schemas become the current ones of their tables: the shapes a committed batch was decoded with
        (before any were read: the tables known, as a test knows them without a server)."""
        current = self._current()
        if current is None:
            self._schemas, self._generation = dict(schemas), self.servers.generation
        else:
            current.update(schemas)

    def _current(self) -> dict[str, TableSchema] | None:
        """The schemas read, unless the server capture reads has changed since (then they are read again)."""
        if self._generation != self.servers.generation:
            self._schemas = None
        return self._schemas

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (a UNIQUE key may)."""
        problems = []
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            for schema in self.schemas().values():
                cur.execute(null_key_query(f"`{schema.table}`", [f"`{k}`" for k in schema.primary_key]) + " LIMIT 1")
                problem = null_key_problem(schema, cur.fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def _table_schema(self, cur: Cursor, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        where = self.servers.field(f"tables[{index}]")
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
