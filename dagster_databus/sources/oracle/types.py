"""Oracle: declared column types → product types (docs/types.md), the SELECT expression that reads
each exactly, and driver values → canonical values.

The mapping and the conversion are plain Python, tested here without a server; they rest on three
choices that keep a value exact whatever python-oracledb's defaults are:

- NUMBER is fetched as ``Decimal`` (``output_type_handler``), never as a binary float.
- TIMESTAMP WITH (LOCAL) TIME ZONE is selected as UTC text (``SYS_EXTRACT_UTC`` + ``TO_CHAR``): the
  thin driver drops the zone of such values, and their session-time-zone reading differs by mode.
- Fractional seconds beyond microseconds (TIMESTAMP(7..9)) are selected as text with all nine
  digits, since Delta's timestamps stop at microseconds.

``oracle_declared`` builds the declared text (``NUMBER(10,2)``, ``FLOAT(126)``, ``TIMESTAMP(6) WITH
TIME ZONE``) from USER_TAB_COLUMNS; everything else works from that text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from dagster_databus.core.schema import Column, same
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import TypeValueError

FLOAT_AS_DOUBLE_BITS = 49  # FLOAT(49) keeps 15 significant digits, which a double gives back exactly

_NUMBER = re.compile(r"NUMBER(?:\((\*|\d+)(?:,(-?\d+))?\))?")
_FLOAT = re.compile(r"FLOAT(?:\((\d+)\))?")
_TIMESTAMP = re.compile(r"TIMESTAMP(?:\((\d)\))?( WITH TIME ZONE| WITH LOCAL TIME ZONE)?")
_INTERVAL_DS = re.compile(r"INTERVAL DAY(?:\(\d\))? TO SECOND(?:\((\d)\))?")
_TEXT = {"CHAR", "NCHAR", "VARCHAR2", "NVARCHAR2", "VARCHAR", "CLOB", "NCLOB"}
_BINARY = {"RAW", "BLOB"}  # LONG and LONG RAW are left out: row triggers cannot read them
_INTEGER_ALIASES = {"INTEGER", "INT", "SMALLINT"}  # DDL names of NUMBER(*,0)
_UTC_TEXT = "YYYY-MM-DD\"T\"HH24:MI:SS.FF6"
_FULL_TEXT = "YYYY-MM-DD\"T\"HH24:MI:SS.FF9"


def oracle_declared(data_type: str, precision: int | None, scale: int | None) -> str:
    """The declared type as written in DDL, from USER_TAB_COLUMNS' data_type, data_precision, data_scale."""
    kind = data_type.upper()
    if kind == "NUMBER":
        if precision is None:
            return "NUMBER" if scale is None else f"NUMBER(*,{scale})"
        return f"NUMBER({precision},{scale or 0})"
    if kind == "FLOAT":
        return f"FLOAT({precision or 126})"
    return kind  # TIMESTAMP(n)..., INTERVAL ... carry their precision in data_type already


def oracle_column_type(declared: str) -> ColumnType | None:
    """The product type of a declared Oracle type; None when it has no mapping."""
    text = " ".join(declared.upper().replace(" (", "(").split())
    if text in _INTEGER_ALIASES:
        text = "NUMBER(*,0)"
    if match := _NUMBER.fullmatch(text):
        precision, scale = match.groups()
        if precision is None:
            return ColumnType("number")  # NUMBER: any precision and scale, kept as exact decimal text
        digits = 38 if precision == "*" else int(precision)
        scale_n = int(scale or 0)
        if scale_n > 0:
            return ColumnType.decimal(max(digits, scale_n), scale_n)
        whole = digits - scale_n  # a negative scale rounds to tens, hundreds...: more integer digits
        if whole <= 9:
            return ColumnType("integer")
        if whole <= 18:
            return ColumnType("long")
        return ColumnType.decimal(whole, 0)
    if match := _FLOAT.fullmatch(text):
        bits = int(match.group(1) or 126)
        return ColumnType("double") if bits <= FLOAT_AS_DOUBLE_BITS else ColumnType("number")
    if text == "BINARY_FLOAT":
        return ColumnType("float")
    if text == "BINARY_DOUBLE":
        return ColumnType("double")
    if text == "DATE":
        return ColumnType("timestamp_ntz")  # an Oracle DATE holds a time of day to the second
    if match := _TIMESTAMP.fullmatch(text):
        digits = int(match.group(1) or 6)
        if digits > 6:
            return ColumnType("string")  # nanoseconds: exact ISO text (docs/types.md)
        return ColumnType("timestamp") if match.group(2) else ColumnType("timestamp_ntz")
    if match := _INTERVAL_DS.fullmatch(text):
        return ColumnType("time") if int(match.group(1) or 6) <= 6 else None
    if text == "BOOLEAN":
        return ColumnType("boolean")
    if text in _TEXT or re.fullmatch(r"(N?VARCHAR2?|N?CHAR)\(\d+( BYTE| CHAR)?\)", text):
        return ColumnType("string")
    if text in _BINARY or re.fullmatch(r"RAW\(\d+\)", text):
        return ColumnType("binary")
    return None


def select_expression(column: str, declared: str, label: str) -> str:
    """What a poll or bootstrap SELECTs for ``column`` (SQL, quoted), so the driver hands over an exact
    value; a converted column is labelled ``label`` (quoted) so the result keeps the column's name."""
    match = _TIMESTAMP.fullmatch(" ".join(declared.upper().split()))
    if not match:
        return column
    digits = int(match.group(1) or 6)
    if match.group(2):  # WITH (LOCAL) TIME ZONE: the instant, as UTC
        utc = f"SYS_EXTRACT_UTC(CAST({column} AS TIMESTAMP WITH TIME ZONE))"
        return f"TO_CHAR({utc}, '{_FULL_TEXT if digits > 6 else _UTC_TEXT}') {label}"
    if digits > 6:
        return f"TO_CHAR({column}, '{_FULL_TEXT}') {label}"
    return column


def oracle_value(column: Column) -> Callable[[Any], Any]:
    """Driver value (never None; NUMBER as Decimal, LOBs as str/bytes) → canonical value of ``column.type``."""
    kind = column.type.kind
    zoned = "TIME ZONE" in column.source_type.upper()
    if kind in ("integer", "long"):
        return _integer
    if kind in ("decimal", "number"):
        return _decimal
    if kind in ("double", "float"):
        return _double
    if kind == "timestamp":
        return _utc_text
    if kind == "string":
        return (lambda v: _zoned_text(_lob(v))) if zoned else _lob
    if kind == "binary":
        return _lob
    return same  # timestamp_ntz, time, boolean: the driver's datetime, timedelta and bool


def output_type_handler(cursor: Any, metadata: Any) -> Any:
    """python-oracledb output type handler: NUMBER as Decimal, LOBs fetched inline as str / bytes."""
    import oracledb

    if metadata.type_code is oracledb.DB_TYPE_NUMBER:
        return cursor.var(decimal.Decimal, arraysize=cursor.arraysize)
    if metadata.type_code in (oracledb.DB_TYPE_CLOB, oracledb.DB_TYPE_NCLOB):
        return cursor.var(oracledb.DB_TYPE_LONG, arraysize=cursor.arraysize)
    if metadata.type_code is oracledb.DB_TYPE_BLOB:
        return cursor.var(oracledb.DB_TYPE_LONG_RAW, arraysize=cursor.arraysize)
    return None


def _lob(value: Any) -> Any:
    return value.read() if hasattr(value, "read") else value


def _integer(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        if value != value.to_integral_value():
            raise TypeValueError("it has a fractional part")
        return int(value)
    return value


def _decimal(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return decimal.Decimal(value)
    if isinstance(value, float):
        raise TypeValueError("NUMBER was fetched as a binary float; connect through OracleSource, which fetches "
                             "Decimal")
    return value


def _double(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)  # FLOAT(b <= 49): at most 15 digits, which the double's shortest text gives back
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _utc_text(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise TypeValueError("a zoned timestamp arrived without its zone; select it with select_expression")
        return value
    if type(value) is not str:
        raise TypeValueError(f"{type(value).__name__} is not a timestamp")
    return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)


def _zoned_text(value: Any) -> Any:
    return value + "Z" if type(value) is str and not value.endswith("Z") else value
