"""Table map events: the table a row event belongs to and its columns' binlog types, with the optional
metadata ``binlog_row_metadata=FULL`` adds (names, signedness, character sets, ENUM and SET members).

Each column becomes a ``BinlogColumn``, a small immutable value that says how its values are laid out in
a row image (``width``) and what they mean; ``sources.mysql.types`` maps it to a product type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Required, TypedDict

import numpy as np

from dagster_databus.errors import BinlogEventError
from dagster_databus.sources.mysql.wire.packed import net_length

# MySQL's column type codes (enum_field_types) that the binlog writes.
DECIMAL_OLD, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = range(10, 20)
VECTOR, JSON, NEWDECIMAL, ENUM, SET = 242, 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = range(249, 256)

BINARY_COLLATION = 63
# The columns the SIGNEDNESS bitmap has a bit for, one each in column order. YEAR and the old DECIMAL count
# on both servers: MySQL 8's has_signedess_information_type (sql/field_common_properties.h) lists them, and
# MariaDB's Field_year is a Field_tiny (its bit is set: YEAR is unsigned). Leaving YEAR out shifts the bits of
# every numeric column after it onto its neighbour.
_NUMERIC = frozenset((TINY, SHORT, INT24, LONG, LONGLONG, YEAR, DECIMAL_OLD, NEWDECIMAL, FLOAT, DOUBLE))
_CHARACTER = frozenset((STRING, VAR_STRING, VARCHAR, BLOB))
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)

# Optional metadata field types (Table_map_event::Optional_metadata_field_type).
SIGNEDNESS, DEFAULT_CHARSET, COLUMN_CHARSET, COLUMN_NAME, SET_STR_VALUE, ENUM_STR_VALUE = 1, 2, 3, 4, 5, 6
ENUM_AND_SET_DEFAULT_CHARSET, ENUM_AND_SET_COLUMN_CHARSET = 10, 11


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a packed DECIMAL(precision, scale): 4 per 9 digits, fewer for the rest, either side."""
    whole = precision - scale
    return whole // 9 * 4 + _DIG2BYTES[whole % 9] + scale // 9 * 4 + _DIG2BYTES[scale % 9]


@dataclass(frozen=True, slots=True)
class BinlogColumn:
    """A column as a table map describes it."""

    name: str
    type: int  # the real type: ENUM and SET, which the map writes as STRING, are told apart
    nullable: bool = True
    unsigned: bool = False
    collation: int = 0  # character and ENUM/SET columns; 63 is binary
    max_length: int = 0  # CHAR, VARCHAR (bytes)
    precision: int = 0
    scale: int = 0  # DECIMAL; fractional-second digits of TIME2, DATETIME2, TIMESTAMP2
    bits: int = 0  # BIT
    pack_length: int = 0  # bytes of a BLOB/TEXT/JSON/GEOMETRY length, of an ENUM index, of a SET bitmask
    members: tuple[str, ...] = ()  # ENUM and SET

    @property
    def binary(self) -> bool:
        return self.collation == BINARY_COLLATION

    @property
    def width(self) -> int:
        """The bytes of a value in a row image; minus the bytes of its length prefix when it has one."""
        t = self.type
        if t in _FIXED:
            return _FIXED[t]
        if t == NEWDECIMAL:
            return decimal_size(self.precision, self.scale)
        if t in (TIMESTAMP2, DATETIME2, TIME2):
            return {TIMESTAMP2: 4, DATETIME2: 5, TIME2: 3}[t] + (self.scale + 1) // 2
        if t == BIT:
            return (self.bits + 7) // 8
        if t in (ENUM, SET):
            return self.pack_length
        if t in (VARCHAR, VAR_STRING, STRING):
            return -1 if self.max_length < 256 else -2
        if t in (BLOB, JSON, GEOMETRY, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, VECTOR):
            return -self.pack_length
        raise ValueError(f"binlog column type {t} has no known layout")


_FIXED = {TINY: 1, SHORT: 2, INT24: 3, LONG: 4, LONGLONG: 8, FLOAT: 4, DOUBLE: 8, YEAR: 1, DATE: 3, NEWDATE: 3,
          TIME: 3, DATETIME: 8, TIMESTAMP: 4, NULL: 0}


@dataclass(frozen=True, slots=True)
class TableMap:
    """A table map event: the table and its columns; ``widths`` is the layout the row decoder reads."""

    table_id: int
    database: str
    table: str
    columns: tuple[BinlogColumn, ...]
    named: bool  # the map carried column names (binlog_row_metadata=FULL)
    widths: np.ndarray = field(compare=False, hash=False, repr=False)


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: memoryview, pos: int = 0) -> None:
        self.data, self.pos, self.end = data, pos, len(data)

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def take(self, n: int) -> memoryview:
        if self.pos + n > self.end:
            raise IndexError("past the end of the event")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def packed(self) -> int:
        """A length-encoded integer (net_field_length)."""
        value, self.pos = net_length(self.data, self.pos)
        return value

    def text(self) -> str:
        return bytes(self.take(self.packed())).decode("utf-8", "surrogateescape")


def parse_table_map(body: memoryview, mariadb: bool, where: str) -> TableMap:
    """A table map event's body (after the header). ``mariadb`` says which server wrote it: MariaDB
    counts GEOMETRY among the character columns of the charset metadata, MySQL does not."""
    try:
        return _parse(body, mariadb)
    except (IndexError, ValueError) as exc:
        raise BinlogEventError(f"the table map event ending at {where} cannot be read: {exc}",
                               "the binlog is damaged there, or written by a server this version does not read; "
                               "report the server version", position=where) from None


def _parse(body: memoryview, mariadb: bool) -> TableMap:
    r = _Reader(body)
    table_id = int.from_bytes(r.take(6), "little")
    r.take(2)  # flags
    database = bytes(r.take(r.byte())).decode("utf-8", "surrogateescape")
    r.take(1)
    table = bytes(r.take(r.byte())).decode("utf-8", "surrogateescape")
    r.take(1)
    count = r.packed()
    types = list(r.take(count))
    meta = _Reader(r.take(r.packed()))
    nulls = r.take((count + 7) // 8)
    columns: list[_Fields] = []
    for i, t in enumerate(types):
        col: _Fields = {"type": t, "nullable": bool(nulls[i // 8] >> (i % 8) & 1)}
        if t in (FLOAT, DOUBLE, BLOB, JSON, GEOMETRY, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, VECTOR):
            col["pack_length"] = meta.byte()
        elif t == NEWDECIMAL:
            col["precision"], col["scale"] = meta.byte(), meta.byte()
        elif t in (VARCHAR, VAR_STRING):
            col["max_length"] = int.from_bytes(meta.take(2), "little")
        elif t == BIT:
            low, whole = meta.byte(), meta.byte()
            col["bits"] = whole * 8 + low
        elif t in (TIMESTAMP2, DATETIME2, TIME2):
            col["scale"] = meta.byte()
        elif t in (STRING, ENUM, SET):
            real, second = meta.byte(), meta.byte()
            if real in (ENUM, SET):
                col["type"], col["pack_length"] = real, second
            else:
                # A CHAR longer than 255 bytes keeps its length's high bits in the type byte.
                col["type"] = STRING
                col["max_length"] = second | ((((real & 0x30) ^ 0x30) << 4) if (real & 0x30) != 0x30 else 0)
        columns.append(col)
    names = _optional_metadata(r, columns, mariadb)
    named = names is not None
    built = tuple(BinlogColumn(name=names[i] if names is not None else f"@{i + 1}", **c)
                  for i, c in enumerate(columns))
    widths = np.array([c.width for c in built], np.int64)
    return TableMap(table_id, database, table, built, named, widths)


class _Fields(TypedDict, total=False):
    """A column's ``BinlogColumn`` fields but its name, as the table map's parts give them."""

    type: Required[int]
    nullable: bool
    unsigned: bool
    collation: int
    max_length: int
    precision: int
    scale: int
    bits: int
    pack_length: int
    members: tuple[str, ...]


def _optional_metadata(r: _Reader, columns: list[_Fields], mariadb: bool) -> list[str] | None:
    """Fill ``columns`` from the optional metadata fields; the columns' names, when they carried them."""
    # Which columns the charset fields list differs: MariaDB counts GEOMETRY, MySQL 9 counts VECTOR.
    character = [c for c in columns
                 if c["type"] in _CHARACTER or c["type"] == (GEOMETRY if mariadb else VECTOR)]
    enum_set = [c for c in columns if c["type"] in (ENUM, SET)]
    numeric = [c for c in columns if c["type"] in _NUMERIC]
    names: list[str] | None = None
    while r.pos < r.end:
        kind = r.byte()
        f = _Reader(r.take(r.packed()))
        if kind == SIGNEDNESS:
            bits = f.take(f.end)
            for i, c in enumerate(numeric):
                c["unsigned"] = bool(bits[i // 8] & (0x80 >> (i % 8)))
        elif kind in (DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET):
            targets = character if kind == DEFAULT_CHARSET else enum_set
            default = f.packed()
            for c in targets:
                c["collation"] = default
            while f.pos < f.end:
                index, collation = f.packed(), f.packed()
                targets[index]["collation"] = collation
        elif kind in (COLUMN_CHARSET, ENUM_AND_SET_COLUMN_CHARSET):
            for c in character if kind == COLUMN_CHARSET else enum_set:
                c["collation"] = f.packed()
        elif kind == COLUMN_NAME:
            names = [f.text() for _ in columns]
        elif kind in (SET_STR_VALUE, ENUM_STR_VALUE):
            wanted = SET if kind == SET_STR_VALUE else ENUM
            for c in (c for c in enum_set if c["type"] == wanted):
                c["members"] = tuple(f.text() for _ in range(f.packed()))
        # The rest (geometry subtypes, key columns, visibility, vector dimensions) changes no value.
    return names
