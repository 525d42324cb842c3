"""MySQL's binary JSON (the storage and binlog form of a JSON column, ``sql-common/json_binary.cc``)
printed as MySQL prints the value (``Json_wrapper::to_string``): ``{"a": [1, 2.5, "x"]}``.

MariaDB stores JSON as text, which never comes here. The format: a type byte, then the value. Objects
and arrays hold a count and a size (2 bytes each in the small form, 4 in the large), entries for keys
(offset, length) and values (type, offset or the value itself when it fits), then keys and values.
Strings and opaque values carry a length of 7-bit groups. Opaque values are other MySQL types held in
JSON (DECIMAL, dates and times), printed as MySQL prints them.
"""

from __future__ import annotations

import base64
import decimal
import json
import math
import struct

from dagster_databus.sources.mysql.wire.tablemap import decimal_size

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0, 1, 2, 3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = 4, 5, 6, 7, 8, 9, 10, 11, 12, 15
_LITERALS = {0: "null", 1: "true", 2: "false"}
# Opaque field types (enum_field_types) printed as text.
_DECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP = 246, 10, 11, 12, 7
_ESCAPE = json.JSONEncoder(ensure_ascii=False)


def json_text(data: bytes) -> str:
    """The text MySQL prints for a binary JSON value (an empty value is JSON null, as MySQL reads it)."""
    if not data:
        return "null"
    return _value(data[0], data, 1)


def _value(kind: int, data: bytes, pos: int) -> str:
    if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(kind, data, pos)
    if kind == LITERAL:
        return _LITERALS[data[pos]]
    if kind in _INTS:
        fmt = _INTS[kind]
        return str(struct.unpack_from(fmt, data, pos)[0])
    if kind == DOUBLE:
        return double_text(struct.unpack_from("<d", data, pos)[0])
    if kind == STRING:
        size, pos = _varlen(data, pos)
        return _ESCAPE.encode(data[pos:pos + size].decode("utf-8"))
    if kind == OPAQUE:
        field_type = data[pos]
        size, pos = _varlen(data, pos + 1)
        return _opaque(field_type, data[pos:pos + size])
    raise ValueError(f"binary JSON value type {kind} is not one MySQL writes")


_INTS = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q"}


def _container(kind: int, data: bytes, start: int) -> str:
    large = kind in (LARGE_OBJECT, LARGE_ARRAY)
    word = 4 if large else 2
    fmt = "<I" if large else "<H"
    count = struct.unpack_from(fmt, data, start)[0]
    pos = start + 2 * word
    obj = kind in (SMALL_OBJECT, LARGE_OBJECT)
    keys = []
    if obj:
        for _ in range(count):
            offset = struct.unpack_from(fmt, data, pos)[0]
            length = struct.unpack_from("<H", data, pos + word)[0]
            keys.append(_ESCAPE.encode(data[start + offset:start + offset + length].decode("utf-8")))
            pos += word + 2
    values = []
    for _ in range(count):
        value_type = data[pos]
        if value_type == LITERAL or value_type in (INT16, UINT16) or (large and value_type in (INT32, UINT32)):
            values.append(_value(value_type, data, pos + 1))  # inlined in the entry
        else:
            offset = struct.unpack_from(fmt, data, pos + 1)[0]
            values.append(_value(value_type, data, start + offset))
        pos += 1 + word
    if obj:
        return "{" + ", ".join(f"{key}: {value}" for key, value in zip(keys, values, strict=True)) + "}"
    return "[" + ", ".join(values) + "]"


def _varlen(data: bytes, pos: int) -> tuple[int, int]:
    """A length in 7-bit groups, low group first, the high bit set on all but the last."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def double_text(value: float) -> str:
    """A double as MySQL prints it in JSON (``my_gcvt``, then ``.0`` where it wrote neither ``.`` nor ``e``):
    the shortest digits that read back the same, in plain notation except below 1e-15 and for whole numbers
    of 16 digits or more (``1e-16``, ``1e15``, ``9.007199254740992e15``); an exponent has no plus sign or
    leading zeros."""
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    shortest = decimal.Decimal(repr(abs(value))).normalize()
    if not shortest:
        return f"{sign}0.0"
    _, digit_tuple, exponent = shortest.as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)  # digits before the decimal point (dtoa's decpt)
    if point <= _MIN_POINT or (point > _MAX_POINT and point >= len(digits)):
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{point - 1}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}.0"
    return f"{sign}{digits[:point]}.{digits[point:]}"


_MAX_POINT = 15  # DBL_DIG: MySQL's MAX_DECPT_FOR_F_FORMAT
_MIN_POINT = -15


def _opaque(field_type: int, data: bytes) -> str:
    if field_type == _DECIMAL:
        precision, scale = data[0], data[1]
        return _decimal(data[2:], precision, scale)
    if field_type in (_DATE, _DATETIME, _TIMESTAMP):
        return _ESCAPE.encode(_packed_datetime(struct.unpack_from("<q", data)[0], field_type == _DATE))
    if field_type == _TIME:
        return _ESCAPE.encode(_packed_time(struct.unpack_from("<q", data)[0]))
    return _ESCAPE.encode("base64:type" + str(field_type) + ":" + base64.b64encode(data).decode())


def _decimal(data: bytes, precision: int, scale: int) -> str:
    """A packed decimal (``decimal2bin``) as its plain text."""
    raw = bytearray(data[:decimal_size(precision, scale)])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    digits, pos = "", 0
    whole = precision - scale
    for count in ([whole % 9] if whole % 9 else []) + [9] * (whole // 9) + [9] * (scale // 9) + (
            [scale % 9] if scale % 9 else []):
        size = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)[count]
        digits += str(int.from_bytes(raw[pos:pos + size], "big")).zfill(count)
        pos += size
    value = decimal.Decimal(f"{'-' if negative else ''}{digits[:whole] or '0'}.{digits[whole:] or '0'}")
    return format(value.quantize(decimal.Decimal(1).scaleb(-scale)) if scale else value.to_integral_value(), "f")


def _packed_datetime(packed: int, date_only: bool) -> str:
    """MySQL's packed datetime (``TIME_from_longlong_datetime_packed``)."""
    negative = packed < 0
    packed = abs(packed)
    micros = packed % (1 << 24)
    ymdhms = packed >> 24
    ymd, hms = ymdhms >> 17, ymdhms % (1 << 17)
    ym = ymd >> 5
    text = f"{'-' if negative else ''}{ym // 13:04d}-{ym % 13:02d}-{ymd % 32:02d}"
    if date_only:
        return text
    return f"{text} {hms >> 12:02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{micros:06d}"


def _packed_time(packed: int) -> str:
    negative = packed < 0
    packed = abs(packed)
    micros, hms = packed % (1 << 24), packed >> 24
    return f"{'-' if negative else ''}{(hms >> 12) % (1 << 10):02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{micros:06d}"

