"""Schema changes applied to a snapshot in place (``schema_changes: evolve``), and when they cannot be.

A change is harmless only when proven: it evolves in place when every value the snapshot holds stays exact and
no row needs a value the change log never carried. The allow-list: columns added (the source gives existing rows
NULL, or the constant default the column was added with, which the snapshot fills in itself: ``core.defaults``),
and a column's declared type changed where the source kind proves the change keeps every stored value
(``SourceKind.keeps_values``: a wider integer, a longer VARCHAR; none for a kind whose log does not show the
statement's conversion, as an ``ALTER ... USING`` expression). Such changes commute, so the snapshot is evolved once
to the newest registered schema, then merges the log, older events included (read with the same default:
``log.columns``). Everything else needs the table read again: a dropped or renamed column, any other type change
(one the source converts values for: ``USING``, fewer fractional seconds, CHAR padding, signedness, a character
set), a new key, a TRUNCATE, a column added with a default that is not a constant (``CURRENT_TIMESTAMP``, an
expression), NOT NULL without a default, or a generated value; ``plan`` says which and why. Only a statement that
touches no column (an index, a table option) changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from dagster_databus.core.defaults import NOT_CONSTANT, constant_value
from dagster_databus.core.schema import TableSchema
from dagster_databus.log.ddl import DdlRecord

# Statements that change rows or names without row events: never evolved in place, whatever the columns say
# (a column dropped and added again under its name has lost its values; a table created, swapped in, or given
# another's partition or tablespace holds other rows). A kind whose install repairs capture objects reports
# missing ones and changes it could not repair in its own words.
_NOT_IN_PLACE = re.compile(r"\b(DROP|RENAME|CHANGE|TRUNCATE|EXCHANGE|DISCARD|IMPORT)\b"
                           r"|\bCREATE\s+(OR\s+REPLACE\s+)?TABLE\b"
                           r"|triggers .* were missing|not repaired|\(relation changed\)|storage changed",
                           re.IGNORECASE)
# A column added with what fills existing rows by a rule the snapshot cannot follow: a generated or
# auto-increment value, or NOT NULL without a default (a server may fill the type's implicit default).
_FILLS = re.compile(r"\bADD\b.*(\bAS\s*\(|\bAUTO_INCREMENT\b|\bGENERATED\b)", re.IGNORECASE | re.DOTALL)
_NOT_NULL = re.compile(r"\bNOT\s+NULL\b", re.IGNORECASE)
_DEFAULT = re.compile(r"\bDEFAULT\b", re.IGNORECASE)
# A default changed after the column was added: the registered default may not be the one rows were given.
_DEFAULT_CHANGED = re.compile(r"\b(SET\s+DEFAULT|DROP\s+DEFAULT|MODIFY|ALTER\s+(COLUMN\s+)?\S+\s+SET)\b",
                              re.IGNORECASE)
# A statement that changes a column's type, character set or NULL-ability: the source may have converted every
# stored value, with no row events (MODIFY, or ALTER COLUMN ... TYPE ... USING). A character
# set named elsewhere (a column added with one, a table's default for new columns) converts nothing.
_RETYPES = re.compile(r"\b(MODIFY|ALTER\s+(COLUMN\s+)?\S+\s+(SET\s+DATA\s+)?TYPE|CONVERT\s+TO|USING)\b",
                      re.IGNORECASE)
# What a retyping statement may say beside the type and still be proven: NOT NULL fills a NULL with the type's
# zero under a permissive sql_mode, a character set or collation converts text.
_CONVERTS = re.compile(r"\b(NOT\s+NULL|CONVERT\s+TO|CHARACTER\s+SET|CHARSET|COLLATE|USING)\b", re.IGNORECASE)
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())

KeepsValues = Callable[[str, str], bool]  # (old declared type, new declared type) -> every value kept as it was


@dataclass(frozen=True, slots=True)
class Evolution:
    added: tuple[str, ...]
    widened: tuple[str, ...]  # "name: old → new"
    refused: tuple[str, ...]  # why the change cannot evolve in place
    filled: dict[str, pa.Scalar] = field(default_factory=dict)  # added columns' defaults, as the rows get them
    retyped: tuple[str, ...] = ()  # "name: old → new" declared types, proven to keep every value

    @property
    def in_place(self) -> bool:
        return not self.refused

    @property
    def changes_nothing(self) -> bool:
        """No column added, widened or otherwise changed, and no statement that changes rows (an index added,
        a table option): the snapshot has nothing to follow."""
        return not (self.added or self.widened or self.retyped or self.refused)

    def describe(self) -> str:
        added = [f"{n} (filled with {self.filled[n]})" if n in self.filled else n for n in self.added]
        parts = [f"added {', '.join(added)}"] if added else []
        parts += [f"widened {', '.join(self.widened)}"] if self.widened else []
        parts += [f"retyped {', '.join(self.retyped)}"] if self.retyped else []
        return "; ".join(parts) or "no column change"


def plan(held: pa.Schema, versions: Sequence[TableSchema], key: Sequence[str], statements: Sequence[DdlRecord],
         keeps_values: KeepsValues | None = None) -> Evolution:
    """How the snapshot's columns ``held`` (and its key ``key``) become ``versions[-1]`` after ``statements``;
    ``versions`` are the table's registered schemas, oldest first, and ``keeps_values`` the source kind's proof
    that a declared type change keeps every value (None: no type change is proven)."""
    schema = versions[-1]
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
    retyped = _retyped(held, versions, statements, keeps_values, refused)
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
    described = tuple(f"{name}: {old} → {new}" for name, (old, new) in retyped.items())
    return Evolution(tuple(added), tuple(widened), tuple(refused), filled, described)


def _retyped(held: pa.Schema, versions: Sequence[TableSchema], statements: Sequence[DdlRecord],
             keeps_values: KeepsValues | None, refused: list[str]) -> dict[str, tuple[str, str]]:
    """The columns a retyping statement names, each as (old, new) declared type where the change is proven to
    keep every value; a reason added to ``refused`` for each that is not. A column's old type is the one of the
    newest registered version that declares it otherwise (a version is registered when the source's declared
    types change)."""
    schema = versions[-1]
    retypes = [r for r in statements if _RETYPES.search(r.statement)]
    if not retypes:
        return {}
    proven: dict[str, tuple[str, str]] = {}
    seen: set[str] = set()
    for record in retypes:
        text, where = record.statement, f"{record.statement.strip()[:100]!r} (SCN {record.scn})"
        named = [c for c in schema.columns if c.name in held.names
                 and re.search(rf"(?<![\w$]){re.escape(c.name)}(?![\w$])", text)]
        if not named:
            refused.append(f"{where} changes columns the schema cannot tell apart (a table's character set, a "
                           "conversion): the source may have rewritten their values")
            continue
        if _CONVERTS.search(text):
            refused.append(f"{where} converts values (NOT NULL, a character set or collation, USING) the change "
                           "log has no events for")
            continue
        for column in named:
            if column.name in seen:  # the versions between two statements may never have been registered
                refused.append(f"{where} changes column {column.name} again: each step is not known")
                proven.pop(column.name, None)
                continue
            seen.add(column.name)
            old = next((v.column(column.name) for v in reversed(versions[:-1]) if column.name in v.column_names
                        and v.column(column.name).source_type != column.source_type), None)
            if old is None:
                refused.append(f"{where} changes column {column.name} in a way its declared type "
                               f"({column.source_type}) does not show: its values may have been rewritten")
            elif keeps_values is None or not keeps_values(old.source_type, column.source_type):
                refused.append(f"{where} changes column {column.name} from {old.source_type} to "
                               f"{column.source_type}, which is not proven to keep every value as it was")
            elif old.type.arrow() != held.field(column.name).type or (
                    old.type.arrow() != column.type.arrow() and not _widens(old.type.arrow(), column.type.arrow())):
                refused.append(f"{where} changes column {column.name} from {old.source_type} to "
                               f"{column.source_type}, but the snapshot holds it as {held.field(column.name).type}")
            else:
                proven[column.name] = (old.source_type, column.source_type)
    return proven


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
