"""SQLite: declared column types → product types (docs/types.md), and stored values → canonical values.

SQLite is dynamically typed: a column's declared type only gives it an *affinity*. Capture follows
the declared type (SQLite's affinity rules, section 3.1 of its datatype docs, plus the names people
use for decimals, dates and booleans) and refuses a stored value the type cannot hold exactly,
naming table, column and value. The same conversion serves the trigger path (values decoded from
the txlog's JSON) and the bootstrap (values read by the sqlite3 module): both hand it the same
Python types, so a row is the same whichever path it took.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column, passes_through, same
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import TypeValueError

_DECIMAL = re.compile(r"^\s*(?:DECIMAL|NUMERIC|DEC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)", re.IGNORECASE)
_DATETIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?(Z|[+-]\d{2}:\d{2})?$")
_TIME = re.compile(r"^(-)?(\d{2,3}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?$")
_EXACT_FLOAT_INT = 1 << 53


def sqlite_column_type(declared: str) -> ColumnType | None:
    """The product type for a declared SQLite type; None when it has no mapping."""
    decl = declared.upper()
    if "INT" in decl:
        return ColumnType("long")
    if any(s in decl for s in ("CHAR", "CLOB", "TEXT")):
        return ColumnType("string")
    if "BLOB" in decl:
        return ColumnType("binary")
    if not decl.strip():
        return ColumnType("string")  # no declared type: text, numbers as their exact text
    if any(s in decl for s in ("REAL", "FLOA", "DOUB")):
        return ColumnType("double")
    # NUMERIC affinity from here: the names below say what the column holds.
    if "BOOL" in decl:
        return ColumnType("boolean")
    match = _DECIMAL.match(declared)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if precision < 1 or scale > precision:
            return None
        return ColumnType.decimal(precision, scale)
    if "DATETIME" in decl:
        return ColumnType("timestamp_ntz")
    if "TIMESTAMP" in decl:
        return ColumnType("timestamp")
    if "DATE" in decl:
        return ColumnType("date")
    if "TIME" in decl:
        return ColumnType("time")
    if "JSON" in decl:
        return ColumnType("string")
    return ColumnType("double")  # NUMERIC, DECIMAL without precision, MONEY, ...


def carried_as_bytes(column: Column) -> bool:
    """Whether a text column is captured as binary (``invalid_utf8: binary``): its declared type maps to string,
    but the schema says binary, so each value is its exact bytes whether or not they are UTF-8."""
    if column.type.kind != "binary":
        return False
    mapped = sqlite_column_type(column.source_type)
    return mapped is not None and mapped.kind == "string"


def read_expression(column: Column) -> str:
    """How the bootstrap selects ``column``: as it is stored, but text carried as bytes as its bytes (the
    sqlite3 module would decode it, and fail on text that is not UTF-8), as the triggers hex it."""
    name = quote_ansi(column.name)
    if not carried_as_bytes(column):
        return name
    return f"CASE typeof({name}) WHEN 'text' THEN CAST({name} AS BLOB) ELSE {name} END"


@passes_through(str)
def _text(value: Any) -> Any:
    # Only an untyped column (or a JSON one) stores numbers beside text; their text is exact.
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return repr(value)
    return value


def _text_bytes(value: Any) -> Any:
    """A text column's value as its bytes: text (and a BLOB) exactly, a number as the text ``_text`` gives it.
    Text decoded leniently (surrogate escapes for bytes that are not UTF-8) is given back its bytes."""
    if type(value) is bytes:
        return value
    if type(value) is str:
        return value.encode("utf-8", "surrogateescape")
    return _text(value).encode()


@passes_through(float)
def _double(value: Any) -> Any:
    if type(value) is int:
        if abs(value) > _EXACT_FLOAT_INT and float(value) != value:
            raise TypeValueError(f"integer {value} has no exact 64-bit floating-point value")
        return float(value)
    if type(value) is str:
        raise TypeValueError("text is not a number")
    return value


def _boolean(value: Any) -> Any:
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise TypeValueError("a BOOLEAN column holds 0 or 1")


def _decimal(value: Any) -> Any:
    if type(value) is int:
        return decimal.Decimal(value)
    if type(value) is float:
        # The shortest text that reads back as the stored double: the value a person wrote.
        return decimal.Decimal(repr(value))
    if type(value) is str:
        try:
            return decimal.Decimal(value.strip())
        except decimal.InvalidOperation:
            raise TypeValueError("text is not a number") from None
    raise TypeValueError(f"{type(value).__name__} is not a number")


def _date(value: Any) -> Any:
    if type(value) is not str or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise TypeValueError("a DATE column holds ISO-8601 text YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise TypeValueError(str(exc)) from None


def _datetime(value: Any, zoned: bool) -> Any:
    declared = "TIMESTAMP" if zoned else "DATETIME"
    match = _DATETIME.match(value) if type(value) is str else None
    if not match:
        raise TypeValueError(f"a {declared} column holds ISO-8601 text YYYY-MM-DD HH:MM:SS[.ffffff]")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if fraction and len(fraction) > 6:
        if fraction[6:].strip("0"):
            raise TypeValueError("it has digits below a microsecond, which the snapshot's timestamps cannot hold")
        fraction = fraction[:6]
    try:
        value = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                            int((fraction or "0").ljust(6, "0")))
    except ValueError as exc:
        raise TypeValueError(str(exc)) from None
    if zone is not None and not zoned:
        raise TypeValueError("it has a time-zone offset, which a DATETIME column (no zone) cannot keep; "
                             "declare the column TIMESTAMP")
    if not zoned:
        return value
    # SQLite's date functions read text without an offset as UTC.
    offset = dt.timedelta(0) if zone in (None, "Z") else (
        (-1 if zone[0] == "-" else 1) * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        zoned_value = value.replace(tzinfo=dt.timezone(offset))
    except ValueError as exc:  # an offset of a day or more
        raise TypeValueError(f"its offset {zone}: {exc}") from None
    try:
        return zoned_value.astimezone(dt.UTC)
    except OverflowError:
        # '9999-12-31 23:30:00-01:00' is 10000-01-01 in UTC: no timestamp holds it (Python's, Avro's or Delta's
        # years run 1..9999), so it is refused as any value outside the type is.
        raise TypeValueError(f"it is {'after 9999-12-31' if value.year == 9999 else 'before 0001-01-01'} once "
                             "taken to UTC, outside the years 1 to 9999 a timestamp holds") from None


def _time(value: Any) -> Any:
    match = _TIME.match(value) if type(value) is str else None
    if not match:
        raise TypeValueError("a TIME column holds text HH:MM[:SS[.ffffff]]")
    negative, hours, minutes, seconds, fraction = match.groups()
    if int(minutes) > 59 or int(seconds or 0) > 59:
        raise TypeValueError("minutes and seconds run 00..59")
    span = dt.timedelta(hours=int(hours), minutes=int(minutes), seconds=int(seconds or 0),
                        microseconds=int((fraction or "0").ljust(6, "0")))
    return -span if negative else span


def _naive_datetime(value: Any) -> Any:
    return _datetime(value, zoned=False)


def _zoned_datetime(value: Any) -> Any:
    return _datetime(value, zoned=True)


# The converter of each kind's stored value; a kind not here (long, binary) keeps it as it is, the type's check
# refusing anything else.
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _text, "double": _double, "boolean": _boolean, "decimal": _decimal, "date": _date,
    "timestamp_ntz": _naive_datetime, "timestamp": _zoned_datetime, "time": _time,
}


def sqlite_value(column: Column) -> Callable[[Any], Any]:
    """Stored value (int, float, str or bytes, never None) → the canonical value of ``column.type``."""
    if carried_as_bytes(column):
        return _text_bytes
    return _CONVERTERS.get(column.type.kind, same)
