"""The catalog of a PostgreSQL source: the configured tables' columns, mapped types and unique key, from
``pg_catalog`` (``dialect.CATALOG``); and the shapes the stream's relation messages describe, which move the
schemas on as capture decodes them (a column added, dropped or retyped arrives as a new relation message before
the change)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from typing import Any

from psycopg2.extensions import cursor as PgCursor

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import ConfigError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.generic.catalog import SqlCatalog
from dagster_databus.sources.postgres.connect import PostgresConnector
from dagster_databus.sources.postgres.dialect import CATALOG
from dagster_databus.sources.postgres.pgoutput import Relation


class PostgresCatalog(SqlCatalog[PgCursor]):
    """The configured tables' schemas, read from the database, and moved on by the stream (``adopt``)."""

    def __init__(self, connector: PostgresConnector) -> None:
        config = connector.config
        super().__init__(CATALOG, connector.name, config.tables, connector.connect,
                         f"schema {config.schema_!r} of database {config.database!r}", {"schema": config.schema_})
        self.connector = connector
        self.config = config

    def adopt(self, schemas: Mapping[str, TableSchema]) -> None:
        """These schemas become the current ones of their tables (the shapes a decoded chunk was written with)."""
        current = dict(self.schemas())
        current.update(schemas)
        self._schemas = current

    def quoted_table(self, table: str) -> str:
        return f"{quote_ansi(self.config.schema_)}.{quote_ansi(table)}"

    def columns_of(self, cur: Any, table: str, where: str) -> Sequence[tuple[Any, ...]] | None:
        return self.read_columns(cur, table) or None

    def read_columns(self, cur: Any, table: str) -> list[tuple[Any, ...]]:
        """The catalog's rows for ``table``'s live columns, in the table's order (none: no such table)."""
        rows = self.rows(cur, self.dialect.columns, table=table)
        if not rows or rows[0][0] is None:
            return []
        names, types, typmods = rows[0]
        return self.described(cur, table, names, types, typmods)

    def described(self, cur: Any, table: str, names: Sequence[str], types: Sequence[int],
                  typmods: Sequence[int]) -> list[tuple[Any, ...]]:
        """The rows ``build`` maps for columns given by name, type oid and modifier (a table's, or a relation
        message's), in that order (``sql/postgres/described_columns.sql``)."""
        cur.execute(sqlfiles.load("postgres", "described_columns.sql"),
                    {"names": list(names), "types": list(types), "typmods": list(typmods),
                     "schema": self.config.schema_, "table": table})
        return list(cur.fetchall())

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

    def check_table(self, cur: Any, table: str, where: str) -> None:
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
