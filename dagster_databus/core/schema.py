"""Table schemas: source columns mapped to Avro, Arrow and Delta types in one place.

A ``TableSchema`` is what a source reports for a table. Its Avro form describes the payload
of that table's change events; versions are kept in the lake by ``log.schemas``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from dagster_databus.errors import SchemaMismatchError

LogicalType = Literal["long", "double", "string", "bytes", "boolean"]

ARROW_TYPES: dict[str, pa.DataType] = {
    "long": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "boolean": pa.bool_(),
}

# Metadata columns every snapshot carries beside the source's own columns. Delta's only
# timestamp type has microsecond precision, so commit times are stored that way.
META_COLUMNS: dict[str, pa.DataType] = {
    "__scn": pa.int64(),
    "__op": pa.string(),
    "__commit_ts": pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: LogicalType
    source_type: str = ""
    default: str | None = None  # the column's SQL default, as the source reports it


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Columns in source order; ``primary_key`` names a subset of them, in key order."""

    source: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def avro(self) -> dict[str, Any]:
        return {
            "type": "record",
            "name": self.table,
            "namespace": f"databus.{self.source}",
            "fields": [
                {"name": c.name, "type": ["null", c.type], "default": None} for c in self.columns
            ],
        }

    def arrow(self, with_meta: bool = True) -> pa.Schema:
        fields = [pa.field(c.name, ARROW_TYPES[c.type]) for c in self.columns]
        if with_meta:
            fields += [pa.field(name, typ) for name, typ in META_COLUMNS.items()]
        return pa.schema(fields)

    def fingerprint(self) -> str:
        body = json.dumps(
            {"columns": [[c.name, c.type] for c in self.columns], "pk": list(self.primary_key)},
            sort_keys=True,
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def coerce_row(self, row: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Values converted to the declared column types; a value that cannot be is an error."""
        return {c.name: coerce_value(row.get(c.name), c, self.table, where) for c in self.columns}


def coerce_value(value: Any, column: Column, table: str, where: str) -> Any:
    if value is None:
        return None
    kind = column.type
    ok: Any = _MISSING
    if kind == "long":
        if isinstance(value, bool):
            ok = int(value)
        elif isinstance(value, int):
            ok = value
        elif isinstance(value, float) and value.is_integer():
            ok = int(value)
    elif kind == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            ok = float(value)
    elif kind == "string":
        if isinstance(value, str):
            ok = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            ok = repr(value) if isinstance(value, float) and not math.isfinite(value) else str(value)
    elif kind == "bytes":
        if isinstance(value, bytes | bytearray | memoryview):
            ok = bytes(value)
        elif isinstance(value, str):
            ok = value.encode()
    elif kind == "boolean" and isinstance(value, bool | int):
        ok = bool(value)
    if ok is _MISSING:
        raise SchemaMismatchError(
            f"{table}.{column.name} is declared {column.source_type or kind} (captured as {kind}) "
            f"but holds {type(value).__name__} value {value!r} ({where})",
            "correct the value in the source, or declare the column with a type that holds it "
            "(for example TEXT) and re-run the install asset",
            table=table,
            column=column.name,
        )
    return ok


_MISSING = object()
