"""Files of the lake deleted or truncated behind its back: a Delta data file of a snapshot, a change-log
segment. ``validate`` names each with its fix; a merge or a reconciliation that trips over one says which
files are damaged and how to repair them, not a Delta error about one path; the named repair works."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import SnapshotDamagedError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.checks import assert_snapshots_match
from tests.support.harness import SqliteHarness, config_document, make_config


@pytest.fixture
def synced(tmp_path: Path) -> tuple[SqliteHarness, Any]:
    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"])
    harness.execute([("INSERT INTO items VALUES (?, ?)", (i, f"item {i}")) for i in range(200)])
    return harness, tmp_path


def config_for(harness: SqliteHarness, tmp_path: Path, engine: str) -> Any:
    return make_config(tmp_path / "lake", harness.source_config("shop", [("items", ["id"])]), merge={"engine": engine})


def data_files(config: Any) -> list[Path]:
    snap = DeltaSnapshot(config.lake, "shop", "items")
    return [snap.path / p for p in snap.delta().get_add_actions(flatten=True).column("path").to_pylist()]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_deleted_data_file_is_named_by_validate_and_the_merge_and_the_repair_works(
        synced: tuple[SqliteHarness, Path], engine: str, lazy_spark: Callable[[], Any]) -> None:
    harness, tmp_path = synced
    config = config_for(harness, tmp_path, engine)
    capture.install(config, "shop")
    sync_source(lazy_spark, config, "shop")
    assert capture.validate(config).ok
    gone = data_files(config)[0]
    gone.unlink()
    problems = capture.validate(config).problems["shop"]
    assert any(f"data file {gone.name} of snapshot/shop/items" in p and "is missing" in p
               and "databus snapshot --source shop --tables items" in p for p in problems), problems
    harness.execute(["UPDATE items SET name = 'changed' WHERE id < 10"])
    capture.run(config, "shop")
    with pytest.raises(SnapshotDamagedError, match=rf"(?s){gone.name}.*is missing.*databus snapshot --source shop "
                                                   "--tables items"):
        sync_source(lazy_spark, config, "shop")
    with pytest.raises(SnapshotDamagedError, match="is missing") as raised:
        reconcile_table(config, config.source("shop"), "items")
    assert "\x1b[" not in str(raised.value), "no terminal escape codes in the message"
    sync_source(lazy_spark, config, "shop", mode="bootstrap")  # what `databus snapshot --tables items` runs
    assert capture.validate(config).ok
    assert_snapshots_match(config)


def test_a_truncated_data_file_is_named_by_validate(synced: tuple[SqliteHarness, Path]) -> None:
    harness, tmp_path = synced
    config = config_for(harness, tmp_path, "local")
    capture.install(config, "shop")
    sync_source(lambda: None, config, "shop")
    cut = data_files(config)[0]
    size = cut.stat().st_size
    with open(cut, "r+b") as f:
        f.truncate(size // 2)
    problems = capture.validate(config).problems["shop"]
    assert any(f"{cut.name} of snapshot/shop/items is {size // 2} bytes, Delta recorded {size}" in p
               for p in problems), problems


def test_a_truncated_log_segment_is_named_by_validate(synced: tuple[SqliteHarness, Path],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    harness, tmp_path = synced
    config = config_for(harness, tmp_path, "local")
    capture.install(config, "shop")
    harness.execute(["UPDATE items SET name = 'changed' WHERE id < 10"])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    segment = log.manifest().segments[-1]
    path = Path(log.where("segments")) / segment.file
    with open(path, "r+b") as f:
        f.truncate(segment.bytes - 10)
    problems = capture.validate(config).problems["shop"]
    assert any(f"segment {segment.file} is {segment.bytes - 10} bytes, the manifest says {segment.bytes}" in p
               and "databus bootstrap --source shop" in p for p in problems), problems
    config_file = tmp_path / "databus.yaml"
    import yaml

    config_file.write_text(yaml.safe_dump(config_document(config, [harness.source_config("shop", [("items",
                                                                                                      ["id"])])])))
    capsys.readouterr()
    assert main(["--config", str(config_file), "validate"]) != 0
    assert f"segment {segment.file}" in capsys.readouterr().err
