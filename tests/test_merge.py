"""The Spark merge into Delta: idempotent, order-safe, deletes remove keys, SCN committed with data."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from dagster_databus import pipeline
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.log.store import ChangeLog
from dagster_databus.snapshot.delta import DeltaRsEngine, DeltaSnapshot
from dagster_databus.snapshot.merge import apply_changes, read_changes, reduce_latest, sync_source, to_merge_table
from dagster_databus.storage.lake import Lake
from tests.conftest import assert_snapshots_match, cycle
from tests.harness import SqliteHarness, make_config


@pytest.fixture
def setup(source: SqliteHarness, lake: Path | Lake):
    """On every source kind, and on a local lake and an object-store lake."""
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    ("INSERT INTO items VALUES (?, ?, ?)", (1, "seed", 1.0))])
    config = make_config(lake, source.source_config("shop", [("items", ["id"])]))
    return source, config


def snapshot(config) -> DeltaSnapshot:
    return DeltaSnapshot(config.lake, "shop", "items")


def rows(config) -> list[dict]:
    return sorted(snapshot(config).read(with_meta=True).to_pylist(), key=lambda r: r["id"])


def test_first_sync_bootstraps_existing_rows_then_merges_changes(setup, spark) -> None:
    source, config = setup
    first = cycle(config, spark)[0]
    assert first.bootstrapped_at is not None and first.bootstrap_rows == 1
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (2, "b", 2.0)),
                    ("UPDATE items SET price = ? WHERE id = ?", (9.5, 1))])
    source.execute(["DELETE FROM items WHERE id = 2", ("INSERT INTO items VALUES (?, ?, NULL)", (3, "c"))])
    second = cycle(config, spark)[0]
    assert (second.counts.inserted, second.counts.updated, second.counts.deleted) == (1, 1, 0)
    assert second.events == 4 and second.events_by_op == {"i": 2, "u": 1, "d": 1}
    assert [(r["id"], r["name"], r["price"]) for r in rows(config)] == [(1, "seed", 9.5), (3, "c", None)]
    assert snapshot(config).applied_scn() == ChangeLog(config.lake, "shop").committed_scn()
    assert_snapshots_match(config)


def test_merging_twice_changes_nothing(setup, spark) -> None:
    source, config = setup
    cycle(config, spark)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("x", 1)),
                    ("INSERT INTO items VALUES (?, ?, ?)", (2, "b", 2.0))])
    cycle(config, spark)
    version, data = snapshot(config).version(), rows(config)
    again = sync_source(spark, config, "shop")[0]
    assert again.events == 0 and snapshot(config).version() == version and rows(config) == data


def test_replaying_an_old_window_changes_nothing(setup, spark) -> None:
    source, config = setup
    cycle(config, spark)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("old", 1))])
    cycle(config, spark)
    middle = snapshot(config).applied_scn()
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("new", 1)), "DELETE FROM items WHERE id = 1",
                    ("INSERT INTO items VALUES (?, ?, ?)", (1, "reborn", 3.0))])
    cycle(config, spark)
    version, data = snapshot(config).version(), rows(config)
    assert data[0]["name"] == "reborn"

    # The whole log again, and then just the older window, presented to the merge.
    schema = ChangeLog(config.lake, "shop").schemas.latest("items")[1]
    engine = DeltaRsEngine()
    for since, until in [(Scn.BEGINNING, snapshot(config).applied_scn()), (Scn.BEGINNING, middle)]:
        old = to_merge_table(reduce_latest(read_changes(spark, config, "shop", "items", since, until),
                                           schema.primary_key), schema)
        assert old.num_rows > 0
        assert apply_changes(engine, snapshot(config), schema, old, until) is None
    assert snapshot(config).version() == version and rows(config) == data


def test_an_older_image_never_overwrites_a_newer_one(setup, spark) -> None:
    source, config = setup
    cycle(config, spark)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("newest", 1))])
    cycle(config, spark)
    current = rows(config)[0]
    # A batch that claims a newer range but carries an older image of key 1 and a delete of it.
    schema = ChangeLog(config.lake, "shop").schemas.latest("items")[1]
    stale = pa.table({
        "id": [1], "name": ["stale"], "price": [0.0], "__scn": [current["__scn"] - 1], "__op": ["d"],
        "__commit_ts": pa.array([0], pa.timestamp("us", tz="UTC")),
    }, schema=schema.arrow())
    applied = snapshot(config).applied_scn()
    counts = DeltaRsEngine().merge(snapshot(config), schema, stale, Scn(applied.value + 100))
    assert (counts.inserted, counts.updated, counts.deleted) == (0, 0, 0)
    assert rows(config)[0]["name"] == "newest"


def test_merge_into_a_snapshot_that_was_never_bootstrapped_is_refused(setup) -> None:
    _, config = setup
    schema = None  # never reached
    with pytest.raises(SnapshotMissingError, match="bootstrap"):
        apply_changes(DeltaRsEngine(), snapshot(config), schema, pa.table({}), Scn(5))  # type: ignore[arg-type]


def test_table_without_changes_records_the_log_position(setup, spark) -> None:
    source, config = setup
    source.execute(["CREATE TABLE other (id INTEGER PRIMARY KEY, v TEXT)"])
    config = make_config(config.lake, source.source_config("shop", [("items", ["id"]), ("other", ["id"])]))
    cycle(config, spark)
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (7, "n", 1.0))])
    results = {r.table: r for r in cycle(config, spark)}
    log_scn = ChangeLog(config.lake, "shop").committed_scn()
    assert results["other"].events == 0 and results["other"].to_scn == log_scn
    assert DeltaSnapshot(config.lake, "shop", "other").applied_scn() == log_scn
    assert results["items"].lag_scn == 0 == results["other"].lag_scn


def test_snapshot_carries_source_columns_and_metadata_columns(setup, spark) -> None:
    source, config = setup
    cycle(config, spark)
    schema = snapshot(config).read(with_meta=True).schema
    assert schema.names == ["id", "name", "price", "__scn", "__op", "__commit_ts"]
    # INTEGER is 64-bit in SQLite, 32-bit in MySQL, NUMBER(*,0) in Oracle, whose REAL is a FLOAT(63) (docs/types.md).
    key, price = {"sqlite": ("int64", "double"), "mysql": ("int32", "double"),
                  "oracle": ("decimal128(38, 0)", "string")}[source.kind]
    assert [str(t) for t in schema.types] == [key, "string", price, "int64", "string", "timestamp[us, tz=UTC]"]
    pipeline.capture(config, "shop")  # nothing new: a no-op
