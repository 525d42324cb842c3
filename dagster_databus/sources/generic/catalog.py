"""The catalog of a SQL source, written once: the configured tables' schemas read from the database's dictionary
(every column's type mapped, plain column names distinct in any case, the key columns present and covered by a
primary key or UNIQUE index), kept until read again, and whether the key columns hold NULL (``null_keys``).

A kind describes only what differs in a ``CatalogDialect`` (its dictionary queries, quoting and type mapping),
and adds what is its own by overriding the hooks of ``SqlCatalog`` (``check_database``, ``columns_of``,
``column_name``, ``check_table``, ``unique_sets``, ``quoted_table``, ``quoted_column``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from dagster_databus.core.identifiers import RESERVED_PREFIX, is_plain_name
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import ConfigError, SchemaDriftError, UnsupportedTypeError

Row = tuple[Any, ...]


class Cursor(Protocol):
    """What the catalog uses of a DB-API cursor: queries with named parameters, and their rows."""

    def execute(self, sql: str, params: Any, /) -> object: ...

    def fetchall(self) -> Sequence[Any]: ...

    def close(self) -> object: ...


C = TypeVar("C", bound=Cursor)
C_co = TypeVar("C_co", bound=Cursor, covariant=True)


class Connection(Protocol[C_co]):
    """A DB-API connection, as far as the catalog opens cursors on it."""

    def cursor(self) -> C_co: ...

    def close(self) -> object: ...


def _as_given(query: str) -> str:
    return query


@dataclass(frozen=True)
class CatalogDialect:
    """What a kind's catalog says in its own SQL. Queries take named parameters: the catalog's own (``params``)
    and, for one table, ``table_name``; each is SQL text, or the name of a SQL file when ``sql`` loads them."""

    label: str  # the kind, as docs/types.md names its type mapping
    unmapped_fix: str  # what to do about a column whose declared type has no mapping
    container: str  # what holds the tables ("database", "schema"), as the fix for a missing table names it
    tables: str  # the names of the tables a missing one could be, in order
    columns: str  # a table's columns in its order, the name first: what ``column`` maps
    unique: str  # (name, column) of each column of a table's primary key and plain unique indexes
    # The column a row of ``columns`` describes (given its name as the snapshot has it); the text naming it when
    # its declared type has no mapping; None when its type is gone (a stream described it before a drop).
    column: Callable[[str, Row], Column | str | None]
    quote: Callable[[str], str]  # a validated identifier, quoted
    first_row: str  # what ends a query to read its first row only (" LIMIT 1")
    sql: Callable[[str], str] = _as_given  # a query field's SQL: itself, or the SQL file it names


class SqlCatalog(Generic[C]):
    """The configured tables' schemas, read once (``preflight`` again reads them afresh), and the tables whose
    key holds NULL. ``connect`` opens a connection to the database the schemas are read from; ``place`` says
    where the tables are (a message names it); ``params`` are the dialect's queries' own parameters."""

    def __init__(self, dialect: CatalogDialect, name: str, tables: Sequence[Any], connect: Callable[[], Connection[C]],
                 place: str, params: Mapping[str, Any] | None = None) -> None:
        self.dialect = dialect
        self.name = name
        self.tables = tables
        self.place = place
        self.params = dict(params or {})
        self._connect = connect
        self._schemas: dict[str, TableSchema] | None = None

    def field(self, suffix: str) -> str:
        """The config field ``suffix`` of this source, as errors name it."""
        return f"sources.{self.name}.{suffix}"

    @contextmanager
    def cursor(self) -> Iterator[C]:
        """A cursor on a connection of its own, both closed after."""
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            yield cur

    def preflight(self) -> Mapping[str, TableSchema]:
        with self.cursor() as cur:
            self.check_database(cur)
            self._schemas = table_schemas(self.tables, partial(self.table_schema, cur))
        return self._schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (a UNIQUE key may)."""
        problems = []
        with self.cursor() as cur:
            for schema in self.schemas().values():
                keys = [self.quoted_column(schema.table, k) for k in schema.primary_key]
                query = null_key_query(self.quoted_table(schema.table), keys) + self.dialect.first_row
                cur.execute(query, {})
                problem = null_key_problem(schema, bool(cur.fetchall()))
                if problem:
                    problems.append(problem)
        return problems

    def rows(self, cur: C, query: str, **params: Any) -> Sequence[Any]:
        """The rows of a dialect's ``query`` field, with the catalog's parameters and ``params``."""
        cur.execute(self.dialect.sql(query), {**self.params, **params})
        return cur.fetchall()

    def table_schema(self, cur: C, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        """The schema of configured table ``index``, checked to be captured as configured."""
        where = self.field(f"tables[{index}]")
        rows = self.columns_of(cur, table, where)
        if rows is None:
            existing = ", ".join(r[0] for r in self.rows(cur, self.dialect.tables)) or "(none)"
            raise ConfigError(f"{where}.name", f"table {table!r} does not exist in {self.place}",
                              f"use one of the {self.dialect.container}'s tables: {existing}")
        schema = self.build(table, key, rows, where)
        self.check_table(cur, table, where)
        require_unique_key(schema.primary_key, self.unique_sets(cur, table, schema.primary_key, where), table, where)
        return schema

    def build(self, table: str, key: Sequence[str], rows: Sequence[Row], where: str,
              recorded: Mapping[str, Column] | None = None) -> TableSchema:
        """The schema of ``table`` from rows of the dialect's ``columns``, every column mapped or refused by name.
        A column whose type is gone is the ``recorded`` one of its name (what the change log last recorded)."""
        columns, unmapped = [], []
        for row in rows:
            name = self.column_name(row[0])
            check_column_name(name, table, where)
            try:
                column = self.dialect.column(name, row)
            except UnsupportedTypeError as exc:
                raise UnsupportedTypeError(f"source {self.name!r}, table {table!r}: {exc.problem}", exc.fix,
                                           source=self.name, table=table) from None
            if isinstance(column, str):
                unmapped.append(column)
            else:
                columns.append(column if column is not None else self._recorded(table, name, recorded or {}))
        require_mapped(self.name, table, unmapped, self.dialect.label, self.dialect.unmapped_fix)
        return TableSchema(source=self.name, table=table, columns=tuple(columns),
                           primary_key=resolve_key(columns, key, table, where))

    def _recorded(self, table: str, name: str, recorded: Mapping[str, Column]) -> Column:
        if name not in recorded:
            raise SchemaDriftError(
                f"source {self.name!r}, table {table!r}: the type of column {name} was dropped before capture read "
                "the changes written with it, and the change log has no record of the column to decode them by",
                f"run `databus bootstrap --source {self.name}` (the changes still waiting are read in the table's "
                "current columns instead)", source=self.name, table=table)
        return recorded[name]

    # -- hooks: what a kind may do its own way ---------------------------------------------------------------

    def check_database(self, cur: C) -> None:
        """Refuse the database as a whole before its tables are read (none here)."""

    def columns_of(self, cur: C, table: str, where: str) -> Sequence[Row] | None:
        """The rows of the dialect's ``columns`` for ``table``; None when there is no such table."""
        return self.rows(cur, self.dialect.columns, table_name=table) or None

    def column_name(self, name: str) -> str:
        """A column's name in the snapshot, from its name in the dictionary (the same here)."""
        return name

    def check_table(self, cur: C, table: str, where: str) -> None:
        """Refuse a table, its columns and key known, for a reason of the kind's own (none here)."""

    def unique_sets(self, cur: C, table: str, key: tuple[str, ...], where: str) -> list[set[str]]:
        """The column sets of ``table``'s primary key and unique indexes (``key``: the key configured)."""
        sets: dict[Any, set[str]] = {}
        for name, column in self.rows(cur, self.dialect.unique, table_name=table):
            sets.setdefault(name, set()).add(column)
        return list(sets.values())

    def quoted_table(self, table: str) -> str:
        return self.dialect.quote(table)

    def quoted_column(self, table: str, column: str) -> str:
        return self.dialect.quote(column)


def require_mapped(source: str, table: str, unmapped: Sequence[str], kind: str, fix: str) -> None:
    """Refuse a table with columns whose declared type has no mapping, naming all of them at once."""
    if unmapped:
        raise UnsupportedTypeError(
            f"source {source!r}, table {table!r}: column(s) {', '.join(unmapped)} have a declared type with no "
            f"mapping to a change-log and snapshot type (docs/types.md lists the {kind} mapping)",
            f"{fix}, or leave the table out of capture", source=source, table=table)


def table_schemas(tables: Sequence[Any], build: Callable[[int, str, tuple[str, ...]], TableSchema]
                  ) -> dict[str, TableSchema]:
    """``build(index, name, key)`` for every configured table; unmapped column types of all tables are
    reported together, so one validate run names every column to change."""
    schemas, unmapped = {}, []
    for i, table in enumerate(tables):
        try:
            schemas[table.name] = build(i, table.name, table.primary_key)
        except UnsupportedTypeError as exc:
            unmapped.append(exc)
    if len(unmapped) == 1:
        raise unmapped[0]
    if unmapped:
        raise UnsupportedTypeError("; ".join(e.problem for e in unmapped), unmapped[0].fix,
                                   source=unmapped[0].context.get("source"))
    return schemas


def check_column_name(name: str, table: str, where: str) -> None:
    """Capture needs plain column names that do not collide with the snapshot's metadata columns."""
    if not is_plain_name(name) or name.startswith(RESERVED_PREFIX):
        raise ConfigError(
            f"{where}.name", f"table {table!r} has a column named {name!r}, which is not a plain identifier "
            f"(or starts with the reserved {RESERVED_PREFIX!r})",
            "rename the column, or leave this table out of capture")


def require_distinct_names(columns: Sequence[Column], table: str, where: str) -> None:
    """Refuse columns whose names differ only in case (quoted identifiers may): Delta Lake's column names are
    case-insensitive, so a snapshot cannot hold both."""
    seen: dict[str, str] = {}
    for column in columns:
        other = seen.setdefault(column.name.lower(), column.name)
        if other != column.name:
            raise ConfigError(
                f"{where}.name", f"table {table!r} has columns {other!r} and {column.name!r}, whose names differ "
                "only in case: Delta Lake's column names are case-insensitive, so the snapshot cannot hold both",
                f"rename one of them (ALTER TABLE {table} RENAME COLUMN \"{column.name}\" TO <a name no other "
                "column has in any case>), or leave this table out of capture")


def resolve_key(columns: Sequence[Column], key: Sequence[str], table: str, where: str) -> tuple[str, ...]:
    """The configured key columns as the table spells them (matched case-insensitively); the table's column
    names first checked to be distinct in any case, which that matching and the snapshot need."""
    require_distinct_names(columns, table, where)
    names = {c.name.lower(): c.name for c in columns}
    missing = [k for k in key if k.lower() not in names]
    if missing:
        raise ConfigError(f"{where}.primary_key", f"table {table!r} has no column {', '.join(map(repr, missing))}",
                          f"name the table's key columns; it has: {', '.join(c.name for c in columns)}")
    return tuple(names[k.lower()] for k in key)


def covered(key: Sequence[str], unique_column_sets: Iterable[set[str]]) -> bool:
    """Whether one of the column sets (none empty) is part of ``key``, compared in any case: then no two rows
    share the key."""
    wanted = {k.lower() for k in key}
    return any(cols and {c.lower() for c in cols} <= wanted for cols in unique_column_sets)


def require_unique_key(key: Sequence[str], unique_column_sets: Iterable[set[str]], table: str, where: str) -> None:
    """Refuse a key no primary key or unique index covers: two rows could share it."""
    if not covered(key, unique_column_sets):
        raise ConfigError(
            f"{where}.primary_key", f"columns {list(key)} are not the primary key of {table!r} nor covered by a "
            "UNIQUE index, so two rows could share a key and the snapshot would lose one",
            "name the table's PRIMARY KEY columns, or add a UNIQUE index on the columns you named")


def null_key_problem(schema: TableSchema, found: bool) -> str | None:
    """``validate``'s problem for a table whose key columns hold NULL (``found``), with the fix."""
    if not found:
        return None
    key = ", ".join(schema.primary_key)
    return (f"table {schema.table!r} has rows whose key ({key}) holds NULL: a NULL key identifies no row, and rows "
            f"sharing it would fold into one, so capture and bootstrap refuse them. Fix: give those rows a key and "
            f"declare the key columns NOT NULL, or configure a key that is never NULL")


def null_key_query(table: str, key: Sequence[str]) -> str:
    """SQL finding one row whose key holds NULL; ``table`` and ``key`` already quoted by the caller."""
    return f"SELECT 1 FROM {table} WHERE {' OR '.join(f'{k} IS NULL' for k in key)}"
