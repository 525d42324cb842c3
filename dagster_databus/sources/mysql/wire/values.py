"""The binlog road of a MySQL value: a table map column's product type, and its values cut out of row
images a column at a time into the snapshot's Arrow column (``core.types``), the same value the
bootstrap reads with pymysql (``sources.mysql.types``) for every type in docs/types.md.

- BINARY(n) is stored without its right padding of zero bytes; it is restored here.
- YEAR 0000 is stored as 0 (not 1900 + 0). A zero TIMESTAMP is stored as 0 seconds.
- Zero dates, partly zero dates and dates Delta cannot hold follow the source's ``zero_dates``.
- SET is a bitmask: its members' names in definition order, joined by commas ("" for none).
- MariaDB's UUID, INET6 and INET4 arrive as their 16 or 4 bytes and become their text.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from dagster_databus.core.schema import Column
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import TypeValueError
from dagster_databus.sources.mysql.charsets import ServerCharsets
from dagster_databus.sources.mysql.types import MysqlType, ZeroDates
from dagster_databus.sources.mysql.wire import kernels as k
from dagster_databus.sources.mysql.wire.json_binary import json_text
from dagster_databus.sources.mysql.wire.tablemap import (
    BIT,
    BLOB,
    DATE,
    DATETIME,
    DATETIME2,
    DOUBLE,
    ENUM,
    FLOAT,
    GEOMETRY,
    INT24,
    JSON,
    LONG,
    LONG_BLOB,
    LONGLONG,
    MEDIUM_BLOB,
    NEWDATE,
    NEWDECIMAL,
    SET,
    SHORT,
    STRING,
    TIME,
    TIME2,
    TIMESTAMP,
    TIMESTAMP2,
    TINY,
    TINY_BLOB,
    VAR_STRING,
    VARCHAR,
    YEAR,
    BinlogColumn,
)

assert sys.byteorder == "little", "row images are little-endian and are viewed in place"

_INTS = {TINY: "tinyint", SHORT: "smallint", INT24: "mediumint", LONG: "int", LONGLONG: "bigint"}
_SIGNED = {"tinyint": "byte", "smallint": "short", "mediumint": "integer", "int": "integer", "bigint": "long"}
_UNSIGNED = {"tinyint": "short", "smallint": "integer", "mediumint": "integer", "int": "long",
             "bigint": "decimal(20,0)"}
_SIMPLE = {FLOAT: "float", DOUBLE: "double", TIMESTAMP: "timestamp", TIMESTAMP2: "timestamp",
           DATETIME: "timestamp_ntz", DATETIME2: "timestamp_ntz", DATE: "date", NEWDATE: "date", TIME: "time",
           TIME2: "time", YEAR: "integer", JSON: "string", ENUM: "string", SET: "string", GEOMETRY: "binary"}
_TEXTUAL = (VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB)
_NAMES = {TINY: "tinyint", SHORT: "smallint", INT24: "mediumint", LONG: "int", LONGLONG: "bigint", FLOAT: "float",
          DOUBLE: "double", TIMESTAMP: "timestamp", TIMESTAMP2: "timestamp", DATETIME: "datetime",
          DATETIME2: "datetime", DATE: "date", NEWDATE: "date", TIME: "time", TIME2: "time", YEAR: "year",
          JSON: "json", GEOMETRY: "geometry", NEWDECIMAL: "decimal", BIT: "bit", ENUM: "enum", SET: "set",
          VARCHAR: "varchar", VAR_STRING: "varchar", STRING: "char", TINY_BLOB: "tinyblob", BLOB: "blob",
          MEDIUM_BLOB: "mediumblob", LONG_BLOB: "longblob"}
_SPECIAL = ("uuid", "inet6", "inet4")


def column_type(col: BinlogColumn) -> ColumnType | None:
    """The product type of a table map column; None when it has no mapping (VECTOR, ...)."""
    t = col.type
    if t in _INTS:
        return ColumnType.parse((_UNSIGNED if col.unsigned else _SIGNED)[_INTS[t]])
    if t in _SIMPLE:
        return ColumnType.parse(_SIMPLE[t])
    if t == NEWDECIMAL:
        return ColumnType.decimal(col.precision, col.scale)
    if t == BIT:
        return ColumnType("boolean" if col.bits == 1 else "binary")
    if t in _TEXTUAL:
        return ColumnType("binary" if col.binary else "string")
    return None


def source_type(col: BinlogColumn) -> str:
    """A COLUMN_TYPE-like description of a table map column, for schemas and messages."""
    t = col.type
    name = _NAMES.get(t, f"binlog type {t}")
    if t == NEWDECIMAL:
        return f"decimal({col.precision},{col.scale})"
    if t == BIT:
        return f"bit({col.bits})"
    if t in (ENUM, SET):
        return f"{name}(" + ",".join("'" + m.replace("'", "''") + "'" for m in col.members) + ")"
    if t in (VARCHAR, VAR_STRING, STRING):
        base = {"varchar": "varbinary", "char": "binary"}[name] if col.binary else name
        return f"{base}({col.max_length})"
    if t in (TINY_BLOB, BLOB, MEDIUM_BLOB, LONG_BLOB) and not col.binary:
        return {1: "tinytext", 2: "text", 3: "mediumtext", 4: "longtext"}.get(col.pack_length, "text")
    if t == BLOB:
        return {1: "tinyblob", 2: "blob", 3: "mediumblob", 4: "longblob"}.get(col.pack_length, "blob")
    if t in (TIMESTAMP2, DATETIME2, TIME2) and col.scale:
        return f"{name}({col.scale})"
    return f"{name} unsigned" if col.unsigned and t != YEAR else name  # MariaDB flags YEAR unsigned


def compatible(known: Column, col: BinlogColumn, ctype: ColumnType | None) -> bool:
    """Whether a table map column is the known (information_schema) column as the binlog writes it."""
    if known.type == ctype:
        return True
    special = MysqlType.parse(known.source_type).name
    return (special in _SPECIAL and col.type == STRING and col.binary
            and col.max_length == (4 if special == "inet4" else 16))


# Raises for the first value (by its index) that does not fit: (index, the value, why).
Refuse = Callable[[int, Any, str], NoReturn]
# A column's values from the scan: the row bytes, each value's offset and length (``kernels.NULL``).
Cutter = Callable[[np.ndarray, np.ndarray, np.ndarray, Refuse], pa.Array]


def cutter(col: BinlogColumn, column: Column, zero_dates: ZeroDates, charsets: ServerCharsets) -> Cutter:
    """How ``column``'s snapshot values are cut out of row images, given its table map ``col`` (whose
    character set capture decodes: ``undecodable`` is checked first)."""
    kind, arrow = column.type.kind, column.type.arrow()
    special = MysqlType.parse(column.source_type).name
    t = col.type
    if special in _SPECIAL:
        return _texts(_binary(col.max_length), _TEXT_FORMS[special])
    if t in (TINY, SHORT, LONG, LONGLONG):
        width = {TINY: 1, SHORT: 2, LONG: 4, LONGLONG: 8}[t]
        view = np.dtype(f"{'u' if col.unsigned else 'i'}{width}")
        return lambda data, off, ln, refuse: _fixed(data, off, ln, width, view, arrow)
    if t == INT24:
        signed = not col.unsigned
        return lambda data, off, ln, refuse: _into(k.int24, data, off, ln, np.int32, pa.int32(), signed)
    if t == FLOAT:
        return lambda data, off, ln, refuse: _fixed(data, off, ln, 4, np.dtype("f4"), arrow)
    if t == DOUBLE:
        return lambda data, off, ln, refuse: _fixed(data, off, ln, 8, np.dtype("f8"), arrow)
    if t == YEAR:
        def year(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
            values = np.zeros(len(off), np.int32)
            k.unsigned_le(data, off, ln, 1, values)
            return _array(np.where(values == 0, 0, values + 1900).astype(np.int32), ln, pa.int32())
        return year
    if t == NEWDECIMAL:
        return _decimal(col.precision, col.scale, column.type)
    if t in (DATE, NEWDATE, DATETIME, DATETIME2, TIMESTAMP, TIMESTAMP2):
        return _temporal(t, col.scale, arrow, zero_dates)
    if t in (TIME, TIME2):
        def times(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
            values = np.zeros(len(off), np.int64)
            k.times2(data, off, ln, col.scale, values) if t == TIME2 else k.times_old(data, off, ln, values)
            return _array(values, ln, pa.int64())
        return times
    if t == BIT:
        width = (col.bits + 7) // 8
        if kind == "boolean":
            return lambda data, off, ln, refuse: _array(
                np.asarray(_gather(data, off, ln, width).reshape(-1, width).any(axis=1)), ln, pa.bool_())
        return lambda data, off, ln, refuse: _fixed_binary(data, off, ln, width)
    if t == ENUM:
        return _enum(col)
    if t == SET:
        return _set(col)
    if t == JSON:
        return _texts(_binary(0), json_text)
    if kind == "binary":
        return _binary(col.max_length if t == STRING else 0)
    return _string(col, charsets)


def undecodable(col: BinlogColumn, charsets: ServerCharsets) -> bool:
    """Whether ``col`` holds text of a character set (or collation id) capture cannot decode."""
    textual = col.type in (ENUM, SET) or (col.type in _TEXTUAL and not col.binary)
    return textual and charsets.decoder(col.collation) is None


def members_decoded(col: BinlogColumn, charsets: ServerCharsets) -> BinlogColumn:
    """``col`` with the ENUM or SET members a table map gave (bytes in the column's character set, read as
    UTF-8 with surrogate escapes) as text."""
    decoder = charsets.decoder(col.collation)
    if col.type not in (ENUM, SET) or decoder is None or charsets.utf8(col.collation):
        return col
    return replace(col, members=tuple(decoder(m.encode("utf-8", "surrogateescape")) for m in col.members))


def _array(values: np.ndarray, ln: np.ndarray, arrow: pa.DataType) -> pa.Array:
    nulls = ln == k.NULL
    return pa.array(values, type=arrow, mask=nulls if nulls.any() else None)


def _gather(data: np.ndarray, off: np.ndarray, ln: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(len(off) * width, np.uint8)
    k.gather_fixed(data, off, ln, width, out)
    return out


def _fixed(data: np.ndarray, off: np.ndarray, ln: np.ndarray, width: int, view: np.dtype,
           arrow: pa.DataType) -> pa.Array:
    values = _gather(data, off, ln, width).view(view)
    if pa.types.is_decimal(arrow):  # BIGINT UNSIGNED
        return _array(values, ln, pa.uint64()).cast(arrow)
    return _array(values, ln, pa.from_numpy_dtype(view)).cast(arrow)


def _into(kernel: Any, data: np.ndarray, off: np.ndarray, ln: np.ndarray, dtype: Any, arrow: pa.DataType,
          *args: Any) -> pa.Array:
    values = np.zeros(len(off), dtype)
    kernel(data, off, ln, *args, values)
    return _array(values, ln, arrow)


def _validity(ln: np.ndarray) -> pa.Buffer | None:
    nulls = ln == k.NULL
    if not nulls.any():
        return None
    return pa.array(~nulls).buffers()[1]


def _var(data: np.ndarray, off: np.ndarray, ln: np.ndarray, pad_to: int) -> pa.Array:
    """Variable-length values as one Arrow binary array (no copy per value)."""
    offsets = np.empty(len(off) + 1, np.int64)
    k.var_sizes(ln, pad_to, offsets)
    if offsets[-1] >= 2**31:
        raise TypeValueError(f"{offsets[-1]} bytes of one column in one batch exceed what an Arrow column holds; "
                             "lower the source's poll.chunk_rows")
    out = np.empty(offsets[-1], np.uint8)
    k.gather_var(data, off, ln, pad_to, offsets, out)
    nulls = ln == k.NULL
    return pa.Array.from_buffers(pa.binary(), len(off), [_validity(ln), pa.py_buffer(offsets.astype(np.int32)),
                                                         pa.py_buffer(out)], null_count=int(nulls.sum()))


def _binary(pad_to: int) -> Cutter:
    return lambda data, off, ln, refuse: _var(data, off, ln, pad_to)


def _fixed_binary(data: np.ndarray, off: np.ndarray, ln: np.ndarray, width: int) -> pa.Array:
    return _var(data, off, np.where(ln == k.NULL, k.NULL, width), 0)


def _string(col: BinlogColumn, charsets: ServerCharsets) -> Cutter:
    if charsets.utf8(col.collation):
        def utf8(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
            raw = _var(data, off, ln, 0)
            try:
                return raw.cast(pa.string())
            except pa.ArrowInvalid:
                for i, value in enumerate(raw.to_pylist()):
                    try:
                        value is None or value.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        refuse(i, value, f"it is not valid UTF-8 text ({exc.reason})")
                raise
        return utf8
    decoder = charsets.decoder(col.collation)
    assert decoder is not None  # undecodable() columns are refused before their cutters are made
    converted = _texts(_binary(0), decoder)
    if not charsets.ascii_same(col.collation):
        return converted

    def single_byte(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
        raw = _var(data, off, ln, 0)
        values = raw.buffers()[2]
        if values is None or not (np.frombuffer(values, np.uint8) >= 0x80).any():
            return raw.cast(pa.string())  # ASCII only (latin1's usual case): the same bytes in UTF-8
        return converted(data, off, ln, refuse)
    return single_byte


def _texts(raw: Cutter, convert: Callable[[bytes], str]) -> Cutter:
    """Values converted one by one in Python: only for rare types (MySQL's binary JSON, UUID, INET, text of
    character sets other than UTF-8)."""
    def texts(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
        out = []
        for i, value in enumerate(raw(data, off, ln, refuse).to_pylist()):
            try:
                out.append(None if value is None else convert(value))
            except ValueError as exc:  # UnicodeDecodeError, a damaged binary JSON
                refuse(i, value, str(exc))
        return pa.array(out, pa.string())
    return texts


def _decimal(precision: int, scale: int, ctype: ColumnType) -> Cutter:
    def decimals(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
        out = np.empty(len(off) * (precision + 3), np.uint8)
        offsets = np.empty(len(off) + 1, np.int64)
        k.decimals_text(data, off, ln, precision, scale, offsets, out)
        text = pa.Array.from_buffers(pa.string(), len(off), [_validity(ln), pa.py_buffer(offsets.astype(np.int32)),
                                                             pa.py_buffer(out)])
        return text if ctype.as_text_in_delta else text.cast(ctype.arrow())
    return decimals


def _temporal(t: int, fsp: int, arrow: pa.DataType, zero_dates: ZeroDates) -> Cutter:
    def temporal(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
        bad = np.zeros(len(off), np.bool_)
        values = np.zeros(len(off), np.int32 if t in (DATE, NEWDATE) else np.int64)
        if t in (DATE, NEWDATE):
            k.dates(data, off, ln, values, bad)
        elif t == DATETIME2:
            k.datetimes2(data, off, ln, fsp, values, bad)
        elif t == DATETIME:
            k.datetimes_old(data, off, ln, values, bad)
        else:
            k.timestamps(data, off, ln, fsp, t == TIMESTAMP2, values, bad)
        if bad.any():
            if zero_dates == "error":
                row = int(np.flatnonzero(bad)[0])
                refuse(row, "<zero date>", "a zero, partly zero or out-of-range date, which Delta's date and "
                       "timestamp types cannot hold; set the source's zero_dates: null to store such dates as "
                       "NULL, or correct the rows")
            ln = np.where(bad, k.NULL, ln)
        physical = pa.int32() if t in (DATE, NEWDATE) else pa.int64()
        return _array(values, ln, physical).cast(arrow)
    return temporal


def _enum(col: BinlogColumn) -> Cutter:
    names = pa.array(["", *col.members], pa.string())  # index 0: the empty string of an invalid value

    def enum(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
        index = np.zeros(len(off), np.int64)
        k.unsigned_le(data, off, ln, col.pack_length, index)
        if len(index) and index.max() >= len(names):
            row = int(np.argmax(index))
            refuse(row, int(index[row]), f"the ENUM index is past the column's {len(col.members)} members")
        return names.take(_array(index, ln, pa.int64()))
    return enum


def _set(col: BinlogColumn) -> Cutter:
    encoded = [m.encode() for m in col.members]
    names = np.frombuffer(b"".join(encoded), np.uint8) if encoded else np.zeros(0, np.uint8)
    name_offsets = np.cumsum([0, *map(len, encoded)]).astype(np.int64)

    def sets(data: np.ndarray, off: np.ndarray, ln: np.ndarray, refuse: Refuse) -> pa.Array:
        offsets = np.empty(len(off) + 1, np.int64)
        past = k.sets_text(data, off, ln, col.pack_length, names, name_offsets, offsets, _NOWHERE, False)
        if past:
            refuse(0, f"bit {past - 1}", f"the SET bit names none of the column's {len(col.members)} members (the "
                   "table map names them with binlog_row_metadata=FULL)")
        out = np.empty(offsets[-1], np.uint8)
        k.sets_text(data, off, ln, col.pack_length, names, name_offsets, offsets, out, True)
        return pa.Array.from_buffers(pa.string(), len(off), [_validity(ln), pa.py_buffer(offsets.astype(np.int32)),
                                                             pa.py_buffer(out)])
    return sets


_NOWHERE = np.zeros(0, np.uint8)  # the output of a pass that only sizes


def _pad(value: bytes, width: int) -> bytes:
    return value.ljust(width, b"\x00")


_TEXT_FORMS: dict[str, Callable[[bytes], str]] = {
    "uuid": lambda v: str(uuid.UUID(bytes=_pad(v, 16))),
    "inet6": lambda v: socket.inet_ntop(socket.AF_INET6, _pad(v, 16)),
    "inet4": lambda v: str(ipaddress.IPv4Address(_pad(v, 4))),
}
