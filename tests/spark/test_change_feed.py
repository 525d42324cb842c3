"""Delta's change data feed on snapshot tables (``change_data_feed: true``): for every merge commit, the feed
read back (delta-rs ``load_cdf``; Spark ``readChangeFeed`` where delta-spark's jars load) holds exactly the
changes the log's events in that commit's SCN range make to the rows the previous version held; Spark tasks
read the same feed without delta-spark (``spark.changefeed``). Every kind on a local lake, SQLite on S3 too; both
engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.changefeed import read_change_feed
from dagster_databus.storage.lake import Lake
from tests.support.checks import assert_snapshots_match, cycle, require_delta_spark
from tests.support.fixtures import ON_EACH_KIND_AND_LAKE
from tests.support.harness import SourceHarness, SqliteHarness, make_config

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def expected_changes(before: list[dict[str, Any]], events: list[Any], key: list[str]) -> set[tuple[Any, ...]]:
    """What the newest event per key (SCN, then position) does to the rows ``before`` held, as feed rows."""
    held = {tuple(r[k] for k in key): r for r in before}
    newest: dict[tuple[Any, ...], Any] = {}
    for event in sorted(events, key=lambda e: (e.scn, e.seq)):
        newest[tuple(event.key)] = event
    out: set[tuple[Any, ...]] = set()
    for k, event in newest.items():
        row = held.get(k)
        if row is not None and row["__scn"] >= event.scn.value:
            continue
        if event.op.value == "d":
            if row is not None:
                out.add(("delete", *_values(row)))
        elif row is None:
            out.add(("insert", *_values(event.row)))
        else:
            out |= {("update_preimage", *_values(row)), ("update_postimage", *_values(event.row))}
    return out


def _values(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, v) for k, v in row.items() if not k.startswith("_")))


def feed_rows(feed: pa.Table) -> set[tuple[Any, ...]]:
    return {(r["_change_type"], *_values(r)) for r in feed.to_pylist()}


def merge_versions(snap: DeltaSnapshot) -> list[tuple[int, int, int]]:
    """(version, SCN before, SCN after) of every commit that moved the applied SCN, other than a bootstrap."""
    out = []
    latest = snap.delta().version()
    for version in range(1, latest + 1):
        now, then = snap.delta(version), snap.delta(version - 1)
        boot = now.transaction_version(snap.bootstrap_app_id) != then.transaction_version(snap.bootstrap_app_id)
        a, b = then.transaction_version(snap.app_id), now.transaction_version(snap.app_id)
        if a is not None and b is not None and b > a and not boot:
            out.append((version, a, b))
    return out


@ON_EACH_KIND_AND_LAKE
@pytest.mark.parametrize("engine", ["spark", "local"])
def test_the_change_feed_of_every_merge_holds_what_the_log_changed(source: SourceHarness, lake: Path | Lake,
                                                                   engine: str, spark) -> None:
    source.create_shop()
    config = make_config(lake, source.source_config("shop", SHOP, poll={"chunk_rows": 40}, change_data_feed=True),
                         merge={"engine": engine, "file_rows": 60})
    workload = source.workload(seed=11)
    workload.run(30)
    cycle(config, spark)
    for _ in range(3):
        workload.run(30, rollback_every=5)
        cycle(config, spark)
    assert_snapshots_match(config)
    events = [e.event for e in ChangeLog(config.lake, "shop").read()]
    checked = 0
    for table, key in SHOP:
        snap = DeltaSnapshot(config.lake, "shop", table)
        versions = merge_versions(snap)
        assert len(versions) == 3, f"{table}: one merge commit per cycle after the bootstrap"
        for version, since, until in versions:
            mine = [e for e in events if e.table == table and since < e.scn.value <= until]
            before = snap.delta(version - 1).to_pyarrow_table().to_pylist()
            want = expected_changes(before, mine, key)
            got = feed_rows(pa.table(snap.delta().load_cdf(starting_version=version, ending_version=version)
                                     .read_all()))
            assert got == want, f"{table} version {version} (SCN {since}..{until})"
            by_spark = read_change_feed(spark, snap, version, version).toArrow()
            assert feed_rows(by_spark) == want and set(by_spark["_commit_version"].to_pylist()) <= {version}
            checked += len(want)
    assert checked > 100


def test_spark_reads_the_same_change_feed(tmp_path: Path, spark) -> None:
    require_delta_spark(spark, "to read the feed with readChangeFeed")
    source = SqliteHarness(tmp_path / "shop.db")
    source.create_shop()
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP, change_data_feed=True))
    workload = source.workload(seed=4)
    workload.run(20)
    cycle(config, spark)
    workload.run(30)
    cycle(config, spark)
    snap = DeltaSnapshot(config.lake, "shop", "orders")
    [(version, _, _)] = merge_versions(snap)
    by_spark = (spark.session.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", version).option("endingVersion", version).load(snap.spark_uri))
    by_rs = pa.table(snap.delta().load_cdf(starting_version=version, ending_version=version).read_all())
    assert feed_rows(by_spark.toArrow()) == feed_rows(by_rs) and by_rs.num_rows > 0


def test_turning_the_change_feed_on_later_records_the_merges_after(tmp_path: Path, spark) -> None:
    source = SqliteHarness(tmp_path / "shop.db")
    source.create_shop()
    plain = make_config(tmp_path / "lake", source.source_config("shop", SHOP))
    workload = source.workload(seed=9)
    workload.run(20)
    cycle(plain, spark)
    snap = DeltaSnapshot(plain.lake, "shop", "orders")
    assert "delta.enableChangeDataFeed" not in snap.delta().metadata().configuration
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP, change_data_feed=True))
    workload.run(30)
    cycle(config, spark)
    assert snap.delta().metadata().configuration["delta.enableChangeDataFeed"] == "true"
    [(version, _, _)] = merge_versions(snap)
    feed = pa.table(snap.delta().load_cdf(starting_version=version, ending_version=version).read_all())
    assert feed.num_rows > 0 and set(feed["_change_type"].to_pylist()) <= {
        "insert", "update_preimage", "update_postimage", "delete"}
