"""Column types: one canonical Python value per type, and its change-log (Avro), Spark, Delta and JSON forms.

Every source turns what its driver returns into the canonical value of the column's type
(``ColumnType.check``); from there one code path writes the change log, the snapshot and what
consumers see, so a value is the same whichever way a row travelled (bootstrap or change
events). The per-source mapping from declared types to these lives in ``sources/*/types.py``
and in docs/types.md.

==============  =======================  ====================================  ===================
type            canonical Python value   Avro (change log)                     Delta / Arrow
==============  =======================  ====================================  ===================
boolean         bool                     boolean                               boolean
byte/short/     int (range checked)      int (byte, short, integer)            byte/short/integer
integer/long                             long                                  long
float           float holding a float32  float                                 float (32-bit)
double          float                    double                                double
decimal(p,s)    Decimal, exactly s       bytes, logicalType decimal(p,s)       decimal(p,s); p > 38:
                fractional digits                                              string (plain text)
number          Decimal, normalized      string (plain text)                   string (plain text)
string          str                      string                                string
binary          bytes                    bytes                                 binary
date            date                     int, logicalType date                 date
timestamp       datetime in UTC          long, timestamp-micros                timestamp (UTC)
timestamp_ntz   naive datetime           long, local-timestamp-micros          timestamp_ntz
time            timedelta (signed)       long, microseconds                    long (microseconds)
==============  =======================  ====================================  ===================
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal  # in annotations: the class's own ``decimal`` hides the module there
from typing import Any, Literal

import pyarrow as pa

from dagster_databus.errors import TypeValueError

Kind = Literal["boolean", "byte", "short", "integer", "long", "float", "double", "decimal", "number", "string",
               "binary", "date", "timestamp", "timestamp_ntz", "time"]
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]

MAX_DELTA_PRECISION = 38  # Delta's (and Spark's) widest decimal
TIME_LOGICAL_TYPE = "databus-time-micros"  # a signed duration: a TIME may span -838:59:59..838:59:59
NUMBER_LOGICAL_TYPE = "databus-decimal-text"  # a decimal of any scale (a NUMBER), as plain text

_INT_RANGES = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_UTC = dt.UTC
_EPOCH_DAYS = dt.date(1970, 1, 1).toordinal()


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A column's type in the product: what every path (log, snapshot, consumers) holds it as."""

    kind: Kind
    precision: int = 0  # decimal only
    scale: int = 0  # decimal only

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown column type {self.kind!r}")
        if self.kind == "decimal" and not (self.precision >= 1 and 0 <= self.scale <= self.precision):
            raise ValueError(f"decimal({self.precision},{self.scale}) needs 1 <= precision and 0 <= scale <= precision")

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.kind == "decimal" else self.kind

    @classmethod
    def parse(cls, text: str) -> ColumnType:
        match = re.fullmatch(r"decimal\((\d+),(\d+)\)", text.replace(" ", ""))
        if match:
            return cls("decimal", int(match.group(1)), int(match.group(2)))
        return cls(text)  # type: ignore[arg-type]

    @classmethod
    def decimal(cls, precision: int, scale: int) -> ColumnType:
        return cls("decimal", precision, scale)

    @property
    def as_text_in_delta(self) -> bool:
        """Decimals Delta cannot hold are kept in the snapshot as exact plain text."""
        return self.kind == "number" or (self.kind == "decimal" and self.precision > MAX_DELTA_PRECISION)

    # -- forms -------------------------------------------------------------------------

    def avro(self) -> Any:
        k = self.kind
        if k in ("byte", "short", "integer"):
            return "int"
        if k == "binary":
            return "bytes"
        if k == "decimal":
            return {"type": "bytes", "logicalType": "decimal", "precision": self.precision, "scale": self.scale}
        if k == "number":
            return {"type": "string", "logicalType": NUMBER_LOGICAL_TYPE}
        if k == "date":
            return {"type": "int", "logicalType": "date"}
        if k == "timestamp":
            return {"type": "long", "logicalType": "timestamp-micros"}
        if k == "timestamp_ntz":
            return {"type": "long", "logicalType": "local-timestamp-micros"}
        if k == "time":
            return {"type": "long", "logicalType": TIME_LOGICAL_TYPE}
        return k  # boolean, long, float, double, string

    def arrow(self) -> pa.DataType:
        if self.as_text_in_delta:
            return pa.string()
        if self.kind == "decimal":
            return pa.decimal128(self.precision, self.scale)
        return _ARROW[self.kind]

    def delta(self) -> str:
        """The Delta column type, as Delta and Spark name it."""
        if self.as_text_in_delta:
            return "string"
        return {"time": "long"}.get(self.kind, str(self))

    def spark(self) -> str:
        if self.as_text_in_delta:
            return "string"
        return _SPARK.get(self.kind, str(self))

    # -- values ------------------------------------------------------------------------

    def check(self, value: Any) -> Any:
        """``value`` as this type's canonical value; ``TypeValueError`` when it cannot be held exactly."""
        if value is None:
            return None
        k = self.kind
        if k in _INT_RANGES:
            if type(value) is not int:
                raise TypeValueError(f"{type(value).__name__} is not an integer")
            bits = _INT_RANGES[k]
            if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
                raise TypeValueError(f"{value} is outside the {bits}-bit range of {k}")
            return value
        if k == "double":
            if type(value) is not float:
                raise TypeValueError(f"{type(value).__name__} is not a floating-point number")
            return value
        if k == "float":
            if type(value) is not float:
                raise TypeValueError(f"{type(value).__name__} is not a floating-point number")
            return float32(value)
        if k == "decimal":
            return self._check_decimal(value)
        if k == "number":
            if not isinstance(value, decimal.Decimal) or not value.is_finite():
                raise TypeValueError(f"{value!r} is not a finite decimal")
            return decimal.Decimal(number_text(value))
        if k == "string":
            if type(value) is not str:
                raise TypeValueError(f"{type(value).__name__} is not text")
            return value
        if k == "binary":
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeValueError(f"{type(value).__name__} is not bytes")
            return bytes(value)
        if k == "boolean":
            if type(value) is not bool:
                raise TypeValueError(f"{type(value).__name__} is not a boolean")
            return value
        if k == "date":
            if type(value) is not dt.date:
                raise TypeValueError(f"{type(value).__name__} is not a date")
            return value
        if k == "timestamp":
            if not isinstance(value, dt.datetime) or value.tzinfo is None or value.utcoffset() is None:
                raise TypeValueError(f"{value!r} is not a datetime with a time zone")
            return value.astimezone(_UTC)
        if k == "timestamp_ntz":
            if not isinstance(value, dt.datetime) or value.tzinfo is not None:
                raise TypeValueError(f"{value!r} is not a datetime without a time zone")
            return value
        if k == "time":
            if not isinstance(value, dt.timedelta):
                raise TypeValueError(f"{type(value).__name__} is not a time (duration)")
            return value
        raise AssertionError(k)

    def _check_decimal(self, value: Any) -> Decimal:
        if not isinstance(value, decimal.Decimal) or not value.is_finite():
            raise TypeValueError(f"{value!r} is not a finite decimal")
        context = decimal.Context(prec=self.precision + 200)
        quantized = value.quantize(decimal.Decimal(1).scaleb(-self.scale), context=context)
        if quantized != value:
            raise TypeValueError(f"{value} has more than {self.scale} digits after the decimal point")
        if len(quantized.as_tuple().digits) > self.precision:
            raise TypeValueError(f"{value} has more than {self.precision - self.scale} digits before the decimal point")
        return abs(quantized) if quantized.is_zero() else quantized  # no negative zero: Avro cannot keep it

    def to_avro(self, value: Any) -> Any:
        """The canonical value as fastavro writes it (logical types it knows are passed through)."""
        if value is None:
            return None
        if self.kind == "time":
            return value // _MICRO
        if self.kind == "number":
            return plain_decimal(value)
        return value

    def from_avro(self, value: Any) -> Any:
        if value is None:
            return None
        if self.kind == "time":
            return dt.timedelta(microseconds=value)
        if self.kind == "number":
            return decimal.Decimal(value)
        return value

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        """Canonical values as this type's snapshot (Delta) column."""
        if self.kind == "time":
            values = [None if v is None else v // _MICRO for v in values]
        elif self.as_text_in_delta:
            values = [None if v is None else plain_decimal(v) for v in values]
        return pa.array(values, type=self.arrow())

    def from_arrow(self, array: pa.Array | pa.ChunkedArray) -> list[Any]:
        """A snapshot column back as canonical values (what consumers receive)."""
        values: list[Any] = array.to_pylist()
        if self.kind == "time":
            return [None if v is None else dt.timedelta(microseconds=v) for v in values]
        if self.as_text_in_delta:
            return [None if v is None else decimal.Decimal(v) for v in values]
        if self.kind == "timestamp":
            return [None if v is None else v.astimezone(_UTC) for v in values]
        return values

    def to_json(self, value: Any) -> Any:
        """The one text form ``databus tail`` prints (docs/types.md): JSON-native where exact."""
        if self.kind == "float" and isinstance(value, float):
            return _float_json(value, float32_text(value))
        return json_value(value)


_MICRO = dt.timedelta(microseconds=1)

_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "string": pa.string(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
    "time": pa.int64(),
}
_SPARK = {"byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint", "time": "bigint"}


def float32(value: float) -> float:
    """The float32 nearest ``value`` (what a FLOAT column stores), as a Python float."""
    try:
        nearest: float = struct.unpack("<f", struct.pack("<f", value))[0]
        return nearest
    except OverflowError:
        raise TypeValueError(f"{value!r} is outside the range of a 32-bit float") from None


def float32_text(value: float) -> str:
    """The shortest decimal text that reads back as the same float32 (``0.3``, not ``0.30000001192092896``)."""
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if float32(float(text)) == value:
            return text
    return repr(value)


def plain_decimal(value: decimal.Decimal) -> str:
    """Exact plain text of a decimal (no exponent); a decimal(p,s) keeps its s fractional digits."""
    return format(value, "f")


def number_text(value: decimal.Decimal) -> str:
    """The canonical text of a decimal of any scale: normalized, plain (``1.5``, ``100``, ``-0.001``)."""
    # normalize() rounds to the context's precision (28 digits by default): give it all the digits.
    text = format(value.normalize(decimal.Context(prec=max(len(value.as_tuple().digits), 1))), "f")
    return "0" if decimal.Decimal(text).is_zero() else text


def _float_json(value: float, text: str) -> Any:
    if value != value or value in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[text]
    return float(text)


def time_text(value: dt.timedelta) -> str:
    """``[-]HH:MM:SS[.ffffff]``, hours beyond 24 as a server prints them (``-838:59:59``)."""
    micros = value // _MICRO
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}" if fraction else "")


def json_value(value: Any) -> Any:
    """A canonical value in its JSON text form: numbers and text stay JSON-native, the rest become
    strings with one form per type (also the stored form of key values)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _float_json(value, repr(value))
    if isinstance(value, decimal.Decimal):
        return plain_decimal(value)
    if isinstance(value, dt.datetime):
        text = value.replace(tzinfo=None).isoformat()
        return text + "Z" if value.tzinfo is not None else text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return time_text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    raise TypeError(f"no JSON form for {type(value).__name__} value {value!r}")
