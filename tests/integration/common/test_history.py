"""History tables (SCD type 2): the fold's rules on hand-made changes, then the behavioural suite with history
on (every kind on a local lake, SQLite on S3 too; both engines): the history as of any captured SCN equals the
source at that SCN, and equals itself after replays, a rebuild and a kill mid-merge."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.consumer.history import as_of
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.history import HISTORY_META, HistoryTable, fold, from_snapshot
from dagster_databus.errors import ConfigError, HistoryGapError, SnapshotMissingError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source, read_rows
from dagster_databus.storage.lake import Lake
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import compare_rows
from tests.support.harness import SourceHarness, config_document, make_config
from tests.support.paths import REPO
from tests.support.sources import SOURCE_KINDS

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]
TS = pa.timestamp("us", tz="UTC")

# -- the fold's rules --------------------------------------------------------------------------------

TARGET = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()), pa.field("score", pa.float64()),
                    *(pa.field(n, t) for n, t in HISTORY_META.items())])


def held(rows: list[tuple[Any, ...]], scn: int = 10) -> pa.Table:
    ids, names, scores = zip(*rows, strict=True) if rows else ((), (), ())
    return from_snapshot(pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string()),
                                   "score": pa.array(scores, pa.float64()), "__scn": pa.array([scn] * len(rows)),
                                   "__commit_ts": pa.array([scn * 10**6] * len(rows), TS)}))


def changes(*events: tuple[Any, ...]) -> pa.Table:
    """(id, name, score, scn, seq, op) per event; commit time = the SCN in seconds."""
    ids, names, scores, scns, seqs, ops = zip(*events, strict=True)
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string()),
                     "score": pa.array(scores, pa.float64()), "__scn": pa.array(scns, pa.int64()),
                     "__seq": pa.array(seqs, pa.int32()), "__op": pa.array(ops),
                     "__commit_ts_ms": pa.array([s * 1000 for s in scns], pa.int64())})


def versions(folded_table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["name"], r["score"], r["__start_scn"], r["__end_scn"], r["__deleted"], r["__scn"])
                  for r in folded_table.to_pylist())


def test_a_change_in_a_tracked_column_closes_the_version_and_opens_the_next() -> None:
    done = fold(held([(1, "a", 1.0)]), changes((1, "b", 1.0, 20, 0, "u")), ["id"], ["name", "score"], TARGET)
    assert versions(done.replaced) == [(1, "a", 1.0, 10, 20, False, 10)]
    assert versions(done.opened) == [(1, "b", 1.0, 20, None, False, 20)]
    assert done.opened["__start_at"][0].value == 20 * 10**6 and done.replaced["__end_at"][0].value == 20 * 10**6
    assert (done.closed, done.deleted, done.in_place) == (1, 0, 0)


def test_a_change_only_in_untracked_columns_updates_the_open_version_in_place() -> None:
    done = fold(held([(1, "a", 1.0)]), changes((1, "a", 2.0, 20, 0, "u"), (1, "a", 3.0, 30, 0, "u")), ["id"],
                ["name"], TARGET)
    assert versions(done.replaced) == [(1, "a", 3.0, 10, None, False, 30)] and done.opened.num_rows == 0
    assert done.in_place == 1 and done.closed == 0


def test_a_delete_closes_the_version_and_a_reinsert_opens_a_new_one() -> None:
    done = fold(held([(1, "a", 1.0), (2, "b", 2.0)]),
                changes((1, None, None, 20, 0, "d"), (1, "again", 5.0, 40, 0, "i"), (3, None, None, 20, 1, "d")),
                ["id"], ["name", "score"], TARGET)
    assert versions(done.replaced) == [(1, "a", 1.0, 10, 20, True, 10)]  # key 2 had no change: not returned
    assert versions(done.opened) == [(1, "again", 5.0, 40, None, False, 40)]  # deleting a key never held: nothing
    assert done.deleted == 1


def test_replays_and_older_changes_change_nothing_and_a_transaction_keeps_its_last_image() -> None:
    done = fold(held([(1, "a", 1.0)], scn=50),
                changes((1, "old", 0.0, 30, 0, "u"), (1, "a", 1.0, 50, 0, "u"), (2, "x", 1.0, 60, 0, "i"),
                        (2, "y", 2.0, 60, 1, "u")), ["id"], ["name", "score"], TARGET)
    assert done.replaced.num_rows == 0
    assert versions(done.opened) == [(2, "y", 2.0, 60, None, False, 60)]


def test_nulls_and_nan_equal_themselves_so_unchanged_values_open_no_version() -> None:
    done = fold(held([(1, None, math.nan)]), changes((1, None, math.nan, 20, 0, "u")), ["id"], ["name", "score"],
                TARGET)
    assert done.opened.num_rows == 0 and versions(done.replaced)[0][3:] == (10, None, False, 20)


def test_tracked_columns_that_are_not_in_the_table_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"track_history_columns .* apply to a history table"):
        parse_config({"lake": str(tmp_path), "sources": [{"name": "s", "kind": "sqlite", "path": "x.db", "tables": [
            {"name": "t", "primary_key": ["id"], "track_history_columns": ["a"]}]}]}, base=tmp_path)
    from dagster_databus.core.schema import Column, TableSchema
    from dagster_databus.core.types import ColumnType
    from dagster_databus.dataplane.history import tracked_columns

    schema = TableSchema("s", "t", (Column("id", ColumnType("long")), Column("a", ColumnType("string"))), ("id",))
    with pytest.raises(ConfigError, match=r"names column\(s\) nope that t does not have"):
        tracked_columns("s", "t", schema, ["a", "nope"], ())
    assert tracked_columns("s", "t", schema, None, ("a",)) == ()


# -- the behavioural suite with history on -----------------------------------------------------------------

def history_config(source: SourceHarness, lake: Path | Lake, engine: str,
                   options: dict[str, dict[str, Any]] | None = None) -> DatabusConfig:
    document = source.source_config("shop", SHOP, poll={"chunk_rows": 40})
    for table in document["tables"]:
        table.update(history=True, **(options or {}).get(table["name"], {}))
    return make_config(lake, document, merge={"engine": engine, "file_rows": 60})


def source_rows(config: DatabusConfig) -> dict[str, list[dict[str, Any]]]:
    src = open_source(config.sources[0])
    return {t.name: read_rows(src, t.name) for t in config.sources[0].tables}


def assert_history_equals(config: DatabusConfig, scn: Scn, expected: dict[str, list[dict[str, Any]]]) -> None:
    for table, key in SHOP:
        got = as_of(config.lake, "shop", table, scn=scn).to_pylist()
        result = compare_rows(table, key, expected[table], got)
        assert result.equal, f"{table} as of SCN {scn}: {result}"


def history_rows(config: DatabusConfig, table: str) -> list[tuple[Any, ...]]:
    rows = HistoryTable(config.lake, "shop", table).read(with_meta=True).to_pylist()
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


# Every kind on a local lake by both engines; the object-store lake once, by the spark engine (its tasks write the
# bucket, as the snapshot merge's do on ``ON_EACH_KIND_AND_LAKE``): the local engine's history commits through
# delta-rs as its snapshot merge does, which test_merge runs on the bucket.
HISTORY_CASES = [*((kind, "local", engine) for kind in SOURCE_KINDS for engine in ("spark", "local")),
                 ("sqlite", "s3", "spark")]


@pytest.mark.parametrize(("source", "lake", "engine"), HISTORY_CASES, indirect=["source", "lake"])
def test_the_history_as_of_any_captured_scn_equals_the_source_then(source: SourceHarness, lake: Path | Lake,
                                                                   engine: str, lazy_spark) -> None:
    source.create_shop()
    config = history_config(source, lake, engine)
    workload = source.workload(seed=29)
    workload.run(30)
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(lazy_spark, config, "shop")
    seen: list[tuple[Scn, dict[str, list[dict[str, Any]]]]] = []
    for round_ in range(4):
        for _ in range(2):
            workload.run(25, rollback_every=7)
            capture.run(config, "shop")
            seen.append((ChangeLog(config.lake, "shop").committed_scn(), source_rows(config)))
        if round_ % 2:  # histories merged over one window and over several
            results = sync_source(lazy_spark, config, "shop")
            assert all(r.history is not None and r.history.to_scn == r.to_scn for r in results)
    sync_source(lazy_spark, config, "shop")
    assert len({scn for scn, _ in seen}) == len(seen)
    for scn, expected in seen:
        assert_history_equals(config, scn, expected)
    before = {t: history_rows(config, t) for t, _ in SHOP}
    closed = sum(1 for t, _ in SHOP for r in before[t] if dict(r)["__end_scn"] is not None)
    assert closed > 20, "the workload updated and deleted rows: versions were closed"

    # A replay changes nothing; a rebuild starts again from the bootstrap and replays the log to the same rows.
    sync_source(lazy_spark, config, "shop")
    assert {t: history_rows(config, t) for t, _ in SHOP} == before
    results = sync_source(lazy_spark, config, "shop", mode="rebuild")
    assert all(r.history is not None and r.history.started_at is not None for r in results)
    assert {t: history_rows(config, t) for t, _ in SHOP} == before


def test_history_tracks_only_the_named_columns(source: SourceHarness, tmp_path: Path, spark) -> None:
    source.create_shop()
    config = history_config(source, tmp_path / "lake", "spark",
                            {"customers": {"track_history_except_columns": ["name"]}})
    workload = source.workload(seed=5)
    workload.run(20)
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    start = HistoryTable(config.lake, "shop", "customers").applied_scn()
    ids = [r[0] for r in source.query("SELECT id FROM customers ORDER BY id")][:2]
    source.execute([f"UPDATE customers SET name = 'renamed' WHERE id = {ids[0]}"])
    source.execute([f"UPDATE customers SET email = 'moved@example.com' WHERE id = {ids[1]}"])
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    rows = HistoryTable(config.lake, "shop", "customers").read(with_meta=True).to_pylist()
    renamed = [r for r in rows if r["id"] == ids[0]]
    moved = sorted((r for r in rows if r["id"] == ids[1]), key=lambda r: r["__start_scn"])
    assert len(renamed) == 1 and renamed[0]["name"] == "renamed" and renamed[0]["__start_scn"] <= start.value
    assert len(moved) == 2 and moved[0]["__end_scn"] == moved[1]["__start_scn"] > start.value
    assert moved[1]["email"] == "moved@example.com" and moved[0]["email"] != "moved@example.com"


@pytest.mark.fault
def test_a_history_merge_killed_mid_commit_is_finished_by_the_next_run(source: SourceHarness, tmp_path: Path,
                                                                     spark) -> None:
    source.create_shop()
    lake = tmp_path / "lake"
    config = history_config(source, lake, "spark")
    document = source.source_config("shop", SHOP, poll={"chunk_rows": 40})
    for table in document["tables"]:
        table["history"] = True
    config_file = tmp_path / "databus.json"
    config_file.write_text(json.dumps({**config_document(config, [document]),
                                       "merge": {"engine": "spark", "file_rows": 60}}))
    workload = source.workload(seed=3)
    workload.run(30)
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(spark, config, "shop")
    workload.run(40)
    capture.run(config, "shop")
    expected = source_rows(config)
    scn = ChangeLog(config.lake, "shop").committed_scn()
    for point in ("history_commit", "history_committed"):
        killed = subprocess.run([sys.executable, "jobs/merge_snapshots.py", "--config", str(config_file), "--source",
                                 "shop"], cwd=REPO, env={**os.environ, "DATABUS_CRASH_AT": point},
                                capture_output=True, text=True, timeout=300)
        assert killed.returncode == -9, killed.stdout + killed.stderr
    # The second kill came after one table's history commit (tables sync side by side: others may not have).
    assert scn in [HistoryTable(config.lake, "shop", t).applied_scn() for t, _ in SHOP]
    sync_source(spark, config, "shop")
    assert_history_equals(config, scn, expected)
    before = {t: history_rows(config, t) for t, _ in SHOP}
    sync_source(spark, config, "shop", mode="rebuild")
    assert {t: history_rows(config, t) for t, _ in SHOP} == before


def test_as_of_refuses_points_the_history_does_not_cover(source: SourceHarness, tmp_path: Path) -> None:
    source.create_shop()
    config = history_config(source, tmp_path / "lake", "local")
    source.workload(seed=1).run(10)
    with pytest.raises(SnapshotMissingError, match="has no history table"):
        as_of(config.lake, "shop", "orders", scn=Scn(1))
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(None, config, "shop")  # type: ignore[arg-type]  # the local engine starts no Spark
    applied = HistoryTable(config.lake, "shop", "orders").applied_scn()
    with pytest.raises(SnapshotMissingError, match=r"covers SCN \d+\.\.\d+, not SCN"):
        as_of(config.lake, "shop", "orders", scn=Scn(applied.value + 1000))
    assert as_of(config.lake, "shop", "orders", scn=applied).num_rows == len(source.query("SELECT id FROM orders"))


def test_a_history_the_log_no_longer_reaches_is_refused_until_rebuilt(source: SourceHarness, tmp_path: Path) -> None:
    source.create_shop()
    document = source.source_config("shop", SHOP, poll={"chunk_rows": 40})
    config = history_config(source, tmp_path / "lake", "local")
    workload = source.workload(seed=2)
    workload.run(10)
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(None, config, "shop")  # type: ignore[arg-type]
    # History off for a while: its snapshot merges on, and retention drops what the history had not absorbed.
    plain = make_config(config.lake, {**document, "retention": {"max_bytes": 1}}, merge={"engine": "local"})
    for _ in range(3):
        workload.run(15)
        capture.run(plain, "shop")
        sync_source(None, plain, "shop")  # type: ignore[arg-type]
        capture.enforce_retention(plain, "shop")
    with pytest.raises(HistoryGapError, match=r"(?s)the change log now starts at SCN .*mode: bootstrap"):
        sync_source(None, config, "shop", tables=["orders"])  # type: ignore[arg-type]
    sync_source(None, config, "shop", tables=["orders"], mode="bootstrap")  # type: ignore[arg-type]
    scn = HistoryTable(config.lake, "shop", "orders").applied_scn()
    assert_rows = compare_rows("orders", ["id"], source_rows(config)["orders"],
                               as_of(config.lake, "shop", "orders", scn=scn).to_pylist())
    assert assert_rows.equal, assert_rows


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_a_truncate_without_row_events_closes_the_versions_it_emptied(mariadb, tmp_path: Path, engine: str,
                                                                       lazy_spark) -> None:
    from tests.support.harness import MysqlHarness

    source = MysqlHarness(mariadb)
    source.execute(["CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR(64), n INT)",
                    *[f"INSERT INTO notes VALUES ({i}, 'note {i}', 0)" for i in range(1, 21)]])
    document = source.source_config("shop", [("notes", ["id"])])
    document["tables"][0]["history"] = True
    config = make_config(tmp_path / "lake", document, merge={"engine": engine, "file_rows": 8})
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(lazy_spark, config, "shop")
    seen = []

    def step(*statements: str) -> None:
        source.execute(list(statements))
        capture.run(config, "shop")
        sync_source(lazy_spark, config, "shop")
        seen.append((ChangeLog(config.lake, "shop").committed_scn(), read_rows(open_source(config.sources[0]),
                                                                                "notes")))

    step("UPDATE notes SET n = n + 1 WHERE id <= 5")
    step("TRUNCATE TABLE notes", "INSERT INTO notes VALUES (3, 'again', 7), (100, 'new', 1)")
    step("UPDATE notes SET body = 'later' WHERE id = 100", "INSERT INTO notes VALUES (101, 'newer', 2)")
    for scn, expected in seen:
        got = as_of(config.lake, "shop", "notes", scn=scn).to_pylist()
        result = compare_rows("notes", ["id"], expected, got)
        assert result.equal, f"as of SCN {scn}: {result}"
    rows = HistoryTable(config.lake, "shop", "notes").read(with_meta=True).to_pylist()
    last = {}
    for r in sorted(rows, key=lambda r: r["__start_scn"]):
        last[r["id"]] = r
    emptied = [r for k, r in last.items() if k not in (3, 100, 101)]
    assert len(emptied) == 19 and all(r["__end_scn"] is not None and r["__deleted"] for r in emptied)
    assert [r["body"] for r in sorted(rows, key=lambda r: r["__start_scn"]) if r["id"] == 3] == ["note 3"] * 2 + [
        "again"]
