"""The rolling verification (``sync.verify``): every sync compares a slice of each table with the source at one
SCN and repairs what differs. Damage is planted in the Delta snapshots behind the log's back (values changed, rows
removed, ghost rows added, on three tables, one with a history table); within the rotation's runs, with the default
config, every planted difference is reported and repaired, and nothing is reported when nothing is wrong."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable, open_versions
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import engine_for, sync_source
from dagster_databus.sync.rotation import VerifyState, slice_rows
from dagster_databus.sync.verify import RollingVerification, Verified
from tests.support.checks import assert_snapshots_match
from tests.support.harness import SourceHarness, SqliteHarness, make_config

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def verified_run(config: DatabusConfig, spark: SparkRuntime, source: str = "shop",
                 meanwhile: Callable[[], object] | None = None) -> list[Verified]:
    """One scheduled run as the sync step runs it: install, the slices read, capture, merge, the slices settled;
    ``meanwhile`` runs (transactions on the source, say) between the reads and capture."""
    cfg = config.source(source)
    capture.install(config, source)
    verification = RollingVerification(config, cfg, [t.name for t in cfg.tables], engine_for(spark, config))
    verification.read()
    if meanwhile is not None:
        meanwhile()
    capture.run(config, source)
    sync_source(spark, config, source)
    return verification.settle()


def shop(source: SourceHarness, lake: Path, **extra: Any) -> DatabusConfig:
    source.create_shop()
    source.workload(seed=3).run(60)
    cfg = source.source_config("shop", SHOP, **extra)
    cfg["tables"][1]["history"] = True  # orders
    return make_config(lake, cfg, merge={"engine": "local"})


def plant(config: DatabusConfig, table: str, key: list[str], column: str, value: str) -> list[tuple[Any, ...]]:
    """Damage ``table``'s snapshot behind the log's back: the first key's row removed, the second's ``column`` set to
    ``value``, and a ghost row (a copy of the third under a key the source never had). The keys damaged."""
    snap = DeltaSnapshot(config.lake, "shop", table)
    rows = sorted(snap.read().to_pylist(), key=lambda r: tuple(r[k] for k in key))
    gone, changed, copied = rows[0], rows[1], rows[2]
    dt = DeltaTable(snap.uri, storage_options=snap.storage_options)
    dt.delete(" AND ".join(f"{k} = {gone[k]}" for k in key))
    dt.update(predicate=" AND ".join(f"{k} = {changed[k]}" for k in key), updates={column: value})
    ghost = {**copied, key[0]: 900_000}
    write_deltalake(dt, pa.Table.from_pylist([ghost], schema=pa.schema(dt.schema().to_arrow())), mode="append")
    return [tuple(r[k] for k in key) for r in (gone, changed, ghost)]


def test_planted_damage_is_reported_and_repaired_by_the_scheduled_runs(source: SourceHarness, tmp_path: Path,
                                                                      lazy_spark: SparkRuntime) -> None:
    config = shop(source, tmp_path / "lake")
    assert all(v.scn is None for v in verified_run(config, lazy_spark))  # the first run bootstraps
    assert [(v.skipped, v.different) for v in verified_run(config, lazy_spark)] == [(None, 0)] * 3  # nothing wrong
    planted = {"customers": plant(config, "customers", ["id"], "city", "'Atlantis'"),
               "orders": plant(config, "orders", ["id"], "total", "-1"),
               "order_items": plant(config, "order_items", ["order_id", "line_no"], "qty", "0")}
    results = {v.table: v for v in verified_run(config, lazy_spark)}
    for table, keys in planted.items():
        v = results[table]
        assert (v.different, v.repaired) == (3, 3), v
        named = {tuple(d.key) for d in v.differences}
        assert set(keys) <= named, (table, named)
    changed = next(d for d in results["orders"].differences if d.what == "differs")
    assert changed.columns == ("total",) and changed.snapshot["total"] == -1
    assert_snapshots_match(config)
    # The history's open versions are the source's rows again (the ghost's version is never opened there).
    hist = open_versions(HistoryTable(config.lake, "shop", "orders").delta().to_pyarrow_table())
    snap = DeltaSnapshot(config.lake, "shop", "orders").read()
    assert sorted(hist.column("id").to_pylist()) == sorted(snap.column("id").to_pylist())
    assert sorted(zip(hist.column("id").to_pylist(), hist.column("total").to_pylist(), strict=True)) == sorted(
        zip(snap.column("id").to_pylist(), snap.column("total").to_pylist(), strict=True))
    workload = source.workload(seed=4)
    assert [v.different for v in verified_run(config, lazy_spark, meanwhile=lambda: workload.run(10))] == [0, 0, 0]
    assert VerifyState.load(config, "shop", "orders").repairs == 3


def test_changes_not_yet_merged_are_never_differences(source: SourceHarness, tmp_path: Path,
                                                       lazy_spark: SparkRuntime) -> None:
    """Transactions commit between the slices' reads and capture, every run: the reads see rows the snapshot has
    not merged yet, and the log's events up to each read account for all of them."""
    config = shop(source, tmp_path / "lake", verify={"min_rows": 7})
    workload = source.workload(seed=5)
    verified_run(config, lazy_spark)
    for _ in range(12):
        results = verified_run(config, lazy_spark, meanwhile=lambda: workload.run(15))
        assert [(v.table, v.skipped, v.different) for v in results] == [(t, None, 0) for t, _ in SHOP]
    assert_snapshots_match(config)


def test_verification_off_leaves_the_damage(source: SourceHarness, tmp_path: Path, lazy_spark: SparkRuntime) -> None:
    config = shop(source, tmp_path / "lake", verify="off")
    verified_run(config, lazy_spark)
    plant(config, "orders", ["id"], "total", "-1")
    assert verified_run(config, lazy_spark) == []
    with pytest.raises(AssertionError):
        assert_snapshots_match(config)


def test_report_names_the_damage_and_changes_nothing(source: SourceHarness, tmp_path: Path,
                                                    lazy_spark: SparkRuntime) -> None:
    config = shop(source, tmp_path / "lake", verify="report")
    verified_run(config, lazy_spark)
    plant(config, "orders", ["id"], "total", "-1")
    before = DeltaSnapshot(config.lake, "shop", "orders").version()
    v = next(v for v in verified_run(config, lazy_spark) if v.table == "orders")
    assert (v.different, v.repaired) == (3, 0)
    assert DeltaSnapshot(config.lake, "shop", "orders").version() == before  # no commit: nothing to merge, no repair
    with pytest.raises(AssertionError):
        assert_snapshots_match(config)


def test_a_rotation_covers_every_row_and_finds_damage_anywhere(source: SourceHarness, tmp_path: Path,
                                                              lazy_spark: SparkRuntime) -> None:
    config = shop(source, tmp_path / "lake", verify={"every_runs": 4, "min_rows": 5})
    verified_run(config, lazy_spark)
    rows = DeltaSnapshot(config.lake, "shop", "customers").row_count()
    ids = sorted(DeltaSnapshot(config.lake, "shop", "customers").read().column("id").to_pylist())
    dt = DeltaTable(DeltaSnapshot(config.lake, "shop", "customers").uri)
    dt.update(predicate=f"id = {ids[-1]}", updates={"city": "'Atlantis'"})  # the last slice's
    found, covered = 0, 0
    for _ in range(5):
        v = next(v for v in verified_run(config, lazy_spark) if v.table == "customers")
        assert v.rows <= max(5, slice_rows(VerifyState(), rows, config.source("shop"))) * 4 + 1
        found += v.repaired
        covered += v.rows
        if v.state.last_full_ms is not None:
            break
    assert found == 1 and covered >= rows
    assert v.state.last_full_runs is not None and 2 <= v.state.last_full_runs <= 5
    assert_snapshots_match(config)


def test_the_spark_engine_digests_the_snapshot_side_in_tasks(tmp_path: Path, spark: SparkRuntime,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The spark engine's snapshot side is digested by executor tasks: the driver's own digesting is made to fail,
    and the planted damage on every table (one with a history table) is still found and repaired."""
    from dagster_databus.dataplane.slices import SliceRows
    from tests.support.harness import SqliteHarness

    source = SqliteHarness(tmp_path / "shop.db")
    source.create_shop()
    source.workload(seed=3).run(60)
    cfg = source.source_config("shop", SHOP, prune_txlog=False)
    cfg["tables"][1]["history"] = True
    config = make_config(tmp_path / "lake", cfg, merge={"engine": "spark", "file_rows": 20})
    verified_run(config, spark)
    planted = {"customers": plant(config, "customers", ["id"], "city", "'Atlantis'"),
               "orders": plant(config, "orders", ["id"], "total", "-1"),
               "order_items": plant(config, "order_items", ["order_id", "line_no"], "qty", "0")}

    def not_here(self: SliceRows, paths: object) -> None:
        raise AssertionError("the driver digested the snapshot's side")

    monkeypatch.setattr(SliceRows, "digests_of", not_here)
    results = {v.table: v for v in verified_run(config, spark)}
    for table, keys in planted.items():
        assert (results[table].different, results[table].repaired, results[table].failed) == (3, 3, False)
        assert set(keys) <= {tuple(d.key) for d in results[table].differences}
    assert_snapshots_match(config)


@pytest.mark.parametrize("reads", ["lock", "watermark", "snapshot"])
def test_mysql_slices_are_bounded_by_every_way_of_pinning_a_read(mariadb: Any, tmp_path: Path, reads: str,
                                                               lazy_spark: SparkRuntime) -> None:
    """Every ``bootstrap_reads`` pins one slice a run, not the rest of the table (``lock`` included), and a pass
    over the table still finds a value planted in its last slice."""
    from tests.support.harness import MysqlHarness

    config = shop(MysqlHarness(mariadb), tmp_path / "lake", bootstrap_reads=reads,
                  verify={"every_runs": 4, "min_rows": 5})
    verified_run(config, lazy_spark)
    ids = sorted(DeltaSnapshot(config.lake, "shop", "customers").read().column("id").to_pylist())
    DeltaTable(DeltaSnapshot(config.lake, "shop", "customers").uri).update(
        predicate=f"id = {ids[-1]}", updates={"city": "'Atlantis'"})
    seen, found = [], 0
    for _ in range(6):
        v = next(v for v in verified_run(config, lazy_spark) if v.table == "customers")
        assert v.skipped is None and v.rows < len(ids)
        seen.append(v.rows)
        found += v.repaired
        if v.state.last_full_ms is not None:
            break
    assert found == 1 and sum(seen) >= len(ids) and len(seen) >= 2
    assert_snapshots_match(config)


def test_a_merge_committing_while_the_slice_is_pinned_is_no_difference(tmp_path: Path, lazy_spark: SparkRuntime,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another run's merge commits just as a slice pins the snapshot's version: the version and the SCN it reflects
    come from one load of the Delta log, so the pinned rows are exactly that SCN's and nothing differs (read apart,
    the version was paired with the merge's SCN, lacked its events, and verification reported them)."""
    source = SqliteHarness(tmp_path / "source.db")
    config = shop(source, tmp_path / "lake")
    verified_run(config, lazy_spark)
    source.workload(seed=9).run(20)
    cfg = config.source("shop")
    version, merged = DeltaTable.version, []

    def then_merge(table: DeltaTable) -> int:
        pinned = version(table)
        if not merged:
            merged.append(pinned)
            capture.run(config, "shop")
            sync_source(lazy_spark, config, "shop")
        return pinned

    capture.install(config, "shop")
    verification = RollingVerification(config, cfg, [t.name for t in cfg.tables], engine_for(lazy_spark, config))
    with monkeypatch.context() as patch:
        patch.setattr(DeltaTable, "version", then_merge)
        verification.read()
    capture.run(config, "shop")
    sync_source(lazy_spark, config, "shop")
    results = verification.settle()
    assert merged and [(v.skipped, v.different) for v in results] == [(None, 0)] * 3, results
    assert_snapshots_match(config)
