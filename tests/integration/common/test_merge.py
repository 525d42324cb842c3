"""Merging into Delta, by every engine that runs here (spark: Spark tasks write, the driver commits;
local: in process): idempotent, order-safe, deletes remove keys, the SCN committed with the data."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dagster_databus import capture
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.commit import location
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.files import TableFiles
from dagster_databus.dataplane.merging import MergePlan
from dagster_databus.engines import open_engine
from dagster_databus.engines.local import apply_changes
from dagster_databus.errors import ConcurrentRunError, SnapshotMissingError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.columns import change_schema
from dagster_databus.sources import open_source
from dagster_databus.storage.lake import Lake
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.fixtures import ON_EACH_KIND_AND_LAKE
from tests.support.harness import SqliteHarness, make_config

ENGINES = ["spark", "local"]


@pytest.fixture(params=ENGINES)
def setup(request: pytest.FixtureRequest, source: SqliteHarness, lake: Path | Lake):
    """On every source kind on a local lake, on SQLite on an object-store lake too (``ON_EACH_KIND_AND_LAKE``), with
    each engine."""
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    ("INSERT INTO items VALUES (?, ?, ?)", (1, "seed", 1.0))])
    config = make_config(lake, source.source_config("shop", [("items", ["id"])]), merge={"engine": request.param})
    return source, config


def snapshot(config) -> DeltaSnapshot:
    return DeltaSnapshot(config.lake, "shop", "items")


def rows(config) -> list[dict]:
    return sorted(snapshot(config).read(with_meta=True).to_pylist(), key=lambda r: r["id"])


@ON_EACH_KIND_AND_LAKE
def test_first_sync_bootstraps_existing_rows_then_merges_changes(setup, lazy_spark) -> None:
    source, config = setup
    first = cycle(config, lazy_spark)[0]
    assert first.bootstrapped_at is not None and first.bootstrap_rows == 1 and first.engine == config.merge.engine
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (2, "b", 2.0)),
                    ("UPDATE items SET price = ? WHERE id = ?", (9.5, 1))])
    source.execute(["DELETE FROM items WHERE id = 2", ("INSERT INTO items VALUES (?, ?, NULL)", (3, "c"))])
    second = cycle(config, lazy_spark)[0]
    assert (second.counts.inserted, second.counts.updated, second.counts.deleted) == (1, 1, 0)
    assert second.events == 4 and second.events_by_op == {"i": 2, "u": 1, "d": 1} and second.windows >= 1
    assert [(r["id"], r["name"], r["price"]) for r in rows(config)] == [(1, "seed", 9.5), (3, "c", None)]
    assert snapshot(config).applied_scn() == ChangeLog(config.lake, "shop").committed_scn()
    assert_snapshots_match(config)


@ON_EACH_KIND_AND_LAKE
def test_merging_twice_changes_nothing(setup, lazy_spark) -> None:
    source, config = setup
    cycle(config, lazy_spark)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("x", 1)),
                    ("INSERT INTO items VALUES (?, ?, ?)", (2, "b", 2.0))])
    cycle(config, lazy_spark)
    version, data = snapshot(config).version(), rows(config)
    again = sync_source(lazy_spark, config, "shop")[0]
    assert again.events == 0 and snapshot(config).version() == version and rows(config) == data


@ON_EACH_KIND_AND_LAKE
def test_replaying_old_windows_changes_nothing(setup, lazy_spark) -> None:
    source, config = setup
    cycle(config, lazy_spark)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("old", 1))])
    cycle(config, lazy_spark)
    middle = snapshot(config).applied_scn()
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("new", 1)), "DELETE FROM items WHERE id = 1",
                    ("INSERT INTO items VALUES (?, ?, ?)", (1, "reborn", 3.0))])
    cycle(config, lazy_spark)
    version, data = snapshot(config).version(), rows(config)
    assert data[0]["name"] == "reborn"

    # The whole log again, and then just the older window, presented to the engine.
    log = ChangeLog(config.lake, "shop")
    schema = log.schemas.latest("items")[1]
    engine = open_engine(config, lazy_spark)
    for since, until in [(Scn.BEGINNING, snapshot(config).applied_scn()), (Scn.BEGINNING, middle)]:
        assert sum(s.tables.get("items", 0) for s in log.manifest().between(since, until)) > 0
        assert engine.merge(snapshot(config), log, schema, since, until, lambda _: None) is None
    assert snapshot(config).version() == version and rows(config) == data

    # The whole log once more, now ending in a window the snapshot has not applied: the merge runs, and
    # reads the log from the SCN the snapshot has applied on, so the replayed windows are not read again.
    source.execute([("UPDATE items SET price = ? WHERE id = ?", (4.0, 1))])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    merged = engine.merge(snapshot(config), log, schema, Scn.BEGINNING, log.committed_scn(), lambda _: None)
    assert merged is not None and merged.stats.events == 1
    assert (merged.counts.inserted, merged.counts.updated, merged.counts.deleted) == (0, 1, 0)
    assert [(r["id"], r["name"], r["price"]) for r in rows(config)] == [(1, "reborn", 4.0)]


@ON_EACH_KIND_AND_LAKE
def test_merge_into_a_snapshot_that_was_never_bootstrapped_is_refused(setup, lazy_spark) -> None:
    _, config = setup
    capture.install(config, "shop")
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    schema = open_source(config.sources[0]).catalog.schemas()["items"]
    with pytest.raises(SnapshotMissingError, match="bootstrap"):
        open_engine(config, lazy_spark).merge(snapshot(config), log, schema, Scn.BEGINNING, Scn(5), lambda _: None)
    assert not snapshot(config).exists()


@ON_EACH_KIND_AND_LAKE
def test_table_without_changes_records_the_log_position(setup, lazy_spark) -> None:
    source, config = setup
    source.execute(["CREATE TABLE other (id INTEGER PRIMARY KEY, v TEXT)"])
    config = make_config(config.lake, source.source_config("shop", [("items", ["id"]), ("other", ["id"])]),
                         merge={"engine": config.merge.engine})
    cycle(config, lazy_spark)
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (7, "n", 1.0))])
    results = {r.table: r for r in cycle(config, lazy_spark)}
    log_scn = ChangeLog(config.lake, "shop").committed_scn()
    assert results["other"].events == 0 and results["other"].to_scn == log_scn
    assert DeltaSnapshot(config.lake, "shop", "other").applied_scn() == log_scn
    assert results["items"].lag_scn == 0 == results["other"].lag_scn


@ON_EACH_KIND_AND_LAKE
def test_snapshot_carries_source_columns_and_metadata_columns(setup, lazy_spark) -> None:
    source, config = setup
    cycle(config, lazy_spark)
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (2, "b", 2.0))])
    cycle(config, lazy_spark)  # a merged row, not only bootstrapped ones
    schema = snapshot(config).read(with_meta=True).schema
    assert schema.names == ["id", "name", "price", "__scn", "__op", "__commit_ts"]
    # INTEGER is 64-bit in SQLite, 32-bit in MySQL and PostgreSQL, NUMBER(*,0) in Oracle, whose REAL is a FLOAT(63);
    # PostgreSQL's REAL is single precision (docs/types.md).
    key, price = {"sqlite": ("int64", "double"), "mysql": ("int32", "double"), "postgres": ("int32", "float"),
                  "oracle": ("decimal128(38, 0)", "string")}[source.kind]
    assert [str(t) for t in schema.types] == [key, "string", price, "int64", "string", "timestamp[us, tz=UTC]"]
    capture.run(config, "shop")  # nothing new: a no-op


def test_an_older_image_never_overwrites_a_newer_one_locally(tmp_path: Path) -> None:
    """The per-key guard of the local engine's MERGE: a batch that claims a newer range but carries an
    older image of a key, and a delete of it, changes nothing."""
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    "INSERT INTO items VALUES (1, 'seed', 1.0)"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"engine": "local"})
    cycle(config, None)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("newest", 1))])
    cycle(config, None)
    current = rows(config)[0]
    schema = ChangeLog(config.lake, "shop").schemas.latest("items")[1]
    stale = pa.table({
        "id": [1], "name": ["stale"], "price": [0.0], "__scn": [current["__scn"] - 1], "__op": ["d"],
        "__commit_ts": pa.array([0], pa.timestamp("us", tz="UTC")),
    }, schema=schema.arrow())
    applied = snapshot(config).applied_scn()
    counts = apply_changes(snapshot(config), schema, stale, Scn(applied.value + 100))
    assert (counts.inserted, counts.updated, counts.deleted) == (0, 0, 0)
    assert rows(config)[0]["name"] == "newest"


def test_a_task_never_lets_an_older_change_replace_a_newer_row(tmp_path: Path, spark) -> None:
    """The spark engine's per-key guard, where a task applies changes to a file: a row stamped with a
    later SCN than the change (as a key range read at a later position stamps it) is kept as it is,
    a delete older than the row deletes nothing, and only the newer change of another key applies."""
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    "INSERT INTO items VALUES (1, 'a', 1.0)", "INSERT INTO items VALUES (2, 'b', 2.0)"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    cycle(config, spark)
    snap = snapshot(config)
    schema = ChangeLog(config.lake, "shop").schemas.latest("items")[1]
    held = {r["id"]: r["__scn"] for r in rows(config)}
    target = schema.arrow(with_meta=True)
    table = snap.delta()
    plan = MergePlan(location(snap), target, change_schema(schema), ("id",), 0,
                     TableFiles.of(table, ["id"], target), 1000, "test", 1 << 20, None)
    changes = pa.table({"id": [1, 2], "name": ["older", "newer"], "price": [0.0, 5.0],
                        "__scn": [held[1] - 1, held[2] + 1], "__seq": pa.array([0, 0], pa.int32()),
                        "__window_scn": [held[1] - 1, held[2] + 1], "__op": ["d", "u"],
                        "__commit_ts_ms": [0, 0], "__partition": pa.array([0, 0], pa.int32())},
                       schema=change_schema(schema))
    report = plan._apply_group(0, changes).to_pylist()
    fact = next(r for r in report if r["kind"] == "fact")
    assert '"updated": 1' in fact["stats"] and '"deleted": 0' in fact["stats"]
    written = next(r["path"] for r in report if r["kind"] == "add")
    data = location(snap).read(written).sort_by("id").to_pylist()
    assert [(r["id"], r["name"], r["__scn"]) for r in data] == [(1, "a", held[1]), (2, "newer", held[2] + 1)]
    assert np.all(np.diff([r["id"] for r in data]) > 0)


@pytest.mark.parametrize("engine", ENGINES)
def test_tables_sync_side_by_side_and_one_that_fails_does_not_stop_the_others(tmp_path: Path, lazy_spark,
                                                                               engine: str) -> None:
    """The spark engine syncs a source's tables in threads (merge.parallel_tables), the local engine one at a
    time; results come in table order either way. A table that fails (another run holds its snapshot) does
    not stop the others: they are synced, and its error is raised once they are done."""
    names = [f"t{i}" for i in range(1, 5)]
    source = SqliteHarness(tmp_path / "shop.db")
    source.execute([f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, v TEXT)" for name in names]
                   + [(f"INSERT INTO {name} VALUES (?, ?)", (i, f"{name}-{i}")) for name in names for i in range(20)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [(name, ["id"]) for name in names]),
                         merge={"engine": engine, "parallel_tables": 3})
    threads: set[str] = set()

    def progress(_: str) -> None:
        threads.add(threading.current_thread().name)

    capture.install(config, "shop")
    capture.run(config, "shop")
    held = DeltaSnapshot(config.lake, "shop", "t2")
    with held.lock("snapshot shop.t2 (the test)", ""), pytest.raises(ConcurrentRunError, match=r"shop\.t2 is locked"):
        sync_source(lazy_spark, config, "shop", progress=progress)
    assert [DeltaSnapshot(config.lake, "shop", name).exists() for name in names] == [True, False, True, True]
    assert len(threads) > 1 if engine == "spark" else threads == {threading.current_thread().name}

    source.execute([(f"UPDATE {name} SET v = 'changed' WHERE id < 5", ()) for name in names])
    results = cycle(config, lazy_spark)
    assert [r.table for r in results] == names
    assert [r.bootstrapped_at is not None for r in results] == [False, True, False, False]
    assert_snapshots_match(config)


def test_many_small_segments_are_read_by_a_few_tasks_and_every_window_is_counted_once(tmp_path: Path,
                                                                                        spark) -> None:
    """A capture that polls often leaves a segment per run; the merge reads small ones together (a task
    apiece would cost more than the reading) and still counts each window once."""
    from dagster_databus.spark.logread import log_tasks

    harness = SqliteHarness(tmp_path / "s.db")
    harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("items", ["id"])]))
    cycle(config, spark)
    for i in range(24):  # a capture run per transaction: 24 segments
        harness.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i / 3)),
                         ("UPDATE items SET price = price + 1 WHERE id = ?", (i // 2,))])
        capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    applied = snapshot(config).applied_scn()
    segments = log.manifest().between(applied, None)
    assert len(segments) == 24
    alone = log_tasks(log, "items", applied, None)
    small = max(s.bytes for s in segments) * 5
    packed = log_tasks(log, "items", applied, None, small)
    assert len(alone) == 24 and 5 <= len(packed) < 24
    [result] = sync_source(spark, config, "shop")
    assert result.windows == 24 and result.events == 48
    assert_snapshots_match(config)
