"""Upkeep of snapshot tables (``snapshot.upkeep``): after many small merges, compaction joins the small files
in key order without changing a row or the applied SCN, VACUUM removes the files no version needs but keeps
what rebuild restores, and merges, rebuilds and the snapshot's equality with the source all hold after."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_databus.snapshot.delta import DeltaSnapshot
from dagster_databus.snapshot.merge import sync_source
from dagster_databus.snapshot.upkeep import upkeep_source
from dagster_databus.storage.lake import Lake
from tests.conftest import assert_snapshots_match, cycle
from tests.harness import SqliteHarness, make_config


def _rows(snap: DeltaSnapshot) -> list[dict]:
    return sorted(snap.read(with_meta=True).to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_upkeep_joins_small_files_keeps_every_row_and_what_rebuild_needs(tmp_path: Path, lake: Path | Lake, spark,
                                                                          engine: str) -> None:
    source = SqliteHarness(tmp_path / "shop.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    *[("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i / 4)) for i in range(1, 201)]])
    config = make_config(lake, source.source_config("shop", [("items", ["id"])],
                                                                 upkeep={"retain_hours": 0}),
                         merge={"engine": engine, "file_rows": 20})
    cycle(config, spark)  # ten files of twenty rows
    snap = DeltaSnapshot(config.lake, "shop", "items")
    for step in range(4):  # merges that thin files out, and add new keys: small files
        source.execute([("DELETE FROM items WHERE id % 20 IN (?, ?, ?, ?)", tuple(4 * step + k for k in range(4))),
                        "UPDATE items SET price = price + 1 WHERE id % 20 = 19",
                        *[("INSERT INTO items VALUES (?, 'added', 2.5)", (1000 + 5 * step + k,)) for k in range(5)]])
        cycle(config, spark)
    for step in range(4):  # merges of new keys alone: a file each (delta-rs's MERGE, the local engine)
        source.execute([("INSERT INTO items VALUES (?, 'appended', 3.5)", (2000 + 3 * step + k,)) for k in range(3)])
        cycle(config, spark)
    before = (_rows(snap), snap.applied_scn(), snap.bootstrap_scn())
    [result] = upkeep_source(config, "shop", spark)
    assert result.files_before >= 5 and result.compacted >= 4 and result.files_after <= result.files_before // 2
    assert result.files_after == result.files_before - result.compacted + result.written
    assert result.vacuumed > 0  # files the merges replaced, older than retain_hours (0)
    assert (_rows(snap), snap.applied_scn(), snap.bootstrap_scn()) == before  # no row, no SCN moved
    assert snap.delta().history(1)[0]["operation"] != "WRITE" or result.checkpoint_version == snap.version()
    [again] = upkeep_source(config, "shop", spark)
    assert again.compacted == 0 and again.files_after == result.files_after  # key order kept, nothing to join
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, "new", 1.0)) for i in range(300, 320)])
    source.execute(["UPDATE items SET name = 'changed' WHERE id IN (19, 99, 199)"])
    cycle(config, spark)  # merges route by the compacted files' key bounds
    assert_snapshots_match(config)
    # VACUUM kept the last bootstrap's files: rebuild restores that version and replays the log.
    sync_source(spark, config, "shop", mode="rebuild")
    assert_snapshots_match(config)
