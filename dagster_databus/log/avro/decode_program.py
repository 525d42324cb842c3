"""The decoder's programs: each union branch of a container's schema (one row record per table
and schema version) compiled into a tiny program, one op code per field, that the kernel
(``decode_kernels.decode_records``) interprets record by record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dagster_databus.log.avro.fields import Field, avro_shape, record_fields, short, written_shape

# Field op codes the kernel interprets. Two-slot ops: BYTES keeps (start in the block, length),
# DEC128 the 128-bit unscaled value as (low, high) 64-bit halves.
LONG, BOOL, FLOAT, DOUBLE, BYTES, DEC128 = range(6)
_TWO_SLOTS = (BYTES, DEC128)
_SKIP_OPS = {"boolean": BOOL, "int": LONG, "long": LONG, "float": FLOAT, "double": DOUBLE, "bytes": BYTES,
             "string": BYTES}


def op_of(f: Field) -> int:
    """The op code the kernel reads ``f`` with."""
    kind = f.type.kind
    if kind == "decimal" and not f.type.as_text_in_delta:
        return DEC128
    if kind in ("decimal", "number", "string", "binary"):
        return BYTES
    return {"boolean": BOOL, "float": FLOAT, "double": DOUBLE}.get(kind, LONG)


@dataclass(frozen=True, slots=True)
class Branch:
    """One union branch (a row record) as the kernel runs it: an op code, nullability and first
    slot per field, and the Arrow schema its rows are cut into."""

    name: str
    fields: tuple[Field, ...]  # empty for branches only skipped over
    ops: tuple[int, ...]
    nullable: tuple[bool, ...]
    slots: tuple[int, ...]
    width: int
    schema: pa.Schema | None  # None: not wanted, its records are only skipped over


def compile_branch(name: str, record: Mapping[str, Any], wanted: Sequence[Field] | None) -> Branch:
    """The program of the branch ``name`` (``record``): ``wanted`` fields decoded, or None: only skipped over."""
    specs = record_fields(record)
    shapes = [avro_shape(spec["type"], spec["name"]) for spec in specs]
    if wanted is None:  # only skipped over: the encoding is all that matters
        ops = tuple(_SKIP_OPS[shape[1]] for shape in shapes)
        fields: tuple[Field, ...] = ()
        schema = None
    else:
        fields = tuple(wanted)
        names = [spec["name"] for spec in specs]
        if names != [f.name for f in fields]:
            raise ValueError(f"branch {name}: the container's fields {names} are not the expected "
                             f"{[f.name for f in fields]}")
        for f, shape in zip(fields, shapes, strict=True):
            if shape != written_shape(f):
                raise ValueError(f"branch {name}, field {f.name}: the container's Avro type "
                                 f"{short(next(s['type'] for s in specs if s['name'] == f.name))} is not how "
                                 f"{'nullable ' if f.nullable else ''}{f.type} is written ({short(f.type.avro())})")
        ops = tuple(op_of(f) for f in fields)
        # Nullable like the writer's input: pa.field's default, as in TableSchema.arrow and EVENT_SCHEMA.
        schema = pa.schema([pa.field(f.name, f.type.arrow()) for f in fields])
    slots, width = [], 0
    for op in ops:
        slots.append(width)
        width += 2 if op in _TWO_SLOTS else 1
    return Branch(name, fields, ops, tuple(shape[0] for shape in shapes), tuple(slots), width, schema)


def full_name(record: Mapping[str, Any]) -> str:
    """The record's full name as fastavro reports it (``return_record_name=True``)."""
    name = record.get("name")
    if not isinstance(name, str):
        raise ValueError(f"a record without a name: {short(record)}")
    namespace = record.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"
