"""Every MySQL column type in every position of a row, on a real MariaDB: each documented type (docs/types.md)
followed by every integer, DECIMAL and floating-point type, signed and unsigned, with their edge values, read by
the bootstrap (pymysql) and by capture (binlog → change log → snapshot). The table map's SIGNEDNESS bitmap
has one bit per numeric column and YEAR: a decoder that loses count after one type gives every numeric column
after it its neighbour's sign (``MEDIUMINT`` -1 read as 16777215).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from tests.integration.common.test_types import doc_rows
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import MariaDBServer

# Each numeric type with its (minimum, maximum, -1 or 1) as SQL literals.
_SIGNED = {
    "TINYINT": ("-128", "127"), "SMALLINT": ("-32768", "32767"), "MEDIUMINT": ("-8388608", "8388607"),
    "INT": ("-2147483648", "2147483647"), "BIGINT": ("-9223372036854775808", "9223372036854775807"),
    "DECIMAL(10,2)": ("-99999999.99", "99999999.99"), "FLOAT": ("-3.40282e38", "3.40282e38"),
    "DOUBLE": ("-1.7976931348623157e308", "1.7976931348623157e308"),
}
_UNSIGNED_MAX = {"TINYINT": "255", "SMALLINT": "65535", "MEDIUMINT": "16777215", "INT": "4294967295",
                 "BIGINT": "18446744073709551615", "DECIMAL(10,2)": "99999999.99", "FLOAT": "3.40282e38",
                 "DOUBLE": "1.7976931348623157e308"}
NUMERIC: list[tuple[str, tuple[str, str, str]]] = [
    *((t, (low, high, "-1")) for t, (low, high) in _SIGNED.items()),
    *((f"{t} UNSIGNED", ("0", high, "1")) for t, high in _UNSIGNED_MAX.items()),
]


def walk_table() -> tuple[list[str], list[list[str]]]:
    """The columns (name and type) of a table where each documented type is followed by all 16 numeric types
    (in an order rotated by one each time, so each is next to a different one), and 3 rows of values
    (minimum, maximum, -1/1 for the numeric columns; the documented example for the others)."""
    types: dict[str, str] = {}
    for row in doc_rows("mysql"):
        types.setdefault(row.declared, row.example)
    columns, rows = [], [[], [], []]
    for i, (declared, example) in enumerate(types.items()):
        columns.append(f"t{i} {declared}")
        for values in rows:
            values.append(example)
        for j in range(len(NUMERIC)):
            declared_n, edges = NUMERIC[(i + j) % len(NUMERIC)]
            columns.append(f"n{i}_{j} {declared_n}")
            for values, edge in zip(rows, edges, strict=True):
                values.append(edge)
    return columns, rows


def test_every_type_before_every_numeric_type_reads_the_same_on_both_roads(
        mariadb: MariaDBServer, tmp_path: Path, lazy_spark: Callable[[], Any]) -> None:
    harness = MysqlHarness(mariadb)
    columns, rows = walk_table()
    names = ", ".join(c.split()[0] for c in columns)
    harness.execute([f"CREATE TABLE walk (id INT PRIMARY KEY, {', '.join(columns)}) DEFAULT CHARSET=utf8mb4"])

    def insert(first_id: int) -> list[str]:
        # The documented TIMESTAMP examples are wall-clock times at +02:00 (test_types' server).
        return ["SET time_zone = '+02:00'",
                *(f"INSERT INTO walk (id, {names}) VALUES ({first_id + n}, {', '.join(values)})"
                  for n, values in enumerate(rows)),
                f"INSERT INTO walk (id) VALUES ({first_id + len(rows)})"]

    harness.execute(insert(1))  # by the bootstrap
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("walk", ["id"])]),
                         merge={"engine": "local"})
    cycle(config, lazy_spark)
    harness.execute(insert(11))  # by the binlog
    cycle(config, lazy_spark)

    assert_snapshots_match(config)  # the source's rows, as pymysql reads them, are the snapshot's
    schema = ChangeLog(config.lake, "shop").schemas.latest("walk")[1]
    assert schema == open_source(config.source("shop")).catalog.schemas()["walk"], "the binlog changed a column's type"
    stored = {r["id"]: r for r in schema.rows_from_arrow(DeltaSnapshot(config.lake, "shop", "walk").read())}
    # The change log holds what the binlog gave (a merge that finds the log's schema changed bootstraps again,
    # which would hide a wrong value in the snapshot).
    logged = {e.event.key[0]: dict(e.event.row) for e in ChangeLog(config.lake, "shop").read()}
    assert sorted(logged) == [11 + n for n in range(len(rows) + 1)]
    for key, row in logged.items():
        differs = {k: (v, stored[key][k]) for k, v in row.items() if v != stored[key][k]}
        assert not differs, f"id {key}: the change log's value != the source's for {differs}"
    for n in range(len(rows) + 1):
        by_bootstrap, by_binlog = dict(stored[1 + n]), dict(stored[11 + n])
        assert by_bootstrap.pop("id") + 10 == by_binlog.pop("id")
        differs = {k: (v, by_binlog[k]) for k, v in by_bootstrap.items() if v != by_binlog[k]}
        assert not differs, f"row {n + 1}: bootstrap != binlog for {differs}"


def test_a_year_column_leaves_the_sign_of_the_integers_after_it(mariadb: MariaDBServer, tmp_path: Path) -> None:
    """The issue's table, and other types before and after YEAR: the log's types and values are the source's."""
    harness = MysqlHarness(mariadb)
    harness.execute(["CREATE TABLE y (id INT PRIMARY KEY, y YEAR, m MEDIUMINT, i INT, u INT UNSIGNED, y2 YEAR, "
                     "d DECIMAL(5,1) UNSIGNED, t TINYINT, f FLOAT UNSIGNED, y3 YEAR, b BIGINT)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("y", ["id"])]),
                         merge={"engine": "local"})
    capture.install(config, "shop")
    capture.run(config, "shop")
    harness.execute(["INSERT INTO y VALUES (1, 2001, -1, -1, 4294967295, 1901, 9999.9, -128, 1.5, 2155, -1)"])
    capture.run(config, "shop")
    [event] = [e.event for e in ChangeLog(config.lake, "shop").read()]
    assert dict(event.row) == {"id": 1, "y": 2001, "m": -1, "i": -1, "u": 4294967295, "y2": 1901,
                               "d": Decimal("9999.9"), "t": -128, "f": 1.5, "y3": 2155, "b": -1}
    logged = ChangeLog(config.lake, "shop").schemas.latest("y")[1]
    assert {c.name: str(c.type) for c in logged.columns} == {
        "id": "integer", "y": "integer", "m": "integer", "i": "integer", "u": "long", "y2": "integer",
        "d": "decimal(5,1)", "t": "byte", "f": "float", "y3": "integer", "b": "long"}
