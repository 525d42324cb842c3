"""The behavioural suite every source kind that can run here must pass (SQLite and MariaDB, the latter also
with its binlog compressed), on a local lake and on an object-store lake (the S3-compatible test server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.storage.lake import Lake
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import SourceHarness, make_config
from tests.support.sources import BEHAVIOUR_KINDS, source_harness

TABLES = [("items", ["id"]), ("tags", ["item_id", "tag"])]
# Kinds whose position moves without a change to the data (PostgreSQL's WAL: checkpoints, the temporary slot a
# read exports its snapshot with; Oracle's SCN: every transaction of the database), so two reads of the same rows
# at different moments carry different SCNs, each exact. (A binlog position or SQLite's txlog SCN moves only
# with written rows.)
MOVING_POSITIONS = ("postgres", "oracle")


@pytest.fixture(params=BEHAVIOUR_KINDS)
def source(request: pytest.FixtureRequest, tmp_path: Path) -> SourceHarness:
    return source_harness(request, tmp_path)
SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def items_and_tags(source: SourceHarness, lake: Path | Lake):
    source.execute([
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(64), price DOUBLE, qty INTEGER)",
        "CREATE TABLE tags (item_id INTEGER, tag VARCHAR(64), weight DOUBLE, PRIMARY KEY (item_id, tag))",
    ])
    config = make_config(lake, source.source_config("shop", TABLES, poll={"chunk_rows": 3}))
    capture.install(config, "shop")
    return config


def test_changes_arrive_in_commit_order_with_images(source: SourceHarness, lake: Path | Lake) -> None:
    config = items_and_tags(source, lake)
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (1, "apple", 1.5, 10)),
                    ("INSERT INTO items VALUES (?, ?, ?, ?)", (2, "pear", None, None))])
    source.execute([("UPDATE items SET price = ? WHERE id = ?", (2.25, 1)),
                    ("INSERT INTO tags VALUES (?, ?, ?)", (1, "fruit", 0.5))])
    source.execute([("UPDATE items SET id = ? WHERE id = ?", (20, 2)), "DELETE FROM tags"])
    result = capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    events = [e.event for e in log.read()]
    assert [(e.table, e.op.value, e.key) for e in events] == [
        ("items", "i", (1,)), ("items", "i", (2,)),
        ("items", "u", (1,)), ("tags", "i", (1, "fruit")),
        ("items", "d", (2,)), ("items", "i", (20,)), ("tags", "d", (1, "fruit")),
    ]
    order = [(e.scn, e.seq) for e in events]
    assert order == sorted(order) and len(set(order)) == len(order)
    assert events[2].row == {"id": 1, "name": "apple", "price": 2.25, "qty": 10}
    assert events[1].row == {"id": 2, "name": "pear", "price": None, "qty": None}
    # Each source transaction lies within one window.
    windows = list(log.read_windows())
    owner = {(e.scn, e.seq): w.scn for w in windows for e in w.events}
    assert owner[order[2]] == owner[order[3]] and owner[order[4]] == owner[order[6]]
    assert result.events == 7 and log.checkpoint().scn >= events[-1].scn


def test_rolled_back_transactions_are_not_captured(source: SourceHarness, lake: Path | Lake) -> None:
    config = items_and_tags(source, lake)
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (99, "ghost", 1, 1))], commit=False)
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (1, "real", 1.0, 1))])
    capture.run(config, "shop")
    assert [e.event.key for e in ChangeLog(config.lake, "shop").read()] == [(1,)]


def test_random_workload_over_rounds_ends_equal_to_the_source(source: SourceHarness, lake: Path | Lake, spark) -> None:
    source.create_shop()
    config = make_config(lake, source.source_config("shop", SHOP, poll={"chunk_rows": 40}))
    workload = source.workload(seed=21)
    workload.run(30)
    for _ in range(3):
        results = cycle(config, spark)
        assert_snapshots_match(config)
        # Every snapshot reflects at least everything the log has committed (a bootstrap may be ahead of it).
        committed = ChangeLog(config.lake, "shop").committed_scn()
        assert all(r.to_scn >= committed for r in results)
        workload.run(50, rollback_every=6)
    cycle(config, spark)
    assert_snapshots_match(config)
    scns = [(e.event.scn, e.event.seq) for e in ChangeLog(config.lake, "shop").read()]
    assert scns == sorted(scns) and len(set(scns)) == len(scns) and len(scns) > 100


def test_capture_with_nothing_new_changes_nothing(source: SourceHarness, lake: Path | Lake) -> None:
    config = items_and_tags(source, lake)
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (1, "a", 1.0, 1))])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    manifest, checkpoint = log.manifest(), log.checkpoint()
    again = capture.run(config, "shop")
    assert again.events == 0 and log.manifest() == manifest and log.checkpoint().scn == checkpoint.scn


def test_the_spark_and_local_engines_give_the_same_snapshots(source: SourceHarness, lake: Path | Lake, tmp_path: Path,
                                                             spark) -> None:
    """The same source captured into two lakes, one merged by Spark tasks (on this lake: local or S3) and one
    in process: after every round both snapshots hold the same rows, SCNs and operations."""
    source.create_shop()
    spec = source.source_config("shop", SHOP, poll={"chunk_rows": 40}, prune_txlog=False) \
        if source.kind == "sqlite" else source.source_config("shop", SHOP, poll={"chunk_rows": 40})
    by_spark = make_config(lake, spec, merge={"engine": "spark", "file_rows": 60})
    in_process = make_config(tmp_path / "local-lake", spec, merge={"engine": "local"})
    workload = source.workload(seed=8)
    workload.run(40)
    for round_ in range(3):
        for config in (by_spark, in_process):
            cycle(config, spark)
        for table, key in SHOP:
            a = DeltaSnapshot(by_spark.lake, "shop", table).read(with_meta=True)
            b = DeltaSnapshot(in_process.lake, "shop", table).read(with_meta=True)
            names = [c for c in b.column_names if c != "__commit_ts"]  # a bootstrap stamps its own read time

            def rows(data, names=names, key=key):
                found = sorted(data.select(names).to_pylist(), key=lambda r: [r[k] for k in key])
                if source.kind in MOVING_POSITIONS:  # a bootstrap's SCN is its read's moment there, as its time is
                    found = [{**r, "__scn": None} if r["__op"] == "r" else r for r in found]
                return found

            assert rows(a) == rows(b), f"round {round_}, {table}"
        assert_snapshots_match(by_spark)
        workload.run(60, rollback_every=7)
