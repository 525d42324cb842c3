"""PostgreSQL: column types → product types (docs/types.md), and text values → canonical values.

Both roads hand over a value as the text of its type's output function: pgoutput's tuples (text
format), and the bootstrap's rows read with psycopg2 returning each value's text unconverted (a
typecaster for every oid that returns the string). Not ``col::text``: boolean, char(n), inet and cidr
cast to text by functions of their own (``true``, padding trimmed, ``/32`` added), unlike pgoutput.
One converter per column (``text_converter``) turns that text into the column type's canonical value,
so a row is the same whichever road it took. The text depends on session settings both roads set alike:

- ``DateStyle = ISO``: dates and timestamps as ``2024-06-01 12:00:00.5+02``; other styles are refused.
- ``TimeZone``: any; ``timestamptz`` text carries its offset (``+05:30``, even ``+05:53:28``) and is
  taken to UTC here. ``UTC`` keeps arrays and ranges of timestamptz (kept as text) alike too.
- ``IntervalStyle``: ``iso_8601`` (``postgres``, the default, is read too and rewritten to ISO text;
  the others are refused). A domain over interval is converted as text as it stands, so only
  ``iso_8601`` gives its one form.
- ``extra_float_digits = 3``: floats print with every digit (PostgreSQL 12+ prints the shortest exact
  text for any value above 0); 0 or below rounds, which no converter can undo.
- ``bytea_output``: ``hex`` or ``escape``, both read. ``client_encoding = UTF8``.

Decisions where PostgreSQL holds more than the product types do:

- ``numeric(p,s)`` is ``decimal(p,s)`` at any precision (above 38 Delta keeps exact text, as for
  MySQL's ``DECIMAL(65,30)``); a negative scale (PostgreSQL 15+) is ``decimal(p-s,0)``, a scale above
  the precision ``decimal(s,s)``. ``numeric`` without a precision holds any scale: ``number``, as
  Oracle's ``NUMBER``. ``NaN`` and ``±Infinity`` in a numeric column are refused (no decimal holds them).
- ``infinity`` / ``-infinity`` dates and timestamps, years before 1 (``BC``) and after 9999 are
  refused: Delta's and Python's dates stop there, and a stand-in such as 9999-12-31 would be a real date.
- A ``timestamptz`` the session's zone prints in year 10000 or BC (9999-12-31 23:00 UTC in +05:30) is
  read through the 400-year Gregorian cycle and kept when its UTC year is 1..9999.
- ``time`` is ``time`` (a duration from midnight; ``24:00:00`` is 24 hours). ``timetz`` keeps its own
  offset, which no product type holds: its text (``12:00:00+02``).
- ``interval`` mixes months, days and microseconds, none a fixed multiple of another: ISO 8601 text
  as PostgreSQL prints it with ``IntervalStyle = iso_8601`` (``P1Y2M3DT4H5M6.5S``, ``PT0S``).
- Arrays (of any element type), ranges, multiranges and the remaining text-like types (json, jsonb,
  xml, uuid, inet, cidr, macaddr, bit strings, geometric, text search, pg_lsn, citext, hstore, ltree)
  are ``string``: the text PostgreSQL prints. JSON is kept as text, as the MySQL source keeps it.
  Enums are their label. ``char(n)`` keeps its padding.
- ``money`` is refused: its text follows ``lc_monetary`` (``$1,234.56``); ``numeric(p,2)`` holds it.

A domain is mapped as its base type: the catalog passes the base type's name, oid and modifier.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.schema import Column, same
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import TypeValueError, UnsupportedTypeError

FIRST_NORMAL_OID = 16384  # pg_type rows below it are built in; their oids never change
_VARHDRSZ = 4  # numeric's typmod carries this offset

# Built-in types by their fixed oid (pg_type.dat) → typname, the mapping's key. An oid wins over the name
# the catalog passes, so a user type named like a built-in one (an enum called "date") maps as itself.
BUILTIN_TYPES: dict[int, str] = {
    16: "bool", 17: "bytea", 18: "char", 19: "name", 20: "int8", 21: "int2", 23: "int4", 25: "text", 26: "oid",
    114: "json", 142: "xml", 600: "point", 601: "lseg", 602: "path", 603: "box", 604: "polygon", 628: "line",
    650: "cidr", 700: "float4", 701: "float8", 718: "circle", 774: "macaddr8", 790: "money", 829: "macaddr",
    869: "inet", 1042: "bpchar", 1043: "varchar", 1082: "date", 1083: "time", 1114: "timestamp",
    1184: "timestamptz", 1186: "interval", 1266: "timetz", 1560: "bit", 1562: "varbit", 1700: "numeric",
    2950: "uuid", 3220: "pg_lsn", 3614: "tsvector", 3615: "tsquery", 3802: "jsonb", 4072: "jsonpath",
    3904: "int4range", 3906: "numrange", 3908: "tsrange", 3910: "tstzrange", 3912: "daterange",
    3926: "int8range", 4451: "int4multirange", 4532: "nummultirange", 4533: "tsmultirange",
    4534: "tstzmultirange", 4535: "datemultirange", 4536: "int8multirange",
}
_FIXED: dict[str, str] = {
    "bool": "boolean", "int2": "short", "int4": "integer", "int8": "long", "oid": "long", "float4": "float",
    "float8": "double", "bytea": "binary", "date": "date", "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp", "time": "time",
}
_TEXT = {
    "text", "varchar", "bpchar", "char", "name", "json", "jsonb", "jsonpath", "xml", "uuid", "inet", "cidr",
    "macaddr", "macaddr8", "bit", "varbit", "point", "lseg", "path", "box", "polygon", "line", "circle",
    "tsvector", "tsquery", "pg_lsn", "timetz", "interval", "int4range", "numrange", "tsrange", "tstzrange",
    "daterange", "int8range", "int4multirange", "nummultirange", "tsmultirange", "tstzmultirange",
    "datemultirange", "int8multirange",
}
EXTENSION_TEXT = {"citext", "hstore", "ltree", "lquery", "ltxtquery"}  # extensions' types: no fixed oid

_FIX_TYPE = ("change the column to a mapped type (ALTER TABLE ... ALTER COLUMN ... TYPE ...; docs/types.md lists "
             "the PostgreSQL mapping), or leave the table out of capture")


def numeric_modifier(typmod: int) -> tuple[int, int] | None:
    """``numeric``'s (precision, scale) from its type modifier; None when unconstrained (``numeric``)."""
    if typmod < _VARHDRSZ:
        return None
    bits = typmod - _VARHDRSZ
    # The scale is an 11-bit two's complement number since PostgreSQL 15 (negative scales).
    return (bits >> 16) & 0xFFFF, ((bits & 0x7FF) ^ 1024) - 1024


def declared_type(type_name: str, typmod: int = -1, *, element: str | None = None) -> str:
    """A short declared form for messages (``numeric(10,2)``, ``_int4`` → ``int4[]``)."""
    if element is not None:
        return f"{element}[]"
    if type_name == "numeric" and (modifier := numeric_modifier(typmod)):
        return f"numeric({modifier[0]},{modifier[1]})"
    if type_name in ("varchar", "bpchar", "bit", "varbit") and typmod >= 0:
        return f"{type_name}({typmod - _VARHDRSZ if type_name in ('varchar', 'bpchar') else typmod})"
    return type_name


@dataclass(frozen=True, slots=True)
class PgColumn:
    """A column as the catalog describes it (``sql/postgres/described_columns.sql``)."""

    name: str
    declared: str  # format_type(atttypid, atttypmod): what messages show, and Column.source_type
    type_name: str  # pg_type.typname; a domain's base type's
    typmod: int = -1  # atttypmod; a domain's typtypmod
    is_enum: bool = False
    element: str | None = None  # an array's element typname (typcategory 'A'), else None
    element_is_enum: bool = False
    type_oid: int | None = None  # the (base) type's oid when known: it tells a built-in type from a namesake


def _mapping(type_name: str, type_oid: int | None, typmod: int, element: str | None,
             is_enum: bool) -> ColumnType | tuple[str, str]:
    """The product type, or (why not, the fix)."""
    if element is not None:
        if element == "money":
            return _MONEY
        return ColumnType("string")  # PostgreSQL's array text ('{1,2,NULL}'): the product has no list type
    if type_oid is not None and type_oid in BUILTIN_TYPES:
        name = BUILTIN_TYPES[type_oid]
    elif type_oid is not None and type_oid < FIRST_NORMAL_OID:
        return (f"{type_name} is an internal PostgreSQL type", _FIX_TYPE)
    elif is_enum or type_name in EXTENSION_TEXT:
        return ColumnType("string")
    elif type_oid is None and type_name in _BUILTIN_NAMES:
        name = type_name
    else:
        return (f"{type_name} has no mapping (an internal, composite or extension type; a domain is mapped as its "
                "base type)", _FIX_TYPE + " (jsonb holds a composite's fields)")
    if name in _FIXED:
        return ColumnType(_FIXED[name])  # type: ignore[arg-type]  # _FIXED holds kinds only
    if name == "numeric":
        modifier = numeric_modifier(typmod)
        if modifier is None:
            return ColumnType("number")  # any precision and scale: exact decimal text in Delta, as Oracle's NUMBER
        precision, scale = modifier
        if scale < 0:  # rounded to tens, hundreds...: integers with -scale more digits
            return ColumnType.decimal(precision - scale, 0)
        return ColumnType.decimal(max(precision, scale), scale)
    if name in _TEXT:
        return ColumnType("string")
    if name == "money":
        return _MONEY
    raise AssertionError(name)


_BUILTIN_NAMES = frozenset(BUILTIN_TYPES.values())
_MONEY = ("money's text follows the server's lc_monetary ('$1,234.56'), so it has no exact value to capture",
          "change the column to numeric (ALTER TABLE ... ALTER COLUMN ... TYPE numeric(20,2), which PostgreSQL "
          "converts exactly), or leave the table out of capture")


def column_type(type_name: str, type_oid: int | None, typmod: int, *, element: str | None = None,
                is_enum: bool = False, source: str = "", table: str = "", column: str = "") -> ColumnType:
    """The product type of a column: ``pg_type.typname`` and oid (a domain's base type's; the oid may be None
    when unknown), the type modifier, for an array its element's typname, and whether the type is an enum.
    A type with no mapping raises ``UnsupportedTypeError`` naming source, table, column, type, why and the fix."""
    mapped = _mapping(type_name, type_oid, typmod, element, is_enum)
    if isinstance(mapped, ColumnType):
        return mapped
    why, fix = mapped
    where = ", ".join(p for p in (f"source {source!r}" if source else "",
                                  f"column {table}.{column}" if table else f"column {column}" if column else "") if p)
    raise UnsupportedTypeError(
        f"{where + ': ' if where else ''}PostgreSQL type {declared_type(type_name, typmod, element=element)} has no "
        f"mapping to a change-log and snapshot type: {why}", fix,
        source=source, table=table, column=column, type=type_name)


def pg_column_type(column: PgColumn) -> ColumnType | None:
    """The catalog's form of ``column_type``: None for a type with no mapping (the catalog names all such
    columns at once), ``UnsupportedTypeError`` for one whose fix is particular (money: numeric)."""
    mapped = _mapping(column.type_name, column.type_oid, column.typmod, column.element, column.is_enum)
    if isinstance(mapped, ColumnType):
        return mapped
    if mapped is _MONEY:
        raise UnsupportedTypeError(f"column {column.name} ({column.declared}) cannot be captured: {_MONEY[0]}",
                                   _MONEY[1], column=column.name, type=column.declared)
    return None


# -- values --------------------------------------------------------------------------------------------

# format_type()'s text of an interval column (``interval``, ``interval(3)``, ``interval day to second(3)``).
_INTERVAL_TYPE = re.compile(r"interval(\(\d\))?( \w+( to \w+)?(\(\d\))?)?", re.IGNORECASE)


def _by_column(convert: Callable[[str], Any], from_text: Callable[[pa.Array], pa.Array]) -> Callable[[str], Any]:
    """``convert`` (one value's text) with ``from_text``: a whole column of texts in one call, which raises an Arrow
    error for any text ``convert`` would not take exactly (the per-value path then names it)."""
    def one(text: str) -> Any:
        return convert(text)

    one.from_text = from_text  # type: ignore[attr-defined]
    return one


def _cast_to(target: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    return lambda texts: texts.cast(target)  # a safe cast: overflow, lost digits and stray text raise


_BOOLEAN_TEXT = pa.array(["t", "f"])


def _booleans(texts: pa.Array) -> pa.Array:
    if (pc.sum(pc.is_in(texts, value_set=_BOOLEAN_TEXT)).as_py() or 0) != len(texts) - texts.null_count:
        raise pa.ArrowInvalid("boolean text other than 't' and 'f'")
    return pc.equal(texts, "t")


def text_converter(column: Column) -> Callable[[str], Any]:
    converter = _text_converter(column)
    kind = column.type.kind
    if kind in ("short", "integer", "long", "double", "date", "timestamp_ntz", "timestamp") or (
            kind == "decimal" and not column.type.as_text_in_delta):
        return _by_column(converter, _cast_to(column.type.arrow()))
    if kind == "boolean":
        return _by_column(converter, _booleans)
    return converter


def numeric_value(text: str) -> decimal.Decimal:
    value = decimal.Decimal(text)
    if not value.is_finite():
        raise TypeValueError(f"numeric {text} has no decimal value (Delta's decimals hold finite numbers only); "
                             "replace it with NULL or a number")
    return value


def boolean_value(text: str) -> bool:
    if text == "t":
        return True
    if text == "f":
        return False
    raise TypeValueError(f"{text!r} is not PostgreSQL's boolean output text ('t' or 'f'); 'true' is boolean::text's "
                         "form: read the column's output text (what pgoutput sends), not a cast to text")


def bytea_value(text: str) -> bytes:
    if text.startswith("\\x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            raise TypeValueError("bytea hex text with a character that is not a hex digit") from None
    return _bytea_escape(text)


def _bytea_escape(text: str) -> bytes:
    """``bytea_output = escape``: printable ASCII as itself, ``\\\\`` for a backslash, ``\\ooo`` for the rest."""
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\":
            code = ord(c)
            if code > 0x7E:
                raise TypeValueError(f"bytea escape text with the character {c!r}, which it never holds")
            out.append(code)
            i += 1
        elif text[i + 1:i + 2] == "\\":
            out.append(0x5C)
            i += 2
        else:
            octal = text[i + 1:i + 4]
            if len(octal) != 3 or not all("0" <= d <= "7" for d in octal):
                raise TypeValueError(f"bytea escape text with {text[i:i + 4]!r}, which is not \\\\ nor \\ooo")
            out.append(int(octal, 8))
            i += 4
    return bytes(out)


_INFINITE = ("infinity", "-infinity")


def _not_temporal(text: str, what: str) -> TypeValueError:
    """Why ``text`` is not a date/timestamp the product holds, with the fix."""
    if text in _INFINITE:
        return TypeValueError(
            f"PostgreSQL's {text} has no {what} value in the change log or Delta (a stand-in such as 9999-12-31 "
            f"would be a real {what}); replace it with NULL or a real {what} in the source (UPDATE ... SET col = NULL "
            f"WHERE col = '{text}'), or declare the column text")
    if text.endswith(" BC"):
        return TypeValueError(f"{text} is before year 1 (BC), outside the years 1 to 9999 that Delta's and Python's "
                              f"{what}s hold; correct the value or declare the column text")
    if re.match(r"\d{5,}-", text):
        return TypeValueError(f"{text} is after year 9999, outside the years 1 to 9999 that Delta's and Python's "
                              f"{what}s hold; correct the value or declare the column text")
    return TypeValueError(f"{text!r} is not a {what} in PostgreSQL's ISO style: the session must run with DateStyle "
                          "= ISO (capture sets it; check the role's and database's settings: ALTER ROLE ... RESET "
                          "DateStyle)")


# The shapes of DateStyle ISO, checked by position (cheaper than a pattern; fromisoformat checks the digits).
# fromisoformat alone would also read forms PostgreSQL never prints (20240601).


def date_value(text: str) -> dt.date:
    if len(text) == 10 and text[4] == "-" and text[7] == "-":
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            pass
    raise _not_temporal(text, "date")


def timestamp_value(text: str) -> dt.datetime:
    if len(text) >= 19 and text[4] == "-" and text[10] == " ":
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if value.tzinfo is None:
                return value
    raise _not_temporal(text, "timestamp")


def timestamptz_value(text: str) -> dt.datetime:
    """``timestamptz`` text in the session's time zone, as the instant in UTC."""
    if len(text) >= 22 and text[4] == "-" and text[10] == " ":
        try:
            value = dt.datetime.fromisoformat(text)
            if value.tzinfo is not None:
                return value.astimezone(dt.UTC)
        except (ValueError, OverflowError):
            pass
    if match := _TIMESTAMPTZ_ANY_YEAR.fullmatch(text):
        return _shifted_to_utc(text, match)
    raise _not_temporal(text, "timestamp")


# A session zone east or west of UTC prints an instant near the years' ends in a year UTC does not have
# (9999-12-31 23:00 UTC is 10000-01-01 04:30+05:30, 0001-01-01 00:00 UTC is 0001-12-31 19:00-05 BC).
_TIMESTAMPTZ_ANY_YEAR = re.compile(
    r"(\d{4,})-(\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?[+-]\d\d(?::\d\d(?::\d\d)?)?)( BC)?")
_CYCLE_YEARS = 400  # the Gregorian calendar repeats every 400 years, to the day and weekday


def _shifted_to_utc(text: str, match: re.Match[str]) -> dt.datetime:
    """The UTC instant of a timestamptz whose local year is outside 1..9999: read whole 400-year cycles
    away (where Python's dates reach), taken to UTC there, and moved back."""
    year = int(match.group(1))
    if match.group(3):
        year = 1 - year  # astronomical numbering: 1 BC is year 0
    shift = (2000 - year) // _CYCLE_YEARS * _CYCLE_YEARS  # into 2000..2399, far from either end
    try:
        utc = dt.datetime.fromisoformat(f"{year + shift:04d}-{match.group(2)}").astimezone(dt.UTC)
    except ValueError:
        raise _not_temporal(text, "timestamp") from None
    real = utc.year - shift
    if not 1 <= real <= 9999:
        raise TypeValueError(f"{text} is {'before year 1' if real < 1 else 'after year 9999'} in UTC, outside the "
                             "years 1 to 9999 that Delta's and Python's timestamps hold; correct the value or declare "
                             "the column text")
    return utc.replace(year=real)


def time_value(text: str) -> dt.timedelta:
    """``time`` text (``HH:MM:SS[.ffffff]``, up to ``24:00:00``; the same in every DateStyle) as the duration
    since midnight."""
    length = len(text)
    if 8 <= length <= 15 and text[2] == ":" and text[5] == ":" and (length == 8 or text[8] == "."):
        try:
            micros = (int(text[:2]) * 3600 + int(text[3:5]) * 60 + int(text[6:8])) * 1_000_000
            if length > 8:
                micros += int(text[9:].ljust(6, "0"))
            return dt.timedelta(microseconds=micros)
        except ValueError:
            pass
    raise TypeValueError(f"{text!r} is not PostgreSQL's time text (HH:MM:SS[.ffffff])")


# IntervalStyle postgres (the default): '1 year 2 mons -3 days +04:05:06.5', '-00:00:01', '00:00:00'.
_INTERVAL_POSTGRES = re.compile(
    r"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
    r"(?:([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?")
# IntervalStyle iso_8601: 'P1Y2M-3DT4H5M6.5S', 'PT0S', 'PT-1S'.
_INTERVAL_ISO = re.compile(r"P(?:-?\d+Y)?(?:-?\d+M)?(?:-?\d+D)?(?:T(?:-?\d+H)?(?:-?\d+M)?(?:-?\d+(?:\.\d{1,6})?S)?)?")


def interval_value(text: str) -> str:
    """An interval's text as PostgreSQL prints it with ``IntervalStyle = iso_8601``, from either the
    ``postgres`` or the ``iso_8601`` style: the same value has one text whatever the session's style."""
    if text.startswith("P"):
        if _INTERVAL_ISO.fullmatch(text) and text not in ("P", "PT"):
            return text
    elif text in _INFINITE:  # PostgreSQL 17's infinite intervals print alike in every style
        return text
    elif text and (match := _INTERVAL_POSTGRES.fullmatch(text)):
        return _iso_interval(match)
    raise TypeValueError(f"{text!r} is not interval text in IntervalStyle postgres or iso_8601: the session must run "
                         "with one of them (capture sets it; check the role's and database's settings)")


def _iso_interval(match: re.Match[str]) -> str:
    """PostgreSQL's ``EncodeInterval`` for ``INTSTYLE_ISO_8601``: each field with its own sign, the time's
    fields with the time's sign, seconds without trailing zeros, ``PT0S`` for zero."""
    years, months, days, sign, hours, minutes, seconds, fraction = match.groups()
    text = "P"
    for number, unit in ((years, "Y"), (months, "M"), (days, "D")):
        if number and int(number):
            text += f"{int(number)}{unit}"
    hours_n, minutes_n, seconds_n = int(hours or 0), int(minutes or 0), int(seconds or 0)
    fraction = (fraction or "").rstrip("0")
    if hours_n or minutes_n or seconds_n or fraction:
        negative = "-" if sign == "-" else ""
        text += "T"
        if hours_n:
            text += f"{negative}{hours_n}H"
        if minutes_n:
            text += f"{negative}{minutes_n}M"
        if seconds_n or fraction:
            text += f"{negative}{seconds_n}{'.' + fraction if fraction else ''}S"
    return "PT0S" if text == "P" else text


# The converter of each kind's text but a string's (``_text_converter``, below); 'NaN', 'Infinity', '-Infinity'
# and '-0' are float text too (float32 rounding is the type's check).
_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "short": int, "integer": int, "long": int, "float": float, "double": float, "decimal": numeric_value,
    "number": numeric_value, "boolean": boolean_value, "binary": bytea_value, "date": date_value,
    "timestamp_ntz": timestamp_value, "timestamp": timestamptz_value, "time": time_value,
}


def _text_converter(column: Column) -> Callable[[str], Any]:
    """The converter of ``column``'s text (never NULL) into the canonical value of ``column.type``; it raises
    ``TypeValueError`` for text the type cannot hold (``TableSchema.converter`` adds source, table and column).
    ``column.source_type`` is the type as ``format_type`` prints it (the base type's, for a domain)."""
    converter = _CONVERTERS.get(column.type.kind)
    if converter is not None:
        return converter
    if column.type.kind == "string" and _INTERVAL_TYPE.fullmatch(column.source_type.strip()):
        return interval_value
    return same  # text, char(n) with its padding, json, uuid, enums, arrays...
