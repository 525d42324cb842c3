"""core/types.py: canonical values, their exact Avro and Arrow forms, and refusals."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import random
import struct

import fastavro
import pyarrow as pa
import pytest

from dagster_databus.core.batch import encode_keys
from dagster_databus.core.events import encode_key
from dagster_databus.core.schema import Column, TableSchema, same
from dagster_databus.core.types import ColumnType, float32, float32_text, json_value
from dagster_databus.errors import SchemaMismatchError, TypeValueError
from dagster_databus.log.segments import avro_conversions

D = decimal.Decimal
UTC = dt.UTC

EDGE_VALUES: dict[str, list[object]] = {
    "boolean": [True, False],
    "byte": [-128, 127, 0],
    "short": [-32768, 32767],
    "integer": [-(2**31), 2**31 - 1],
    "long": [-(2**63), 2**63 - 1],
    "float": [float32(0.3), float32(-1e-45), float32(3.4028234663852886e38), math.inf, -0.0],
    "double": [0.30000000000000004, 5e-324, 1.7976931348623157e308, -math.inf, -0.0],
    "decimal(20,0)": [D("18446744073709551615"), D("-99999999999999999999")],
    "decimal(10,2)": [D("-12345678.90"), D("0.01"), D("0.00")],
    "decimal(65,30)": [D("-12345678901234567890123456789012345.000000000000000000000000000001")],
    "number": [D("-1.5E-100"), D("123456789012345678901234567890123456789"), D("1E+125"),
               D("1.2345678901234567890123456789012345679")],
    "string": ["", "héllo ☃ 𝄞", "\x00nul inside"],
    "binary": [b"", b"\x00\xff" * 10],
    "date": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1582, 10, 10)],
    "timestamp": [dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
                  dt.datetime(1, 1, 1, tzinfo=UTC)],
    "timestamp_ntz": [dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)],
    "time": [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(microseconds=-1500000),
             dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)],
}


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)  # keeps -0.0 apart from 0.0
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("type_text", list(EDGE_VALUES))
def test_edge_values_survive_the_log_and_the_snapshot_exactly(type_text: str) -> None:
    ctype = ColumnType.parse(type_text)
    values = [ctype.check(v) for v in EDGE_VALUES[type_text]] + [None]
    schema = TableSchema("s", "t", (Column("v", ctype),), ("v",))
    def convert(direction: str, value: object) -> object:
        for _, fn in avro_conversions(schema, direction):
            value = fn(value)
        return value

    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema.avro()), [{"v": convert("to", v)} for v in values])
    buffer.seek(0)
    back = [convert("from", r["v"]) for r in fastavro.reader(buffer)]
    assert all(_same(a, b) for a, b in zip(back, values, strict=True)), (back, values)
    table = pa.table({"v": ctype.to_arrow(values)})
    assert str(table.schema.field("v").type) == str(ctype.arrow())
    from_delta = schema.rows_from_arrow(table)
    assert all(_same(r["v"], v) for r, v in zip(from_delta, values, strict=True)), (from_delta, values)


@pytest.mark.parametrize(("type_text", "value", "reason"), [
    ("byte", 128, "outside the 8-bit range"),
    ("long", 2**63, "outside the 64-bit range"),
    ("long", True, "not an integer"),
    ("decimal(5,2)", D("1234.5"), "more than 3 digits before"),
    ("decimal(5,2)", D("1.005"), "more than 2 digits after"),
    ("decimal(5,2)", D("NaN"), "not a finite decimal"),
    ("float", 1e39, "outside the range of a 32-bit float"),
    ("timestamp", dt.datetime(2024, 1, 1), "not a datetime with a time zone"),
    ("timestamp_ntz", dt.datetime(2024, 1, 1, tzinfo=UTC), "not a datetime without a time zone"),
    ("date", dt.datetime(2024, 1, 1), "not a date"),
    ("string", b"x", "not text"),
])
def test_values_a_type_cannot_hold_are_refused(type_text: str, value: object, reason: str) -> None:
    with pytest.raises(TypeValueError, match=reason):
        ColumnType.parse(type_text).check(value)


def test_decimal_keeps_its_scale_and_drops_the_sign_of_zero() -> None:
    ctype = ColumnType.decimal(10, 2)
    assert str(ctype.check(D("12.5"))) == "12.50"
    assert str(ctype.check(D("-0.00"))) == "0.00"
    assert json_value(ctype.check(D("1E+3"))) == "1000.00"


def test_float32_prints_the_shortest_text_that_reads_back_as_the_same_float32() -> None:
    rng = random.Random(7)
    for _ in range(20000):
        value = struct.unpack("<f", rng.randbytes(4))[0]
        if math.isnan(value):
            continue
        text = float32_text(value)
        assert float32(float(text)) == value, (value, text)
    assert float32_text(float32(0.3)) == "0.3"
    assert ColumnType("float").to_json(float32(0.3)) == 0.3


@pytest.mark.parametrize(("value", "text"), [
    (D("-0.001"), "-0.001"), (D("1E+3"), "1000"), (b"\x0a\xff", "0aff"), (dt.date(2024, 2, 29), "2024-02-29"),
    (dt.datetime(2024, 6, 1, 10, tzinfo=UTC), "2024-06-01T10:00:00Z"),
    (dt.datetime(2024, 6, 1, 10, 0, 0, 5), "2024-06-01T10:00:00.000005"),
    (dt.timedelta(hours=-26, minutes=-3, seconds=-4, microseconds=-500000), "-26:03:04.500000"),
    (math.nan, "NaN"), (-math.inf, "-Infinity"),
])
def test_json_has_one_text_form_per_type(value: object, text: str) -> None:
    assert json_value(value) == text


@pytest.mark.parametrize("key", [(1,), (1, -2), (10**30,), (True,), ("a\"é\n",), (1, "x"), (D("1.50"),), ()])
def test_encode_key_is_the_compact_json_of_each_values_text_form(key: tuple) -> None:
    # The stored key is compared across paths and hashed into partitions: its form may never drift.
    assert encode_key(key) == json.dumps([json_value(v) for v in key], separators=(",", ":"), ensure_ascii=False)
    assert json.loads(encode_key(key)) == [json_value(v) for v in key]


@pytest.mark.parametrize("columns", [
    [pa.array([0, -1, 2**63 - 1, -(2**63)], pa.int64())],
    [pa.array([1, 2, 3, 4], pa.int8()), pa.array(["a", "é☃𝄞", "", "with space"])],
    [pa.array(["plain", 'quote"', "back\\slash", "tab\t"]), pa.array([7, 8, 9, 10], pa.uint32())],
    [pa.array(["nul\x00", "bell\x07", "line\nbreak", "\x1f"])],
    [pa.array([1, None, 3, 4], pa.int32())],
])
def test_keys_encoded_by_column_are_the_keys_encoded_one_by_one(columns: list[pa.Array]) -> None:
    rows = list(zip(*(c.to_pylist() for c in columns), strict=True))
    assert encode_keys(columns, rows).to_pylist() == [encode_key(r) for r in rows]
    assert encode_keys(columns, lambda: rows).to_pylist() == [encode_key(r) for r in rows]


def test_columns_of_canonical_values_skip_the_per_value_checks_with_the_same_result() -> None:
    schema = TableSchema("s", "t", tuple(Column(k, ColumnType(k)) for k in ("byte", "long", "double", "string")),
                         ("long",))
    rows = [{"byte": -128, "long": 2**63 - 1, "double": -0.0, "string": "é\x00"}, {"byte": None, "long": 1,
            "double": float("inf"), "string": None}]
    fast = schema.column_converter(lambda c: same)(rows, str)
    slow = schema.column_converter(lambda c: lambda v: v)(rows, str)
    assert [a.type for a in fast] == [a.type for a in slow] and [a.to_pylist() for a in fast] == [
        a.to_pylist() for a in slow]
    # A value that does not fit still goes the per-value way, which names it and its row.
    for column, value in (("byte", 128), ("long", 2**63), ("double", 1), ("string", b"x")):
        bad = [rows[0], {**rows[1], column: value}]
        with pytest.raises(SchemaMismatchError, match=f"row 1|{column}"):
            schema.column_converter(lambda c: same)(bad, lambda i: f"row {i}")
