"""What every kind's catalog checks of a configured table while it reads the table's schema: every column's
type mapped, plain column names distinct in any case, the key columns present and covered by a primary key or
UNIQUE index, and whether the key columns hold NULL (``null_keys``). Each kind's own catalog (``<kind>.catalog``)
reads its database's dictionary and calls these."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dagster_databus.core.identifiers import RESERVED_PREFIX, is_plain_name
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import ConfigError, UnsupportedTypeError


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


def require_unique_key(key: Sequence[str], unique_column_sets: Iterable[set[str]], table: str, where: str) -> None:
    """Refuse a key no primary key or unique index covers: two rows could share it."""
    wanted = {k.lower() for k in key}
    if not any(cols and {c.lower() for c in cols} <= wanted for cols in unique_column_sets):
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
