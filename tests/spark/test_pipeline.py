"""End to end without Dagster: a random workload over several rounds; consistent bootstrap."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.errors import SchemaDriftError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import make_config

SHOP_TABLES = [{"name": "customers", "primary_key": ["id"]}, {"name": "orders", "primary_key": ["id"]},
               {"name": "order_items", "primary_key": ["order_id", "line_no"]}]


def shop_config(tmp_path: Path, tables=SHOP_TABLES, chunk_rows: int = 7, schema_changes: str = "evolve"):
    return make_config(tmp_path / "lake", {"name": "shop", "kind": "sqlite", "path": str(tmp_path / "shop.db"),
                                           "poll": {"chunk_rows": chunk_rows}, "tables": tables,
                                           "schema_changes": schema_changes})


def test_random_workload_over_several_rounds_ends_equal_to_the_source(tmp_path: Path, spark) -> None:
    create_shop(tmp_path / "shop.db")
    config = shop_config(tmp_path)
    workload = ShopWorkload(tmp_path / "shop.db", seed=11)
    workload.run(40)
    for round_no in range(4):
        workload.run(60, rollback_every=7)
        results = cycle(config, spark)
        assert_snapshots_match(config)
        log_scn = ChangeLog(config.lake, "shop").committed_scn()
        assert all(r.to_scn == log_scn for r in results), round_no
    log = ChangeLog(config.lake, "shop")
    scns = [e.event.scn for e in log.read()]
    assert scns == sorted(scns) and len(set(scns)) == len(scns)
    # Each poll closes one epoch: the 60 transactions of a round form one window, never part of one.
    # (The first round ran before capture was installed and is covered by the bootstrap.)
    windows = list(log.read_windows())
    assert len(windows) == 3 and len(log.manifest().segments) == 3


def test_capture_and_merge_in_separate_rhythms_still_converge(tmp_path: Path, spark) -> None:
    create_shop(tmp_path / "shop.db")
    config = shop_config(tmp_path, chunk_rows=50)
    workload = ShopWorkload(tmp_path / "shop.db", seed=5)
    workload.run(30)
    cycle(config, spark)
    for _ in range(3):  # several captures before one merge: the merge reduces across windows
        workload.run(25)
        capture.run(config, "shop")
    sync_source(spark, config, "shop")
    assert_snapshots_match(config)


def test_bootstrap_of_a_table_added_later_is_consistent(tmp_path: Path, spark) -> None:
    """Snapshot at SCN S plus the log after S equals the source at any later SCN."""
    create_shop(tmp_path / "shop.db")
    workload = ShopWorkload(tmp_path / "shop.db", seed=3)
    workload.run(40)
    first = shop_config(tmp_path, tables=SHOP_TABLES[:1])
    cycle(first, spark)
    workload.run(40)
    cycle(first, spark)
    # orders and order_items join later: their bootstrap is taken at a later SCN than customers'.
    full = shop_config(tmp_path)
    results = {r.table: r for r in cycle(full, spark)}
    assert results["orders"].bootstrapped_at is not None and results["customers"].bootstrapped_at is None
    assert_snapshots_match(full)
    workload.run(50, rollback_every=5)
    cycle(full, spark)
    assert_snapshots_match(full)
    boot = DeltaSnapshot(full.lake, "shop", "orders")
    assert boot.applied_scn() == ChangeLog(full.lake, "shop").committed_scn()


def synced_shop(tmp_path: Path, spark, schema_changes: str = "evolve") -> tuple[DatabusConfig, ShopWorkload]:
    """A shop database with some history, captured and merged once."""
    create_shop(tmp_path / "shop.db")
    config = shop_config(tmp_path, schema_changes=schema_changes)
    workload = ShopWorkload(tmp_path / "shop.db", seed=8)
    workload.run(20)
    cycle(config, spark)
    return config, workload


def test_a_column_added_mid_stream_reaches_the_snapshot(tmp_path: Path, spark) -> None:
    config, workload = synced_shop(tmp_path, spark)
    workload.run(10)
    capture.run(config, "shop")  # changes in the old shape, still unmerged
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("ALTER TABLE customers ADD COLUMN tier TEXT")
    capture.install(config, "shop")  # triggers follow the new shape at once: nothing is stale
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("UPDATE customers SET tier = 'gold' WHERE id % 2 = 0")
    workload.run(10)
    results = {r.table: r for r in cycle(config, spark)}
    log = ChangeLog(config.lake, "shop")
    assert log.schemas.versions("customers") == [1, 2]
    assert "tier" in DeltaSnapshot(config.lake, "shop", "customers").read().column_names
    assert results["customers"].events > 0
    assert_snapshots_match(config)


def test_writes_between_a_schema_change_and_reinstall_stop_capture_until_bootstrap(tmp_path: Path, spark) -> None:
    config, workload = synced_shop(tmp_path, spark, schema_changes="stop")
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("ALTER TABLE customers ADD COLUMN tier TEXT")
        conn.execute("UPDATE customers SET tier = 'gold' WHERE id % 2 = 0")  # old triggers: images lack tier
    checkpoint = ChangeLog(config.lake, "shop").checkpoint()
    capture.install(config, "shop")
    with pytest.raises(SchemaDriftError, match=r"(?s)'customers'.*databus bootstrap --source shop"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == checkpoint
    moved_to = capture.restart(config, "shop")
    assert moved_to is not None
    trash = Path(moved_to)  # a local lake: a folder
    assert (trash / "log" / "schemas" / "customers").is_dir()
    assert (trash / "snapshot" / "customers" / "_delta_log").is_dir()
    workload.run(15)
    results = cycle(config, spark)
    assert all(r.bootstrapped_at is not None for r in results)
    assert_snapshots_match(config)


def test_writes_between_a_column_added_and_reinstall_are_repaired_and_the_snapshot_evolves(tmp_path: Path,
                                                                                          spark) -> None:
    config, workload = synced_shop(tmp_path, spark)  # schema_changes: evolve
    workload.run(10)
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("ALTER TABLE customers ADD COLUMN tier TEXT")
        conn.execute("UPDATE customers SET tier = 'gold' WHERE id % 2 = 0")  # old triggers: images lack tier
        conn.execute("UPDATE customers SET name = name || '!' WHERE id % 3 = 0")
        conn.execute("DELETE FROM customers WHERE id = (SELECT max(id) FROM customers) "
                     "AND id NOT IN (SELECT customer_id FROM orders)")
    results = {r.table: r for r in cycle(config, spark)}  # install writes the repairs, capture, merge
    [ddl] = ChangeLog(config.lake, "shop").ddl.records()
    assert ddl.table == "customers" and ddl.statement == "ALTER TABLE customers ADD COLUMN tier TEXT"
    assert results["customers"].bootstrapped_at is None and results["customers"].evolved == "added tier"
    assert_snapshots_match(config)  # every row holds its tier though the changes that set it lacked it
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("UPDATE customers SET tier = 'silver' WHERE id % 5 = 0")
    workload.run(10)
    assert all(r.evolved is None and r.bootstrapped_at is None for r in cycle(config, spark))
    assert_snapshots_match(config)


@pytest.mark.parametrize("policy", ["evolve", "stop"])
def test_a_column_added_with_a_default_is_filled_in_the_lake_or_stops_as_the_policy_says(tmp_path: Path, spark,
                                                                                          policy: str) -> None:
    config, workload = synced_shop(tmp_path, spark, schema_changes=policy)
    held = {r["id"]: r["__scn"] for r in DeltaSnapshot(config.lake, "shop", "orders").read(with_meta=True).to_pylist()}
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("ALTER TABLE orders ADD COLUMN channel TEXT DEFAULT 'web'")
    capture.install(config, "shop")
    workload.run(5)
    capture.run(config, "shop")
    [ddl] = ChangeLog(config.lake, "shop").ddl.records()
    assert ddl.statement == "ALTER TABLE orders ADD COLUMN channel TEXT DEFAULT 'web'"
    if policy == "stop":
        before = DeltaSnapshot(config.lake, "shop", "orders").applied_scn()
        with pytest.raises(SchemaDriftError, match=r"(?s)'orders'.*DEFAULT 'web'.*policy is stop"):
            sync_source(spark, config, "shop")
        assert DeltaSnapshot(config.lake, "shop", "orders").applied_scn() == before
        return
    # Every existing row now holds 'web' without a change event: the snapshot fills it in itself, without reading
    # the table again, and the rows no event touched keep their SCN.
    results = {r.table: r for r in sync_source(spark, config, "shop")}
    assert results["orders"].bootstrapped_at is None and results["customers"].bootstrapped_at is None
    assert results["orders"].evolved == "added channel (filled with web)"
    rows = DeltaSnapshot(config.lake, "shop", "orders").read(with_meta=True).to_pylist()
    assert set(r["channel"] for r in rows) == {"web"}
    changed = {e.event.key[0] for e in ChangeLog(config.lake, "shop").read() if e.event.table == "orders"}
    kept = [r for r in rows if r["id"] in held and r["id"] not in changed]
    assert kept and all(r["__scn"] == held[r["id"]] for r in kept)
    assert_snapshots_match(config)