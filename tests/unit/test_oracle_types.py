"""Oracle's type mapping and value conversion, which are plain Python: tested here without a server.

The values fed in are what python-oracledb hands over through ``output_type_handler`` (NUMBER as
Decimal) and the SELECT expressions of ``select_expression`` (zoned timestamps as UTC text).
"""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType, float32
from dagster_databus.errors import SchemaMismatchError
from dagster_databus.sources.oracle.types import (
    oracle_column_type,
    oracle_declared,
    oracle_value,
    select_expression,
)

D = decimal.Decimal


@pytest.mark.parametrize(("data_type", "precision", "scale", "declared"), [
    ("NUMBER", 10, 2, "NUMBER(10,2)"), ("NUMBER", 5, 0, "NUMBER(5,0)"), ("NUMBER", None, 0, "NUMBER(*,0)"),
    ("NUMBER", None, None, "NUMBER"), ("NUMBER", 5, -2, "NUMBER(5,-2)"), ("FLOAT", 126, None, "FLOAT(126)"),
    ("TIMESTAMP(6) WITH TIME ZONE", None, 6, "TIMESTAMP(6) WITH TIME ZONE"), ("VARCHAR2", None, None, "VARCHAR2"),
])
def test_declared_type_from_the_data_dictionary(data_type: str, precision: int | None, scale: int | None,
                                                declared: str) -> None:
    assert oracle_declared(data_type, precision, scale) == declared


@pytest.mark.parametrize(("declared", "expected"), [
    ("NUMBER(1,0)", "integer"), ("NUMBER(9,0)", "integer"), ("NUMBER(10,0)", "long"), ("NUMBER(18,0)", "long"),
    ("NUMBER(19,0)", "decimal(19,0)"), ("NUMBER(38,0)", "decimal(38,0)"), ("NUMBER(*,0)", "decimal(38,0)"),
    ("NUMBER(38,-84)", "decimal(122,0)"), ("NUMBER(7,-2)", "integer"), ("NUMBER(17,-2)", "decimal(19,0)"),
    ("NUMBER(10,2)", "decimal(10,2)"), ("NUMBER(2,5)", "decimal(5,5)"), ("NUMBER(38,38)", "decimal(38,38)"),
    ("NUMBER(*,2)", "decimal(38,2)"), ("NUMBER", "number"), ("FLOAT(1)", "double"), ("FLOAT(49)", "double"),
    ("FLOAT(50)", "number"), ("FLOAT(126)", "number"), ("BINARY_FLOAT", "float"), ("BINARY_DOUBLE", "double"),
    ("DATE", "timestamp_ntz"), ("TIMESTAMP(0)", "timestamp_ntz"), ("TIMESTAMP(6)", "timestamp_ntz"),
    ("TIMESTAMP(7)", "string"), ("TIMESTAMP(3) WITH TIME ZONE", "timestamp"),
    ("TIMESTAMP(9) WITH LOCAL TIME ZONE", "string"), ("INTERVAL DAY(9) TO SECOND(6)", "time"),
    ("INTERVAL DAY(2) TO SECOND(9)", None), ("INTERVAL YEAR(2) TO MONTH", None), ("VARCHAR2", "string"),
    ("NVARCHAR2", "string"), ("CHAR", "string"), ("CLOB", "string"), ("NCLOB", "string"), ("RAW", "binary"),
    ("BLOB", "binary"), ("LONG", None), ("LONG RAW", None), ("ROWID", None), ("XMLTYPE", None), ("BFILE", None),
    ("BOOLEAN", "boolean"),
])
def test_mapping(declared: str, expected: str | None) -> None:
    mapped = oracle_column_type(declared)
    assert (str(mapped) if mapped else None) == expected


def test_decimals_wider_than_delta_are_kept_as_exact_text() -> None:
    assert oracle_column_type("NUMBER(38,-84)").as_text_in_delta
    assert oracle_column_type("NUMBER").delta() == "string"
    assert oracle_column_type("NUMBER(38,0)").delta() == "decimal(38,0)"


@pytest.mark.parametrize(("declared", "expression"), [
    ("NUMBER(10,2)", '"C"'),
    ("TIMESTAMP(6)", '"C"'),
    ("TIMESTAMP(9)", """TO_CHAR("C", 'YYYY-MM-DD"T"HH24:MI:SS.FF9') "C\""""),
    ("TIMESTAMP(6) WITH TIME ZONE",
     """TO_CHAR(SYS_EXTRACT_UTC(CAST("C" AS TIMESTAMP WITH TIME ZONE)), 'YYYY-MM-DD"T"HH24:MI:SS.FF6') "C\""""),
    ("TIMESTAMP(9) WITH LOCAL TIME ZONE",
     """TO_CHAR(SYS_EXTRACT_UTC(CAST("C" AS TIMESTAMP WITH TIME ZONE)), 'YYYY-MM-DD"T"HH24:MI:SS.FF9') "C\""""),
])
def test_select_expressions(declared: str, expression: str) -> None:
    assert select_expression('"C"', declared, '"C"') == expression


def _convert(declared: str, value: object) -> object:
    ctype = oracle_column_type(declared)
    assert ctype is not None
    schema = TableSchema("crm", "t", (Column("c", ctype, declared),), ("c",))
    return schema.converter(oracle_value)({"c": value}, "test")["c"]


class _Lob:
    def __init__(self, value: object) -> None:
        self.value = value

    def read(self) -> object:
        return self.value


@pytest.mark.parametrize(("declared", "driver_value", "canonical"), [
    ("NUMBER(9,0)", D("-999999999"), -999999999),
    ("NUMBER(18,0)", D("999999999999999999"), 999999999999999999),
    ("NUMBER(38,0)", D("-99999999999999999999999999999999999999"), D("-99999999999999999999999999999999999999")),
    ("NUMBER(10,2)", D("-12345678.9"), D("-12345678.90")),
    ("NUMBER(5,-2)", D("1234600"), 1234600),
    ("NUMBER", D("-1.5E-100"), D("-1.5E-100")),
    ("NUMBER", D("100"), D("100")),
    ("FLOAT(49)", D("0.1"), 0.1),
    ("FLOAT(126)", D("1.2345678901234567890123456789012345679"), D("1.2345678901234567890123456789012345679")),
    ("BINARY_FLOAT", float32(0.3), float32(0.3)),
    ("BINARY_DOUBLE", 0.30000000000000004, 0.30000000000000004),
    ("DATE", dt.datetime(2024, 2, 29), dt.datetime(2024, 2, 29)),
    ("TIMESTAMP(6)", dt.datetime(2024, 2, 29, 23, 59, 59, 123456), dt.datetime(2024, 2, 29, 23, 59, 59, 123456)),
    ("TIMESTAMP(9)", "2024-02-29T23:59:59.123456789", "2024-02-29T23:59:59.123456789"),
    ("TIMESTAMP(6) WITH TIME ZONE", "2024-06-01T10:00:00.000000", dt.datetime(2024, 6, 1, 10, tzinfo=dt.UTC)),
    ("TIMESTAMP(9) WITH TIME ZONE", "2024-06-01T10:00:00.123456789", "2024-06-01T10:00:00.123456789Z"),
    ("INTERVAL DAY(2) TO SECOND(6)", -dt.timedelta(days=1, hours=2, minutes=3, seconds=4.5),
     -dt.timedelta(days=1, hours=2, minutes=3, seconds=4.5)),
    ("CHAR(4)", "ab  ", "ab  "),
    ("CLOB", _Lob("long text"), "long text"),
    ("RAW(4)", b"\x00\xff", b"\x00\xff"),
    ("BLOB", _Lob(b"\xde\xad"), b"\xde\xad"),
])
def test_driver_values_become_canonical_values(declared: str, driver_value: object, canonical: object) -> None:
    got = _convert(declared, driver_value)
    assert got == canonical and type(got) is type(canonical)
    if isinstance(canonical, dt.datetime) and canonical.tzinfo is not None:
        assert got.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize(("declared", "driver_value", "reason"), [
    ("NUMBER(9,0)", D("1.5"), "fractional part"),
    ("NUMBER(10,2)", 1.5, "binary float"),
    ("NUMBER(10,2)", D("1.005"), "more than 2 digits after"),
    ("TIMESTAMP(6) WITH TIME ZONE", dt.datetime(2024, 1, 1), "without its zone"),
])
def test_values_that_do_not_fit_are_refused_naming_the_column(declared: str, driver_value: object,
                                                              reason: str) -> None:
    with pytest.raises(SchemaMismatchError, match=rf"source 'crm', column t\.c \(declared {declared[:6]}.*{reason}"):
        _convert(declared, driver_value)


def test_every_kind_an_oracle_column_maps_to_has_a_converter() -> None:
    kinds = {oracle_column_type(d).kind for d in ("NUMBER(5)", "NUMBER", "FLOAT(10)", "BINARY_FLOAT", "DATE",
                                                  "TIMESTAMP(6) WITH TIME ZONE", "CLOB", "RAW(2)", "BOOLEAN",
                                                  "INTERVAL DAY TO SECOND", "NUMBER(38)", "NUMBER(10,2)")}
    assert kinds >= {"integer", "number", "double", "float", "timestamp_ntz", "timestamp", "string", "binary",
                     "boolean", "time", "decimal"}
    assert ColumnType("boolean").check(_convert("BOOLEAN", True)) is True
