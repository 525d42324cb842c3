"""A column added with a constant default: every row that existed then holds the default, though no change
event says so. The snapshot fills it in itself (no read of the source table), keeps the SCN of rows no event
touched, and reads events written before the column existed with that default. A default that is not a
constant, one changed after the column was added, or NOT NULL without a default still reads the table again.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.core.defaults import NOT_CONSTANT, constant_value
from dagster_databus.core.types import ColumnType
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match
from tests.support.harness import MysqlHarness, make_config
from tests.support.sources import harness_of


@pytest.mark.parametrize(("text", "kind", "value"), [
    ("5", "integer", 5), ("-12", "long", -12), ("'7'", "decimal(10,2)", decimal.Decimal("7.00")),
    ("1.50", "decimal(10,2)", decimal.Decimal("1.50")), ("-0.25", "double", -0.25), ("'it''s'", "string", "it's"),
    ("''", "string", ""), ("'2024-02-29'", "date", dt.date(2024, 2, 29)), ("X'00ff'", "binary", b"\x00\xff"),
    ("NULL", "integer", None), (None, "string", None), ("TRUE", "boolean", True),
    ("'2024-02-29 10:00:00'", "timestamp_ntz", dt.datetime(2024, 2, 29, 10)),
])
def test_constant_defaults_are_read_as_their_columns_values(text: str | None, kind: str, value: object) -> None:
    assert constant_value(text, ColumnType.parse(kind)) == value


@pytest.mark.parametrize(("text", "kind"), [
    ("CURRENT_TIMESTAMP", "timestamp"), ("current_timestamp()", "timestamp_ntz"), ("(1 + 1)", "integer"),
    ("'a\\'b'", "string"), ("1.5", "integer"), ("300", "byte"), ("uuid()", "string"), ("'x'", "integer"),
    ("'2024-02-30'", "date"), ("'1'", "timestamp"),
])
def test_anything_but_a_constant_of_the_columns_type_is_not_one(text: str, kind: str) -> None:
    assert constant_value(text, ColumnType.parse(kind)) is NOT_CONSTANT


@pytest.mark.parametrize("kind", ["sqlite", "mysql", "postgres"])
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_constant_default_is_filled_in_the_lake_for_rows_and_for_older_events(
        kind: str, engine: str, tmp_path: Path, request: pytest.FixtureRequest,
        lazy_spark: Callable[[], Any]) -> None:
    harness = harness_of(kind, tmp_path, request)
    harness.execute(["CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)"])
    harness.execute([("INSERT INTO t VALUES (?, ?)", (i, i)) for i in range(1, 21)])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("t", ["id"])]), merge={"engine": engine})
    capture.install(config, "shop")
    sync_source(lazy_spark, config, "shop")
    before = {r["id"]: r["__scn"] for r in DeltaSnapshot(config.lake, "shop", "t").read(with_meta=True).to_pylist()}
    harness.execute(["UPDATE t SET v = 100 WHERE id = 1"])  # an event without the column, merged after the change
    capture.run(config, "shop")
    harness.execute(["ALTER TABLE t ADD COLUMN c DECIMAL(10,2) DEFAULT 7.25"])
    harness.execute(["ALTER TABLE t ADD COLUMN s VARCHAR(20) DEFAULT 'it''s'"])
    harness.execute(["UPDATE t SET c = 8 WHERE id = 2", "INSERT INTO t (id, v) VALUES (21, 21)"])
    if kind == "sqlite":
        capture.install(config, "shop")  # SQLite's triggers are re-made for the new columns
    capture.run(config, "shop")
    [result] = sync_source(lazy_spark, config, "shop")
    assert result.bootstrapped_at is None, "the table was not read again"
    assert result.evolved == "added c (filled with 7.25), s (filled with it's)"
    rows = {r["id"]: r for r in DeltaSnapshot(config.lake, "shop", "t").read(with_meta=True).to_pylist()}
    assert rows[1]["c"] == decimal.Decimal("7.25") and rows[1]["v"] == 100, "an older event takes the default"
    assert rows[2]["c"] == decimal.Decimal("8.00") and rows[21]["s"] == "it's"
    assert all(rows[i]["__scn"] == before[i] for i in range(3, 21)), "untouched rows keep their SCN"
    assert_snapshots_match(config)


@pytest.mark.parametrize("change", ["ALTER TABLE t ADD COLUMN at DATETIME DEFAULT CURRENT_TIMESTAMP",
                                    "ALTER TABLE t ADD COLUMN c INT NOT NULL",
                                    "ALTER TABLE t ADD COLUMN c INT DEFAULT 1; ALTER TABLE t ALTER c SET DEFAULT 2"])
def test_defaults_the_lake_cannot_know_read_the_table_again(change: str, mariadb: Any, tmp_path: Path,
                                                              lazy_spark: Callable[[], Any]) -> None:
    harness = MysqlHarness(mariadb)
    harness.execute(["CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("t", ["id"])]), merge={"engine": "local"})
    capture.install(config, "shop")
    sync_source(lazy_spark, config, "shop")
    for statement in change.split("; "):
        harness.execute([statement])
    capture.run(config, "shop")
    [result] = sync_source(lazy_spark, config, "shop")
    assert result.bootstrapped_at is not None and result.evolved is None
    assert_snapshots_match(config)
