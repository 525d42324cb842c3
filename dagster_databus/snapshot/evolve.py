"""Schema changes applied to a snapshot in place (``schema_changes: evolve``), and when they cannot be.

A change evolves in place when every value the snapshot holds stays exact and no row needs a value
the change log never carried: columns added (the source gives existing rows NULL, or the constant
default the column was added with, which the snapshot fills in itself: ``core.defaults``) and types
widened (int → long, float → double, decimal(p,s) → decimal(p+k,s+j) with no fewer integer digits).
Such changes commute, so the snapshot is evolved once to the newest registered schema, then merges the
log, older events included (read with the same default: ``log.columns``). A dropped or renamed column,
a narrowing or other type change, a new key, a TRUNCATE, or a column added with a default that is not a
constant (``CURRENT_TIMESTAMP``, an expression), NOT NULL without a default, or a generated value needs
the table read again; ``plan`` says which and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from dagster_databus.core.defaults import NOT_CONSTANT, constant_value
from dagster_databus.core.schema import TableSchema
from dagster_databus.log.ddl import DdlRecord

# Statements that change rows or names without row events: never evolved in place, whatever the columns say
# (a column dropped and added again under its name has lost its values). SQLite's install reports missing
# triggers and changes it could not repair in its own words.
_NOT_IN_PLACE = re.compile(r"\b(DROP|RENAME|CHANGE|TRUNCATE)\b|triggers .* were missing|not repaired",
                           re.IGNORECASE)
# A column added with what fills existing rows by a rule the snapshot cannot follow: a generated or
# auto-increment value, or NOT NULL without a default (MySQL fills the type's implicit default).
_FILLS = re.compile(r"\bADD\b.*(\bAS\s*\(|\bAUTO_INCREMENT\b|\bGENERATED\b)", re.IGNORECASE | re.DOTALL)
_NOT_NULL = re.compile(r"\bNOT\s+NULL\b", re.IGNORECASE)
_DEFAULT = re.compile(r"\bDEFAULT\b", re.IGNORECASE)
# A default changed after the column was added: the registered default may not be the one rows were given.
_DEFAULT_CHANGED = re.compile(r"\b(SET\s+DEFAULT|DROP\s+DEFAULT|MODIFY|ALTER\s+(COLUMN\s+)?\S+\s+SET)\b",
                              re.IGNORECASE)
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


@dataclass(frozen=True, slots=True)
class Evolution:
    added: tuple[str, ...]
    widened: tuple[str, ...]  # "name: old → new"
    refused: tuple[str, ...]  # why the change cannot evolve in place
    filled: dict[str, pa.Scalar] = field(default_factory=dict)  # added columns' defaults, as the rows get them

    @property
    def in_place(self) -> bool:
        return not self.refused

    @property
    def changes_nothing(self) -> bool:
        """No column added, widened or otherwise changed, and no statement that changes rows (an index added,
        a table option): the snapshot has nothing to follow."""
        return not (self.added or self.widened or self.refused)

    def describe(self) -> str:
        added = [f"{n} (filled with {self.filled[n]})" if n in self.filled else n for n in self.added]
        parts = [f"added {', '.join(added)}"] if added else []
        parts += [f"widened {', '.join(self.widened)}"] if self.widened else []
        return "; ".join(parts) or "no column change"


def plan(held: pa.Schema, schema: TableSchema, key: Sequence[str], statements: Sequence[DdlRecord]) -> Evolution:
    """How the snapshot's columns ``held`` (and its key ``key``) become ``schema`` after ``statements``."""
    target = schema.arrow(with_meta=False)
    names = set(held.names)
    refused = [f"{r.statement.strip()[:100]!r} (SCN {r.scn}) changes rows or names without row events"
               for r in statements if _NOT_IN_PLACE.search(r.statement)]
    refused += [f"{r.statement.strip()[:100]!r} (SCN {r.scn}) fills existing rows with a value no event carried"
                for r in statements if _FILLS.search(r.statement)
                or (_NOT_NULL.search(r.statement) and not _DEFAULT.search(r.statement))]
    refused += [f"column {name} is gone (dropped or renamed)" for name in held.names
                if not name.startswith("__") and name not in target.names]
    if tuple(key) != tuple(schema.primary_key):
        refused.append(f"the key changed from {list(key)} to {list(schema.primary_key)}")
    added, widened, filled = [], [], {}
    for target_field in target:
        name = target_field.name
        column = schema.column(name)
        if name not in names:
            value = constant_value(column.default, column.type)
            if value is NOT_CONSTANT:
                refused.append(f"column {name} was added with DEFAULT {column.default}, which is not a constant: "
                               "the source gave existing rows values no event carried")
            elif value is not None and any(_DEFAULT_CHANGED.search(r.statement) for r in statements):
                refused.append(f"column {name}'s default was changed after it was added: the value existing rows "
                               "were given is not known")
            else:
                added.append(name)
                if value is not None:
                    filled[name] = column.type.to_arrow([value])[0]
            continue
        old = held.field(name).type
        if old != target_field.type:
            if _widens(old, target_field.type):
                widened.append(f"{name}: {old} → {target_field.type}")
            else:
                refused.append(f"column {name} changed type from {old} to {target_field.type}, which does not hold "
                               "every old value exactly")
    return Evolution(tuple(added), tuple(widened), tuple(refused), filled)


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    if old in _INTS and new in _INTS:
        return _INTS.index(new) > _INTS.index(old)
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    if old in _INTS and pa.types.is_decimal(new):
        digits = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}[old]
        return bool(new.precision - new.scale >= digits)
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return bool(new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale)
    return False
