"""A PostgreSQL table's columns as the change log last wrote them (its "shape"), carried in the capture
checkpoint's state so a relation message can be told apart as a schema change or not, and the change between two
shapes as the DDL text ``snapshot.evolve`` reads."""

from __future__ import annotations

import json
from collections.abc import Mapping

from dagster_databus.core.schema import TableSchema

# The checkpoint state that holds each table's columns as the log last wrote them: {table: [[name, type]...]}.
SHAPES = "shapes"

Shape = list[list[str]]


def shape_of(schema: TableSchema) -> Shape:
    return [[c.name, c.source_type] for c in schema.columns]


def shapes_state(shapes: Mapping[str, Shape]) -> dict[str, str]:
    return {SHAPES: json.dumps(shapes, separators=(",", ":"), sort_keys=True)}


def describe_change(before: Shape, after: TableSchema) -> str:
    """The column change between two shapes of a table, as the statement ``snapshot.evolve`` reads."""
    old = dict((name, declared) for name, declared in before)
    new = {c.name: c for c in after.columns}
    parts = [f"DROP COLUMN {n}" for n in old if n not in new]
    for name, column in new.items():
        if name not in old:
            default = f" DEFAULT {column.default}" if column.default is not None else ""
            parts.append(f"ADD COLUMN {name} {column.source_type}{default}")
        elif old[name] != column.source_type:
            parts.append(f"ALTER COLUMN {name} TYPE {column.source_type}")
    return f"ALTER TABLE {after.table} " + ", ".join(parts or ["(relation changed)"])
