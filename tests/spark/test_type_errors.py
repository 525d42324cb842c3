"""Values a column's type cannot hold, types with no mapping, and logs or snapshots written before
typed columns: each stops with an error naming what and how to fix it, and commits nothing."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ChangeLogFormatError, SchemaMismatchError, UnsupportedTypeError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, SqliteHarness, make_config
from tests.support.mariadb import MariaDBServer

SQLITE_ITEMS = ("CREATE TABLE items (id INTEGER PRIMARY KEY, price DECIMAL(5,2), in_stock BOOLEAN, "
                "released DATE, sold_at DATETIME)")


@pytest.fixture
def sqlite_items(tmp_path: Path):
    source = SqliteHarness(tmp_path / "source.db")
    source.execute([SQLITE_ITEMS, "INSERT INTO items VALUES (1, 9.99, 1, '2024-01-31', '2024-01-31 10:00:00')"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    return source, config


@pytest.mark.parametrize(("column", "bad", "reason"), [
    ("price", "'abc'", "text is not a number"),
    ("price", "1234.5", "more than 3 digits before the decimal point"),
    ("price", "0.125", "more than 2 digits after the decimal point"),
    ("in_stock", "2", "holds 0 or 1"),
    ("released", "'2024-02-30'", "day is out of range"),
    ("sold_at", "'2024-01-31T10:00:00+01:00'", "declare the column TIMESTAMP"),
])
def test_sqlite_change_event_that_does_not_fit_stops_capture_before_it_commits(
        sqlite_items, spark, column: str, bad: str, reason: str) -> None:
    source, config = sqlite_items
    cycle(config, spark)
    log = ChangeLog(config.lake, "shop")
    before = log.manifest().segments
    source.execute([f"UPDATE items SET {column} = {bad} WHERE id = 1"])
    with pytest.raises(SchemaMismatchError) as caught:
        capture.run(config, "shop")
    message = str(caught.value)
    assert f"source 'shop', column items.{column}" in message and reason in message, message
    assert bad.strip("'") in message and "Fix:" in message and "databus bootstrap --source shop" in message
    assert ChangeLog(config.lake, "shop").manifest().segments == before  # nothing committed

    # The fix the message names: correct the row, then start the log afresh.
    source.execute([f"UPDATE items SET {column} = NULL WHERE id = 1"])
    assert main(["--config", _write_config(config), "bootstrap", "--source", "shop"]) == 0
    cycle(config, spark)
    assert_snapshots_match(config)


def test_sqlite_bootstrap_of_a_value_that_does_not_fit_writes_no_snapshot(sqlite_items, spark) -> None:
    source, config = sqlite_items
    source.execute(["INSERT INTO items (id, released) VALUES (2, 'yesterday')"])
    capture.install(config, "shop")
    capture.run(config, "shop")
    with pytest.raises(SchemaMismatchError, match=r"column items\.released .*'yesterday'.*YYYY-MM-DD"):
        sync_source(spark, config, "shop")
    assert not DeltaSnapshot(config.lake, "shop", "items").exists()


def _write_config(config) -> str:
    path = config.lake.path.parent / "databus.yaml"
    sources = [{"name": s.name, "kind": s.kind, "path": str(s.path),
                "tables": [{"name": t.name, "primary_key": list(t.primary_key)} for t in s.tables]}
               for s in config.sources]
    path.write_text(json.dumps({"lake": str(config.lake), "sources": sources}))
    return str(path)


def test_validate_names_every_unmapped_column_of_every_table(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE a (id INTEGER PRIMARY KEY, odd DECIMAL(2,5))",
                    "CREATE TABLE b (id INTEGER PRIMARY KEY, fine TEXT, weird NUMERIC(3,4))"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("a", ["id"]), ("b", ["id"])]))
    with pytest.raises(UnsupportedTypeError) as caught:
        open_source(config.sources[0]).catalog.preflight()
    assert "odd DECIMAL(2,5)" in str(caught.value) and "weird NUMERIC(3,4)" in str(caught.value)
    assert main(["--config", _write_config(config), "validate"]) == 2
    err = capsys.readouterr().err
    assert "table 'a'" in err and "table 'b'" in err and "docs/types.md" in err
    assert not (tmp_path / "lake").exists()  # validate writes nothing


def test_a_format_1_log_is_refused_and_bootstrap_moves_on(sqlite_items, spark) -> None:
    source, config = sqlite_items
    cycle(config, spark)
    source.execute(["INSERT INTO items (id, price) VALUES (2, 1.50)"])
    cycle(config, spark)
    log = ChangeLog(config.lake, "shop")
    manifest = json.loads(log.manifest_path.read_text())
    manifest["format"] = 1  # what a log written before typed columns says
    log.manifest_path.write_text(json.dumps(manifest))
    source.execute(["INSERT INTO items (id, price) VALUES (3, 2.25)"])
    with pytest.raises(ChangeLogFormatError, match="databus bootstrap --source shop"):
        capture.run(config, "shop")
    with pytest.raises(ChangeLogFormatError):
        list(ChangeLog(config.lake, "shop").read())
    assert main(["--config", _write_config(config), "bootstrap", "--source", "shop"]) == 0
    cycle(config, spark)
    assert_snapshots_match(config)


def test_a_snapshot_with_text_columns_is_bootstrapped_again_not_mixed(sqlite_items, spark) -> None:
    source, config = sqlite_items
    cycle(config, spark)
    snapshot = DeltaSnapshot(config.lake, "shop", "items")
    old = snapshot.read()
    # What the previous version wrote: DECIMAL and dates as text.
    as_text = pa.table({name: old[name].cast(pa.string()) if name in ("price", "released", "sold_at") else old[name]
                        for name in old.column_names})
    write_deltalake(str(snapshot.path), as_text, mode="overwrite", schema_mode="overwrite")
    assert snapshot.delta_types()["price"] == "string"
    source.execute(["INSERT INTO items VALUES (2, 0.5, 0, '2000-02-29', '1999-12-31 23:59:59.999999')"])
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    types = snapshot.delta_types()
    assert (types["price"], types["released"], types["sold_at"]) == ("decimal(5,2)", "date", "timestamp_ntz")
    rows = {r["id"]: r for r in snapshot.read().to_pylist()}
    assert rows[2]["price"] == decimal.Decimal("0.50") and rows[2]["released"] == dt.date(2000, 2, 29)
    assert_snapshots_match(config)


# -- MySQL zero dates ---------------------------------------------------------------------------


@pytest.fixture
def zero_dates(mariadb: MariaDBServer):
    harness = MysqlHarness(mariadb)
    harness.server.execute(
        "SET SESSION sql_mode = ''",
        "CREATE TABLE events (id INT PRIMARY KEY, d DATE, dt DATETIME(3), ts TIMESTAMP NULL)",
        "INSERT INTO events VALUES (1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00'), "
        "(2, '2024-00-10', '2024-01-00 10:00:00', NULL), (3, '2024-01-10', '2024-01-10 10:00:00.5', "
        "'2024-01-10 10:00:00')", database=harness.database)
    return harness


def _zero_date_rows(harness: MysqlHarness, first_id: int) -> None:
    harness.server.execute(
        "SET SESSION sql_mode = ''",
        f"INSERT INTO events VALUES ({first_id}, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00'), "
        f"({first_id + 1}, '2024-00-10', '2024-01-00 10:00:00', NULL)", database=harness.database)


def test_mysql_zero_dates_stop_the_bootstrap_and_capture_by_default(zero_dates, tmp_path: Path, spark) -> None:
    config = make_config(tmp_path / "lake", zero_dates.source_config("shop", [("events", ["id"])]))
    capture.install(config, "shop")
    capture.run(config, "shop")
    with pytest.raises(SchemaMismatchError, match=r"column events\.d .*zero date.*zero_dates: null"):
        sync_source(spark, config, "shop")
    assert not DeltaSnapshot(config.lake, "shop", "events").exists()
    _zero_date_rows(zero_dates, 10)
    before = ChangeLog(config.lake, "shop").manifest().segments
    # The message names the column and the transaction (its binlog position) that holds the value.
    with pytest.raises(SchemaMismatchError, match=r"column events\.(d|dt|ts) .*zero.*the transaction committed at SCN"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").manifest().segments == before


def test_mysql_zero_dates_are_null_on_both_paths_when_configured(zero_dates, tmp_path: Path, spark) -> None:
    config = make_config(tmp_path / "lake", zero_dates.source_config("shop", [("events", ["id"])],
                                                                      zero_dates="null"))
    cycle(config, spark)  # ids 1..3 by the bootstrap
    _zero_date_rows(zero_dates, 10)  # ids 10, 11 by the binlog
    cycle(config, spark)
    rows = {r["id"]: r for r in DeltaSnapshot(config.lake, "shop", "events").read().to_pylist()}
    for bootstrapped, logged in ((1, 10), (2, 11)):
        assert {k: rows[bootstrapped][k] for k in ("d", "dt", "ts")} == {k: rows[logged][k] for k in ("d", "dt", "ts")}
    assert (rows[1]["d"], rows[1]["dt"], rows[1]["ts"]) == (None, None, None)
    assert (rows[2]["d"], rows[2]["dt"]) == (None, None)
    assert rows[3]["dt"] == dt.datetime(2024, 1, 10, 10, 0, 0, 500000)
