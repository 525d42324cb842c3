"""Schema changes applied to a snapshot in place (``schema_changes: evolve``), and when they cannot be.

A change evolves in place when every value the snapshot holds stays exact and no row needs a value
the change log never carried: columns added (the source gives existing rows NULL) and types widened
(int → long, float → double, decimal(p,s) → decimal(p+k,s+j) with no fewer integer digits). Such
changes commute, so the snapshot is evolved once to the newest registered schema, then merges the
log, older events included. A dropped or renamed column, a narrowing or other type change, a new key,
a TRUNCATE, or a column added with a non-NULL default (the source filled existing rows without row
events) needs the table read again; ``plan`` says which and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from dagster_databus.core.schema import TableSchema
from dagster_databus.log.ddl import DdlRecord

# Statements that change rows or names without row events: never evolved in place, whatever the columns say
# (a column dropped and added again under its name has lost its values). SQLite's install reports missing
# triggers and changes it could not repair in its own words.
_NOT_IN_PLACE = re.compile(r"\b(DROP|RENAME|CHANGE|TRUNCATE)\b|triggers .* were missing|not repaired",
                           re.IGNORECASE)
# A column added with anything that fills existing rows: a default (other than NULL), NOT NULL (MySQL fills the
# type's implicit default), a generated or auto-increment value. Capture may not know the column's default
# (a binlog's table map has none), so the statement itself is read.
_FILLS = re.compile(r"\bADD\b.*(\bDEFAULT\s+(?!NULL\b)|\bNOT\s+NULL\b|\bAS\s*\(|\bAUTO_INCREMENT\b|\bGENERATED\b)",
                    re.IGNORECASE | re.DOTALL)
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


@dataclass(frozen=True, slots=True)
class Evolution:
    added: tuple[str, ...]
    widened: tuple[str, ...]  # "name: old → new"
    refused: tuple[str, ...]  # why the change cannot evolve in place

    @property
    def in_place(self) -> bool:
        return not self.refused

    @property
    def changes_nothing(self) -> bool:
        """No column added, widened or otherwise changed, and no statement that changes rows (an index added,
        a table option): the snapshot has nothing to follow."""
        return not (self.added or self.widened or self.refused)

    def describe(self) -> str:
        parts = [f"added {', '.join(self.added)}"] if self.added else []
        parts += [f"widened {', '.join(self.widened)}"] if self.widened else []
        return "; ".join(parts) or "no column change"


def plan(held: pa.Schema, schema: TableSchema, key: Sequence[str], statements: Sequence[DdlRecord]) -> Evolution:
    """How the snapshot's columns ``held`` (and its key ``key``) become ``schema`` after ``statements``."""
    target = schema.arrow(with_meta=False)
    names = set(held.names)
    refused = [f"{r.statement.strip()[:100]!r} (SCN {r.scn}) changes rows or names without row events"
               for r in statements if _NOT_IN_PLACE.search(r.statement)]
    refused += [f"{r.statement.strip()[:100]!r} (SCN {r.scn}) fills existing rows with a value no event carried"
                for r in statements if _FILLS.search(r.statement)]
    refused += [f"column {name} is gone (dropped or renamed)" for name in held.names
                if not name.startswith("__") and name not in target.names]
    if tuple(key) != tuple(schema.primary_key):
        refused.append(f"the key changed from {list(key)} to {list(schema.primary_key)}")
    added, widened = [], []
    for field in target:
        column = schema.column(field.name)
        if field.name not in names:
            if column.default is not None:
                refused.append(f"column {field.name} was added with DEFAULT {column.default}: the source gave existing "
                               "rows that value without row events")
            else:
                added.append(field.name)
            continue
        old = held.field(field.name).type
        if old != field.type:
            if _widens(old, field.type):
                widened.append(f"{field.name}: {old} → {field.type}")
            else:
                refused.append(f"column {field.name} changed type from {old} to {field.type}, which does not hold "
                               "every old value exactly")
    return Evolution(tuple(added), tuple(widened), tuple(refused))


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    if old in _INTS and new in _INTS:
        return _INTS.index(new) > _INTS.index(old)
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    if old in _INTS and pa.types.is_decimal(new):
        digits = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}[old]
        return new.precision - new.scale >= digits
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return False
