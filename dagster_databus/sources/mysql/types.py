"""MySQL / MariaDB: column types → product types (docs/types.md), and driver values → canonical values.

A row reaches capture by two roads that hand over different values for the same stored value: the
bootstrap reads it with pymysql (the text protocol, converted here by ``bootstrap_value``), change
events decode it from the binary log (``wire.values``, a column at a time). Both end in the column
type's canonical value (``core.types``), so a row is the same whichever road it took:

- FLOAT: the text protocol prints a FLOAT rounded (0.3 for the stored 0.300000011920928955078125);
  the bootstrap selects ``CAST(col AS DOUBLE)``, the exact stored value, as the binlog has it.
- TIMESTAMP: the bootstrap session runs with ``time_zone = '+00:00'``, so it reads UTC as the
  binlog stores it, whatever the server's time zone.
- BIT: bytes from the bootstrap, a string of 0s and 1s from the binlog.
- SET: text in definition order from the bootstrap, a Python set from the binlog (None when empty).
- BINARY(n): the binlog drops trailing zero bytes, which are part of the stored value.
- YEAR 0000: 0 from the bootstrap, 1900 from the binlog. Zero dates: text from pymysql, None from
  the binlog (with the reason in ``none_sources``); a zero TIMESTAMP is the epoch in the binlog.
- MariaDB's UUID, INET6, INET4: text from the bootstrap, their 16 or 4 stored bytes from the binlog.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from dagster_databus.core.schema import Column, same
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import TypeValueError

ZeroDates = Literal["error", "null"]

_GEOMETRY = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
             "geometrycollection", "geomcollection"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json", "enum", "set", "uuid", "inet6",
         "inet4"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_INTEGERS: dict[str, tuple[str, str]] = {  # data type → (signed, unsigned)
    "tinyint": ("byte", "short"), "smallint": ("short", "integer"), "mediumint": ("integer", "integer"),
    "int": ("integer", "long"), "integer": ("integer", "long"), "bigint": ("long", "decimal(20,0)"),
}


@dataclass(frozen=True, slots=True)
class MysqlType:
    """A parsed ``COLUMN_TYPE`` (``bigint(20) unsigned``, ``set('a','b')``, ``decimal(10,2)``)."""

    name: str
    args: tuple[str, ...]
    unsigned: bool

    @classmethod
    def parse(cls, column_type: str) -> MysqlType:
        match = re.match(r"\s*([a-z ]+?)\s*(?:\((.*)\))?\s*((?:unsigned|signed|zerofill|\s)*)$", column_type,
                         re.IGNORECASE | re.DOTALL)
        if not match:
            return cls(column_type.lower(), (), False)
        name, args, flags = match.groups()
        return cls(name.lower().strip(), tuple(_split_args(args)) if args else (), "unsigned" in flags.lower())

    def int_arg(self, index: int, default: int) -> int:
        return int(self.args[index]) if len(self.args) > index and self.args[index].isdigit() else default


def _split_args(text: str) -> list[str]:
    """``'a','b''c'`` → ['a', "b'c"]; ``10,2`` → ['10', '2']."""
    if not text.strip().startswith("'"):
        return [a.strip() for a in text.split(",")]
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", text)]


def mysql_column_type(column_type: str) -> ColumnType | None:
    """The product type of a column from information_schema's COLUMN_TYPE; None when it has no mapping."""
    t = MysqlType.parse(column_type)
    name = t.name
    if name in _INTEGERS:
        return ColumnType.parse(_INTEGERS[name][1 if t.unsigned else 0])
    if name in ("decimal", "numeric", "dec", "fixed"):
        return ColumnType.decimal(t.int_arg(0, 10), t.int_arg(1, 0))
    if name == "float":
        return ColumnType("double" if t.args and len(t.args) == 1 and t.int_arg(0, 0) > 24 else "float")
    if name in ("double", "real", "double precision"):
        return ColumnType("double")
    if name == "bit":
        return ColumnType("boolean" if t.int_arg(0, 1) == 1 else "binary")
    if name in ("bool", "boolean"):
        return ColumnType("byte")
    if name in _TEXT:
        return ColumnType("string")
    if name in _BINARY or name in _GEOMETRY:
        return ColumnType("binary")
    if name == "date":
        return ColumnType("date")
    if name == "datetime":
        return ColumnType("timestamp_ntz")
    if name == "timestamp":
        return ColumnType("timestamp")
    if name == "time":
        return ColumnType("time")
    if name == "year":
        return ColumnType("integer")
    return None


# -- the bootstrap road (pymysql) -------------------------------------------------------


def select_expression(column: Column) -> str:
    """The bootstrap's SELECT item for ``column`` (a validated plain name)."""
    if MysqlType.parse(column.source_type).name == "float" and column.type.kind == "float":
        return f"CAST(`{column.name}` AS DOUBLE) AS `{column.name}`"
    return f"`{column.name}`"


def fingerprint_text(column: Column) -> str:
    """SQL for ``column``'s canonical text in reconciliation fingerprints (``core.fingerprint``),
    NULL when the value is NULL. Mirrors ``bootstrap_value``: the same stored value gives the same text
    whether MySQL computes it or Python computes it from the snapshot. Needs ``time_zone = '+00:00'``."""
    t, kind, col = MysqlType.parse(column.source_type), column.type.kind, f"`{column.name}`"
    if kind in ("float", "double"):
        return _frexp_text(f"CAST({col} AS DOUBLE)")
    if kind == "boolean" or t.name == "year":
        return f"CAST({col} + 0 AS CHAR)"
    if kind == "string":
        return f"CONVERT({col} USING utf8mb4)"
    if kind == "binary":
        return col
    if kind == "date":
        return f"DATEDIFF({col}, '1970-01-01')"
    if kind in ("timestamp", "timestamp_ntz"):
        return f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {col})"
    if kind == "time":
        return f"CAST(TIME_TO_SEC({col}) * 1000000 AS SIGNED)"
    return f"CAST({col} AS CHAR)"


def _frexp_text(x: str) -> str:
    """``<e>:<m>`` with ``x = m * 2**(e-53)`` (numpy's ``frexp``), in exact double arithmetic: scaling
    by a power of two is exact, and the exponent from LOG2 is corrected where it rounded."""
    a = f"ABS({x})"
    e0 = f"LEAST(FLOOR(LOG2({a})) + 1, 1024)"
    r = f"({a} / POW(2, {e0} - 1))"
    e = f"({e0} + ({r} >= 2) - ({r} < 1))"
    return (f"CASE WHEN {x} = 0 THEN '0' "
            f"ELSE CONCAT({e}, ':', CAST(SIGN({x}) * {a} / POW(2, {e} - 1) * 4503599627370496 AS SIGNED)) END")


def fingerprint_part(column: Column) -> str:
    """One column's contribution to a row's canonical text (``core.fingerprint``): ``<byte length>:<text>``
    for strings and binary, ``<text>|`` for the rest (evaluated once: the float text is not cheap)."""
    text = fingerprint_text(column)
    if column.type.kind in ("string", "binary"):
        return f"COALESCE(CONCAT(LENGTH({text}), ':', {text}), '-')"
    return f"CONCAT(COALESCE({text}, '-'), '|')"


def bootstrap_value(column: Column, zero_dates: ZeroDates) -> Callable[[Any], Any]:
    """pymysql's value (never None) → the canonical value of ``column.type``."""
    t = MysqlType.parse(column.source_type)
    kind = column.type.kind
    if kind == "decimal" and t.name in _INTEGERS:  # BIGINT UNSIGNED
        return decimal.Decimal
    if t.name == "bit":
        return (lambda v: bytes(v) != b"\x00") if kind == "boolean" else bytes
    if kind in ("date", "timestamp_ntz", "timestamp"):
        return _temporal(kind, zero_dates)
    if kind == "binary":
        return bytes
    return same


def _temporal(kind: str, zero_dates: ZeroDates) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, str):  # pymysql hands over what it cannot parse: zero or partly zero dates
            return _zero_date(repr(value), zero_dates)
        if kind == "timestamp" and isinstance(value, dt.datetime):
            return value.replace(tzinfo=dt.UTC)  # the session reads TIMESTAMP in UTC
        return value

    return convert


def _zero_date(described: str, zero_dates: ZeroDates) -> None:
    if zero_dates == "null":
        return None
    raise TypeValueError(
        f"{described} is a MySQL zero date, which Delta's date and timestamp types cannot hold; set the source's "
        "zero_dates: null to store such dates as NULL, or correct the rows")


def sql_default(default: Any, extra: str, ctype: ColumnType | None, mariadb: bool) -> str | None:
    """A column's default as SQL literal text (``core.defaults``), or in parentheses when it is an expression.
    MariaDB reports it so; MySQL reports a literal's bare value and marks expressions ``DEFAULT_GENERATED``."""
    if default is None or (mariadb and str(default).upper() == "NULL"):
        return None
    text = str(default)
    if mariadb:
        return text
    if "DEFAULT_GENERATED" in str(extra).upper() or text.upper().startswith(("CURRENT_TIMESTAMP", "NOW(")):
        return f"({text})"
    if ctype is not None and ctype.kind in ("byte", "short", "integer", "long", "decimal", "float", "double"):
        return text
    return "'" + text.replace("'", "''") + "'"
