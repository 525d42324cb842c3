"""A PostgreSQL table's columns as the change log last wrote them (its "shape"), carried in the capture
checkpoint's state so a relation message can be told apart as a schema change or not, and the change between two
shapes as the DDL text ``sync.evolve`` reads. A shape also holds each column's product type, so a capture
lagging behind a migration decodes old rows of a column whose type was dropped since as the log recorded it."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType

# The checkpoint state that holds each table's columns as the log last wrote them:
# {table: [[name, declared type, product type]...]} (checkpoints before held [name, declared type]).
SHAPES = "shapes"

Shape = list[list[str]]


def shape_of(schema: TableSchema) -> Shape:
    return [[c.name, c.source_type, str(c.type)] for c in schema.columns]


def same_shape(a: Shape | None, b: Shape | None) -> bool:
    """The same columns with the same declared types (a checkpoint's older two-part entries compare alike)."""
    return a is not None and b is not None and [e[:2] for e in a] == [e[:2] for e in b]


def shapes_state(shapes: Mapping[str, Shape]) -> dict[str, str]:
    return {SHAPES: json.dumps(shapes, separators=(",", ":"), sort_keys=True)}


def recorded_columns(shape: Shape | None) -> dict[str, Column]:
    """The columns a shape records whole (name, declared and product type), by name."""
    return {e[0]: Column(e[0], ColumnType.parse(e[2]), e[1]) for e in shape or [] if len(e) > 2}


def describe_change(before: Shape, after: TableSchema) -> str:
    """The column change between two shapes of a table, as the statement ``sync.evolve`` reads."""
    old = {e[0]: e[1] for e in before}
    new = {c.name: c for c in after.columns}
    parts = [f"DROP COLUMN {n}" for n in old if n not in new]
    # A column keeps its place for life: one that moved was dropped and added again under its name (its values
    # are new ones), however alike its type.
    kept, now = [n for n in old if n in new], [n for n in new if n in old]
    moved = [n for i, n in enumerate(now) if kept[i] != n]
    parts += [f"DROP COLUMN {n}, ADD COLUMN {n} {new[n].source_type}" for n in moved]
    for name, column in new.items():
        if name in moved:
            continue
        if name not in old:
            default = f" DEFAULT {column.default}" if column.default is not None else ""
            parts.append(f"ADD COLUMN {name} {column.source_type}{default}")
        elif old[name] != column.source_type:
            parts.append(f"ALTER COLUMN {name} TYPE {column.source_type}")
    return f"ALTER TABLE {after.table} " + ", ".join(parts or ["(relation changed)"])


def unseen_changes(live: Mapping[str, TableSchema], described: Collection[str],
                   shapes: Mapping[str, Shape]) -> dict[str, str]:
    """Each table whose columns (``live``: the catalog's, read before the poll's bound) differ from the shape the
    log last wrote, and of which no relation message came (not in ``described``): its statement. Such a table was
    altered and not written since, so only the catalog tells of its change."""
    return {name: describe_change(shapes[name], schema) for name, schema in live.items()
            if name not in described and name in shapes and not same_shape(shapes[name], shape_of(schema))}
