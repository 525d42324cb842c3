"""The catalog of a PostgreSQL source: the configured tables' columns, mapped types and unique key, from
``pg_catalog``; and the shapes the stream's relation messages describe, which move the schemas on as capture
decodes them (a column added, dropped or retyped arrives as a new relation message before the change)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from functools import partial
from typing import Any

from psycopg2 import sql

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import ConfigError, SchemaDriftError, UnsupportedTypeError
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
from dagster_databus.sources.postgres.connect import PostgresConnector
from dagster_databus.sources.postgres.pgoutput import Relation
from dagster_databus.sources.postgres.types import PgColumn, pg_column_type

_FIX = "change the column to a mapped type (docs/types.md, PostgreSQL)"


class PostgresCatalog:
    """The configured tables' schemas, read from the database, and moved on by the stream (``adopt``)."""

    def __init__(self, connector: PostgresConnector) -> None:
        self.connector = connector
        self.config = connector.config
        self.name = connector.name
        self._schemas: dict[str, TableSchema] | None = None

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            schemas = table_schemas(self.config.tables, partial(self._table_schema, cur))
        self._schemas = schemas
        return schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def adopt(self, schemas: Mapping[str, TableSchema]) -> None:
        """These schemas become the current ones of their tables (the shapes a decoded chunk was written with)."""
        current = dict(self.schemas())
        current.update(schemas)
        self._schemas = current

    def qualified(self, table: str) -> sql.Composed:
        """``schema.table``, each part quoted."""
        return sql.SQL(".").join([sql.Identifier(self.config.schema_), sql.Identifier(table)])

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (a UNIQUE key may)."""
        problems = []
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            for schema in self.schemas().values():
                query = null_key_query("{table}", [f"{{{i}}}" for i in range(len(schema.primary_key))]) + " LIMIT 1"
                cur.execute(sql.SQL(query).format(*map(sql.Identifier, schema.primary_key),
                                                  table=self.qualified(schema.table)))
                problem = null_key_problem(schema, cur.fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def read_columns(self, cur: Any, table: str) -> list[tuple[Any, ...]]:
        """The catalog's rows for ``table``'s live columns, in the table's order (none: no such table)."""
        cur.execute(sqlfiles.load("postgres", "table_columns.sql"), {"schema": self.config.schema_, "table": table})
        row = cur.fetchone()
        if row is None or row[0] is None:
            return []
        names, types, typmods = row
        return self.described(cur, table, names, types, typmods)

    def described(self, cur: Any, table: str, names: Sequence[str], types: Sequence[int],
                  typmods: Sequence[int]) -> list[tuple[Any, ...]]:
        """The rows ``build`` maps for columns given by name, type oid and modifier (a table's, or a relation
        message's), in that order (``sql/postgres/described_columns.sql``)."""
        cur.execute(sqlfiles.load("postgres", "described_columns.sql"),
                    {"names": list(names), "types": list(types), "typmods": list(typmods),
                     "schema": self.config.schema_, "table": table})
        return list(cur.fetchall())

    def build(self, table: str, key: Sequence[str], rows: Sequence[tuple[Any, ...]], where: str,
              recorded: Mapping[str, Column] | None = None) -> TableSchema:
        """The schema of ``table`` from its described columns, every column mapped or refused by name. A column
        whose type is gone (dropped since a relation message described it) is the ``recorded`` one of its name."""
        columns, unmapped = [], []
        for name, declared, type_name, typmod, is_enum, element, element_is_enum, _nn, default, type_oid in rows:
            check_column_name(name, table, where)
            if declared is None:
                columns.append(self._recorded(table, name, recorded or {}))
                continue
            pg = PgColumn(name=name, declared=declared, type_name=type_name, typmod=typmod, is_enum=is_enum,
                          element=element, element_is_enum=bool(element_is_enum), type_oid=type_oid)
            try:
                ctype = pg_column_type(pg)
            except UnsupportedTypeError as exc:
                raise UnsupportedTypeError(f"source {self.name!r}, table {table!r}: {exc.problem}", exc.fix,
                                           source=self.name, table=table) from None
            if ctype is None:
                unmapped.append(f"{name} {declared}")
                continue
            columns.append(Column(name=name, type=ctype, source_type=declared, default=default))
        require_mapped(self.name, table, unmapped, "PostgreSQL", _FIX)
        return TableSchema(source=self.name, table=table, columns=tuple(columns),
                           primary_key=resolve_key(columns, key, table, where))

    def relation_schema(self, relation: Relation, current: TableSchema | None,
                        recorded: Mapping[str, Column]) -> TableSchema:
        """The schema of the columns a relation message describes (``current``: the table's schema now, whose key it
        keeps; ``recorded``: the columns the change log last recorded, for a type dropped since)."""
        key = current.primary_key if current is not None else self.config.table(relation.name).primary_key
        columns = relation.columns
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            rows = self.described(cur, relation.name, [c.name for c in columns], [c.type_oid for c in columns],
                                  [c.type_modifier for c in columns])
        return self.build(relation.name, key, rows, self.connector.field("tables"), recorded)

    def _recorded(self, table: str, name: str, recorded: Mapping[str, Column]) -> Column:
        if name not in recorded:
            raise SchemaDriftError(
                f"source {self.name!r}, table {table!r}: the type of column {name} was dropped before capture read "
                "the changes written with it, and the change log has no record of the column to decode them by",
                f"run `databus bootstrap --source {self.name}` (the changes still waiting are read in the table's "
                "current columns instead)", source=self.name, table=table)
        return recorded[name]

    def _table_schema(self, cur: Any, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        where = self.connector.field(f"tables[{index}]")
        rows = self.read_columns(cur, table)
        if not rows:
            cur.execute(sqlfiles.load("postgres", "schema_tables.sql"), {"schema": self.config.schema_})
            existing = ", ".join(r[0] for r in cur.fetchall()) or "(none)"
            raise ConfigError(f"{where}.name", f"table {table!r} does not exist in schema {self.config.schema_!r} of "
                              f"database {self.config.database!r}", f"use one of the schema's tables: {existing}")
        schema = self.build(table, key, rows, where)
        self._require_logged(cur, table, where)
        cur.execute(sqlfiles.load("postgres", "unique_keys.sql"), {"schema": self.config.schema_, "table": table})
        require_unique_key(schema.primary_key, [set(r[0]) for r in cur.fetchall()], table, where)
        return schema

    def _require_logged(self, cur: Any, table: str, where: str) -> None:
        """Refuse an unlogged table (or one with unlogged partitions): its changes are not in the WAL, so logical
        decoding never sees them (and the server refuses to publish it, after install set its replica identity)."""
        cur.execute(sqlfiles.load("postgres", "unlogged.sql"), {"schema": self.config.schema_, "table": table})
        unlogged = [f"{s}.{t}" for s, t in cur.fetchall()]
        name = f"{self.config.schema_}.{table}"
        if unlogged:
            what = "is unlogged" if unlogged == [name] else f"has unlogged partitions {', '.join(unlogged)}"
            raise ConfigError(
                f"{where}.name", f"table {name} {what}: an unlogged table's changes are not written to the WAL, "
                "so logical decoding cannot capture them",
                "; ".join(f"ALTER TABLE {u} SET LOGGED" for u in unlogged) + ", or leave the table out of capture")
