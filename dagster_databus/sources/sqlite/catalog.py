"""The catalog of a SQLite source: the configured tables' columns, mapped types and unique key, from the
database's own description (``PRAGMA table_info``), and the check that the database is this source's."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConfigError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.generic.catalog import SqlCatalog, covered
from dagster_databus.sources.sqlite.database import SqliteDatabase, installed
from dagster_databus.sources.sqlite.dialect import CATALOG
from dagster_databus.sources.sqlite.render import trigger_homes, trigger_names

# The unique indexes that make no column set unique, with whether each is partial (else it has an expression part).
_PARTLY_UNIQUE = ("SELECT i.name, i.partial FROM pragma_index_list(:table_name) AS i WHERE i.\"unique\" AND "
                  "(i.partial OR EXISTS (SELECT 1 FROM pragma_index_info(i.name) AS e WHERE e.cid = -2))")


class _Session:
    """A connection as the catalog queries it, its own cursor: every query goes through the connection's
    ``execute`` (``BusyAwareConnection``: a lock that outlasts the busy timeout is a transient error)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self._rows: list[Any] = []

    def cursor(self) -> _Session:
        return self

    def execute(self, sql: str, params: Any, /) -> None:
        self._rows = self.connection.execute(sql, params).fetchall()

    def fetchall(self) -> list[Any]:
        return self._rows

    def close(self) -> None:
        self.connection.close()


class SqliteCatalog(SqlCatalog[_Session]):
    """The configured tables' schemas, and the database's owner."""

    def __init__(self, database: SqliteDatabase) -> None:
        super().__init__(CATALOG, database.name, database.config.tables, lambda: _Session(database.connect()),
                         f"{database.config.path}")
        self.database = database
        self.config = database.config

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

    def check_database(self, cur: _Session) -> None:
        self.require_owner(cur.connection)

    def columns_of(self, cur: _Session, table: str, where: str) -> Sequence[tuple[Any, ...]] | None:
        rows = super().columns_of(cur, table, where)
        if rows is None:
            self._refuse_renamed_away(cur.connection, table, where)
        return rows

    def unique_sets(self, cur: _Session, table: str, key: tuple[str, ...], where: str) -> list[set[str]]:
        sets = super().unique_sets(cur, table, key, where)
        cur.execute(_PARTLY_UNIQUE, {"table_name": table})
        partly = {name: "is partial (it has a WHERE clause)" if partial else "has an expression part"
                  for name, partial in cur.fetchall()}
        _refuse_partly_unique(key, sets, partly, table, where)
        return sets

    def table_schema(self, cur: _Session, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        schema = super().table_schema(cur, index, table, key)
        if self.config.invalid_utf8 != "binary":
            return schema
        # Text outside the key as its exact bytes (a key stays text).
        return replace(schema, columns=tuple(replace(c, type=ColumnType("binary"))
                                             if c.type.kind == "string" and c.name not in schema.primary_key else c
                                             for c in schema.columns))

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


def _refuse_partly_unique(key: tuple[str, ...], unique: list[set[str]], partly: dict[str, str], table: str,
                          where: str) -> None:
    """Refuse a key that only an expression or partial unique index seems to cover, naming the index: two rows
    may share the key columns' values, and the snapshot would keep one of them."""
    if not partly or covered(key, unique):
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
