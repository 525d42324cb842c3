"""Record fields as the change log writes them: a ``Field`` per column (its product type), and an
Avro record schema read back into ``Field`` s (``fields_of``), with the Avro type shapes both the
encoder's output and the decoder's input are checked against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dagster_databus.core.types import NUMBER_LOGICAL_TYPE, TIME_LOGICAL_TYPE, ColumnType, Kind


@dataclass(frozen=True, slots=True)
class Field:
    """How one record field is encoded: ``type`` as the column's product type, or an event field's
    Avro primitive (``long``, ``int``, ``string``); ``nullable`` for ``["null", T]`` unions."""

    name: str
    type: ColumnType
    nullable: bool = True


_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_PRIMITIVE_KINDS: dict[str, Kind] = {
    "boolean": "boolean", "int": "integer", "long": "long", "float": "float", "double": "double", "string": "string",
    "bytes": "binary"}
_LOGICAL_KINDS: dict[tuple[str, str], Kind] = {
    ("int", "date"): "date", ("long", "timestamp-micros"): "timestamp",
    ("long", "local-timestamp-micros"): "timestamp_ntz", ("long", TIME_LOGICAL_TYPE): "time",
    ("string", NUMBER_LOGICAL_TYPE): "number"}
# Shape of a field's Avro type: (nullable, primitive, logicalType, precision, scale).
Shape = tuple[bool, str, str | None, int, int]


def fields_of(record: Mapping[str, Any]) -> list[Field]:
    """The fields of an Avro record schema as ``Field`` s, each Avro type read back as the product type
    ``ColumnType.avro`` writes it as (Avro ``int`` as ``integer``: byte and short are not told apart).

    ``ValueError`` for types no product type is written as (records, arrays, maps, enums, fixed,
    other logical types, unions other than ``["null", T]``).
    """
    fields = []
    for spec in record_fields(record):
        nullable, primitive, logical, precision, scale = avro_shape(spec["type"], spec["name"])
        if primitive == "bytes" and logical == "decimal":
            column = ColumnType.decimal(precision, scale)
        elif logical is not None:
            kind = _LOGICAL_KINDS.get((primitive, logical))
            if kind is None:
                raise ValueError(f"field {spec['name']}: logical type {logical!r} on {primitive} is not a product type")
            column = ColumnType(kind)
        else:
            column = ColumnType(_PRIMITIVE_KINDS[primitive])
        fields.append(Field(spec["name"], column, nullable))
    return fields


def record_fields(record: Any) -> list[dict[str, Any]]:
    """The field specs of an Avro record schema; ``ValueError`` for anything else."""
    if not (isinstance(record, Mapping) and record.get("type") == "record" and isinstance(record.get("fields"), list)):
        raise ValueError(f"not an Avro record schema: {short(record)}")
    for spec in record["fields"]:
        if not (isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and "type" in spec):
            raise ValueError(f"record {record.get('name')!r}: not an Avro field: {short(spec)}")
    fields: list[dict[str, Any]] = record["fields"]
    return fields


def avro_shape(typ: Any, field: str) -> Shape:
    """A field's Avro type as (nullable, primitive, logicalType, precision, scale)."""
    if isinstance(typ, list):
        if len(typ) == 2 and _primitive(typ[0], field)[0] == "null" and _primitive(typ[1], field)[0] != "null":
            return (True, *_primitive(typ[1], field))
        raise ValueError(f"field {field}: union {short(typ)}: this decoder reads only [\"null\", T] unions")
    primitive = _primitive(typ, field)
    if primitive[0] == "null":
        raise ValueError(f"field {field}: a null-only field is not a product type")
    return (False, *primitive)


def _primitive(typ: Any, field: str) -> tuple[str, str | None, int, int]:
    if isinstance(typ, str) and typ in _PRIMITIVES:
        return typ, None, 0, 0
    if isinstance(typ, Mapping) and typ.get("type") in _PRIMITIVES:
        logical = typ.get("logicalType")
        if logical == "decimal":
            precision, scale = typ.get("precision"), typ.get("scale", 0)
            if typ["type"] != "bytes" or type(precision) is not int or type(scale) is not int:
                raise ValueError(f"field {field}: decimal {short(typ)}: this decoder reads bytes decimals "
                                 "with an integer precision and scale")
            return "bytes", "decimal", precision, scale
        return typ["type"], logical if isinstance(logical, str) else None, 0, 0
    raise ValueError(f"field {field}: Avro type {short(typ)} is not one this decoder reads "
                     "(primitives, logical types of primitives, [\"null\", T])")


def written_shape(f: Field) -> Shape:
    """The shape ``encode_records`` writes ``f`` in."""
    written = avro_shape(f.type.avro(), f.name)
    return (f.nullable, *written[1:])


def short(value: Any) -> str:
    """``value`` as JSON, cut to a length a message can hold."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
