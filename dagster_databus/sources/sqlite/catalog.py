"""The catalog of a SQLite source: the configured tables' columns, mapped types and unique key, from the
database's own description (``PRAGMA table_info``), and the check that the database is this source's."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import replace
from functools import partial
from typing import Any

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConfigError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.catalog import (
    check_column_name,
    null_key_problem,
    null_key_query,
    require_mapped,
    require_unique_key,
    resolve_key,
    table_schemas,
)
from dagster_databus.sources.sqlite.database import SqliteDatabase, installed
from dagster_databus.sources.sqlite.render import trigger_homes, trigger_names
from dagster_databus.sources.sqlite.types import sqlite_column_type


class SqliteCatalog:
    """The configured tables' schemas, and the database's owner."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database
        self.config = database.config
        self.name = database.name
        self._schemas: dict[str, TableSchema] | None = None

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self.database.connect()) as conn:
            self.require_owner(conn)
            self._schemas = table_schemas(self.config.tables, partial(self._table_schema, conn))
        return self._schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def require_owner(self, conn: sqlite3.Connection) -> None:
        """Refuse a database another source captures (its name is recorded by that source's install)."""
        if not installed(conn):
            return  # never installed: no owner yet
        row = conn.execute(sqlfiles.load("sqlite", "owner.sql")).fetchone()
        if row is None or row[0] == self.name:
            return
        owner, path = row[0], self.config.path
        raise ConfigError(
            self.database.field("path"),
            f"database {path} is already captured by source {owner!r} (recorded by its install): one database "
            f"is captured by one source, since its txlog, pruning and schema checks serve them all, and source "
            f"{self.name!r} would lose changes to {owner!r}'s pruning",
            f"capture these tables in source {owner!r} (list them under its tables) instead of in a second source "
            f"on the same file, in this config or another; if source {owner!r} is gone for good (renamed or "
            f"removed), release the database with DELETE FROM _databus_settings WHERE name = 'owner_source' in "
            f"{path}, then run `databus install --source {self.name}` and `databus bootstrap --source {self.name}`",
        )

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (SQLite allows it in a PRIMARY KEY
        that is not an INTEGER PRIMARY KEY, and in UNIQUE columns)."""
        problems = []
        with closing(self.database.connect()) as conn:
            for schema in self.schemas().values():
                query = null_key_query(quote_ansi(schema.table), [quote_ansi(k) for k in schema.primary_key])
                problem = null_key_problem(schema, conn.execute(query + " LIMIT 1").fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def _table_schema(self, conn: sqlite3.Connection, index: int, table: str,
                      key: tuple[str, ...]) -> TableSchema:
        where = self.database.field(f"tables[{index}]")
        info = conn.execute(f"PRAGMA table_info({quote_ansi(table)})").fetchall()
        if not info:
            self._refuse_renamed_away(conn, table, where)
            existing = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_databus\\_%' "
                "ESCAPE '\\' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            raise ConfigError(
                f"{where}.name", f"table {table!r} does not exist in {self.config.path}",
                f"use one of the database's tables: {', '.join(existing) or '(none)'}",
            )
        columns, unmapped = [], []
        for _cid, name, decl, _notnull, default, _pk in info:
            check_column_name(name, table, where)
            ctype = sqlite_column_type(decl or "")
            if ctype is None:
                unmapped.append(f"{name} {decl}")
                continue
            columns.append(Column(name=name, type=ctype, source_type=decl or "",
                                  default=None if default is None or default.upper() == "NULL" else default))
        require_mapped(self.name, table, unmapped, "SQLite", "declare DECIMAL(p,s) with 1 <= p and s <= p")
        key = resolve_key(columns, key, table, where)
        unique, partly = _unique_sets(conn, table, info)
        _refuse_partly_unique(key, unique, partly, table, where)
        require_unique_key(key, unique, table, where)
        if self.config.invalid_utf8 == "binary":  # text outside the key as its exact bytes (a key stays text)
            columns = [replace(c, type=ColumnType("binary")) if c.type.kind == "string" and c.name not in key else c
                       for c in columns]
        return TableSchema(source=self.name, table=table, columns=tuple(columns), primary_key=key)

    def _refuse_renamed_away(self, conn: sqlite3.Connection, table: str, where: str) -> None:
        """Raise when the missing ``table`` was renamed: its capture triggers moved with it to the table it is now."""
        homes = trigger_homes(conn)
        moved = sorted({homes[n] for n in trigger_names(table).values() if n in homes})
        if not moved:
            return
        raise ConfigError(
            f"{where}.name",
            f"table {table!r} does not exist in {self.config.path}: it was renamed to {moved[0]!r} (the capture "
            f"triggers of {table} moved with it), and no table {table!r} was created again",
            f"rename it back (ALTER TABLE {quote_ansi(moved[0])} RENAME TO {quote_ansi(table)}): the changes made "
            f"to it meanwhile are then captured as {table}'s; or, to capture it under its new name, set {where}.name "
            f"to {moved[0]} (its snapshot is then read afresh)",
        )


def _unique_sets(conn: sqlite3.Connection, table: str, info: list[Any]) -> tuple[list[set[str]], dict[str, str]]:
    """The declared primary key and every UNIQUE index on plain columns, as column sets; and the unique indexes
    that make no column set unique (one with an expression part, or a partial one), by name, with why."""
    sets, partly = [{row[1] for row in info if row[5]}], {}
    for index in conn.execute(f"PRAGMA index_list({quote_ansi(table)})").fetchall():
        if not index[2]:  # not unique
            continue
        parts = conn.execute(f"PRAGMA index_info({quote_ansi(index[1])})").fetchall()
        if index[4]:  # partial: rows outside its WHERE may share the values
            partly[index[1]] = "is partial (it has a WHERE clause)"
        elif any(r[1] == -2 for r in parts):  # an expression: only the columns with it are unique
            partly[index[1]] = "has an expression part"
        else:
            sets.append({r[2] for r in parts})
    return sets, partly


def _refuse_partly_unique(key: tuple[str, ...], unique: list[set[str]], partly: dict[str, str], table: str,
                          where: str) -> None:
    """Refuse a key that only an expression or partial unique index seems to cover, naming the index: two rows
    may share the key columns' values, and the snapshot would keep one of them."""
    wanted = {k.lower() for k in key}
    if not partly or any(cols and {c.lower() for c in cols} <= wanted for cols in unique):
        return
    named = ", ".join(f"{name} {why}" for name, why in sorted(partly.items()))
    columns = ", ".join(quote_ansi(k) for k in key)
    raise ConfigError(
        f"{where}.primary_key",
        f"columns {list(key)} of {table!r} are not a unique key as SQLite defines it: no primary key or plain "
        f"UNIQUE index covers them, and the unique index {named}, so two rows may share the key's values",
        f"add a plain unique index on exactly the key's columns (CREATE UNIQUE INDEX ... ON {quote_ansi(table)} "
        f"({columns})), or set {where}.primary_key to columns the table's PRIMARY KEY or a plain UNIQUE index "
        "covers")
