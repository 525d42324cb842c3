"""Upkeep of snapshot tables (``sync.upkeep``): after many small merges, compaction joins the small files
in key order without changing a row or the applied SCN, VACUUM removes the files no version needs but keeps
what rebuild restores, and merges, rebuilds and the snapshot's equality with the source all hold after."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot
from dagster_databus.storage.lake import Lake
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.upkeep import upkeep_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.fixtures import ON_EACH_LAKE
from tests.support.harness import SqliteHarness, make_config


def _rows(snap: DeltaSnapshot) -> list[dict]:
    return sorted(snap.read(with_meta=True).to_pylist(), key=lambda r: r["id"])


def _physical_types(folder: DeltaFolder) -> set[str]:
    """The column types of each data file of ``folder``, as written (its Parquet footer)."""
    from dagster_databus.dataplane.commit import location

    where = location(folder)
    paths = pa.table(folder.delta().get_add_actions(flatten=True))["path"].to_pylist()
    return {_types(where.schema(path)) for path in paths}


def _types(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


@ON_EACH_LAKE
@pytest.mark.parametrize("engine", ["spark", "local"])
def test_upkeep_joins_small_files_keeps_every_row_and_what_rebuild_needs(tmp_path: Path, lake: Path | Lake, lazy_spark,
                                                                          engine: str) -> None:
    source = SqliteHarness(tmp_path / "shop.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    *[("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i / 4)) for i in range(1, 201)]])
    config = make_config(lake, source.source_config("shop", [("items", ["id"])],
                                                                 upkeep={"retain_hours": 0}),
                         merge={"engine": engine, "file_rows": 20})
    cycle(config, lazy_spark)  # ten files of twenty rows
    snap = DeltaSnapshot(config.lake, "shop", "items")
    for step in range(4):  # merges that thin files out, and add new keys: small files
        source.execute([("DELETE FROM items WHERE id % 20 IN (?, ?, ?, ?)", tuple(4 * step + k for k in range(4))),
                        "UPDATE items SET price = price + 1 WHERE id % 20 = 19",
                        *[("INSERT INTO items VALUES (?, 'added', 2.5)", (1000 + 5 * step + k,)) for k in range(5)]])
        cycle(config, lazy_spark)
    for step in range(4):  # merges of new keys alone: a file each (delta-rs's MERGE, the local engine)
        source.execute([("INSERT INTO items VALUES (?, 'appended', 3.5)", (2000 + 3 * step + k,)) for k in range(3)])
        cycle(config, lazy_spark)
    before = (_rows(snap), snap.applied_scn(), snap.bootstrap_scn())
    [result] = upkeep_source(config, "shop", lazy_spark)
    assert result.files_before >= 5 and result.compacted >= 4
    # The spark engine's files are all of the table's types; the local engine's merged file is rewritten too, in
    # files of merge.file_rows rows.
    assert result.files_after <= result.files_before // 2 if engine == "spark" else \
        result.files_after < result.files_before
    assert result.files_after == result.files_before - result.compacted - result.retyped + result.written
    # delta-rs's MERGE (local engine) writes strings as string views: those files are rewritten in the table's types.
    assert result.retyped > 0 if engine == "local" else result.retyped == 0
    assert _physical_types(snap) == {_types(snap.arrow_schema())}
    assert result.vacuumed > 0  # files the merges replaced, older than retain_hours (0)
    assert (_rows(snap), snap.applied_scn(), snap.bootstrap_scn()) == before  # no row, no SCN moved
    assert snap.delta().history(1)[0]["operation"] != "WRITE" or result.checkpoint_version == snap.version()
    [again] = upkeep_source(config, "shop", lazy_spark)
    # Key order kept and table types written: nothing to join or rewrite.
    assert again.compacted == again.retyped == 0 and again.files_after == result.files_after
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, "new", 1.0)) for i in range(300, 320)])
    source.execute(["UPDATE items SET name = 'changed' WHERE id IN (19, 99, 199)"])
    cycle(config, lazy_spark)  # merges route by the compacted files' key bounds
    assert_snapshots_match(config)
    # VACUUM kept the last bootstrap's files: rebuild restores that version and replays the log.
    sync_source(lazy_spark, config, "shop", mode="rebuild")
    assert_snapshots_match(config)


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_upkeep_of_a_history_table_keeps_every_version_in_key_order(tmp_path: Path, lazy_spark, engine: str) -> None:
    from dagster_databus.consumer.history import as_of
    from dagster_databus.dataplane.history import HistoryTable

    source = SqliteHarness(tmp_path / "shop.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)",
                    *[("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i / 4)) for i in range(1, 101)]])
    document = source.source_config("shop", [("items", ["id"])], upkeep={"retain_hours": 0})
    document["tables"][0]["history"] = True
    config = make_config(tmp_path / "lake", document, merge={"engine": engine, "file_rows": 20})
    cycle(config, lazy_spark)
    for step in range(6):
        source.execute([f"UPDATE items SET price = price + 1 WHERE id % 10 = {step}",
                        f"DELETE FROM items WHERE id = {90 + step}",
                        ("INSERT INTO items VALUES (?, 'added', 1.0)", (500 + step,))])
        cycle(config, lazy_spark)
    hist = HistoryTable(config.lake, "shop", "items")
    versions = sorted(map(repr, hist.read(with_meta=True).to_pylist()))
    # Larger files wanted now: the history's files (split evenly as they grew, 10 to 20 rows) are small for them.
    results = upkeep_source(make_config(tmp_path / "lake", document, merge={"engine": engine, "file_rows": 100}),
                            "shop", lazy_spark)
    assert [r.kind for r in results] == ["snapshot", "history"]
    history = results[1]
    # The spark engine's files are joined into fewer; delta-rs's MERGE (local engine) keeps the history in one file
    # of string views, rewritten in the table's types.
    assert history.compacted >= 2 and history.files_after < history.files_before if engine == "spark" else \
        history.files_before == history.retyped == 1
    assert history.vacuumed > 0
    assert history.files_after == history.files_before - history.compacted - history.retyped + history.written
    assert _physical_types(hist) == {_types(hist.arrow_schema())}
    assert sorted(map(repr, hist.read(with_meta=True).to_pylist())) == versions
    applied = hist.applied_scn()
    source.execute(["UPDATE items SET name = 'after upkeep' WHERE id IN (1, 50, 99)"])
    cycle(config, lazy_spark)  # history merges route by the compacted files' key bounds
    now = {r["id"]: r for r in as_of(config.lake, "shop", "items", scn=hist.applied_scn()).to_pylist()}
    then = {r["id"]: r for r in as_of(config.lake, "shop", "items", scn=applied).to_pylist()}
    assert {k: v["name"] for k, v in now.items() if k in (1, 50, 99)} == dict.fromkeys((1, 50, 99), "after upkeep")
    assert then[1]["name"] == "n1" and set(now) == set(then)


def test_upkeep_of_a_logical_table_keeps_its_rows_and_parts(tmp_path: Path, spark) -> None:
    from dagster_databus.config import parse_config
    from dagster_databus.dataplane.logical import LogicalSnapshot
    from dagster_databus.sync.logical.sync import sync_logical
    from dagster_databus.sync.upkeep import upkeep_logical

    shards = [SqliteHarness(tmp_path / f"shard{n}.db") for n in range(2)]
    for n, shard in enumerate(shards):
        shard.execute(["CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
                       *[("INSERT INTO users VALUES (?, ?)", (i, f"s{n}u{i}")) for i in range(1, 31)]])
    config = parse_config({
        "lake": str(tmp_path / "lake"), "merge": {"engine": "spark", "file_rows": 10},
        "sources": [shard.source_config(f"s{n}", [("users", ["id"])]) for n, shard in enumerate(shards)],
        "logical_tables": [{"name": "users", "parts": [{"source": f"s{n}", "table": "users"} for n in range(2)],
                            "upkeep": {"retain_hours": 0}}]}, base=tmp_path)
    for step in range(5):
        for n, shard in enumerate(shards):
            shard.execute([("INSERT INTO users VALUES (?, ?)", (100 + step, f"new{step}")),
                           f"UPDATE users SET name = 'x{step}' WHERE id = {step + 1}"])
            cycle(config, spark, f"s{n}")
        sync_logical(config, "users", spark=spark)
    target = LogicalSnapshot(config.lake, "users")
    rows = sorted(map(repr, target.read(with_meta=True).to_pylist()))
    labels = ("s0.users", "s1.users")
    scns = {label: target.applied_scn(label) for label in labels}
    result = upkeep_logical(config, "users", spark)
    assert result is not None and result.kind == "logical" and result.files_after < result.files_before
    assert sorted(map(repr, target.read(with_meta=True).to_pylist())) == rows
    assert {label: target.applied_scn(label) for label in labels} == scns
    shards[0].execute(["UPDATE users SET name = 'after' WHERE id = 30"])
    cycle(config, spark, "s0")
    sync_logical(config, "users", spark=spark)
    names = {(r["__part"], r["id"]): r["name"] for r in target.read(with_meta=True).to_pylist()}
    assert names[("s0.users", 30)] == "after" and names[("s1.users", 30)] == "s1u30"
