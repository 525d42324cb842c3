"""Errors that name the right problem: a read of the source before capture is installed says to install it
(it once said the SQLite file must be readable from every Spark executor)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dagster_databus.cli import main
from dagster_databus.dataplane.delta import DeltaSnapshot
from tests.support.harness import SqliteHarness


@pytest.mark.parametrize("args", [["--tables", "t", "--where", "v = 1"], ["--tables", "t"]])
def test_a_snapshot_before_install_says_to_install(tmp_path: Path, args: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(["CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)", "INSERT INTO t VALUES (1, 1)"])
    config = tmp_path / "databus.yaml"
    config.write_text(yaml.safe_dump({"lake": str(tmp_path / "lake"), "merge": {"engine": "local"},
                                      "sources": [harness.source_config("shop", [("t", ["id"])])]}))
    assert main(["--config", str(config), "snapshot", "--source", "shop", *args]) == 2
    err = capsys.readouterr().err
    assert "capture is not installed" in err and "databus install --source shop" in err, err
    assert "Spark executor" not in err
    assert not DeltaSnapshot(tmp_path / "lake", "shop", "t").exists()


def test_status_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    """``databus status | head -1``: the reader closes the pipe; the command says nothing of a broken pipe."""
    import subprocess
    import sys

    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(["CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)"])
    config = tmp_path / "databus.yaml"
    tables = [(f"t{i}", ["id"]) for i in range(400)]
    for name, _ in tables[1:]:
        harness.execute([f"CREATE TABLE {name} (id INTEGER PRIMARY KEY)"])
    config.write_text(yaml.safe_dump({"lake": str(tmp_path / "lake"), "sources": [harness.source_config(
        "shop", [("t", ["id"]), *tables[1:]])]}))
    proc = subprocess.run(f"{sys.executable} -m dagster_databus.cli --config {config} status | head -1",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("source/table") and proc.stdout.count("\n") == 1
    assert "Broken pipe" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


def test_status_names_a_damaged_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dagster_databus import capture
    from dagster_databus.config import load_config
    from dagster_databus.sync.merge import sync_source

    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(["CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)", "INSERT INTO t VALUES (1, 1)"])
    path = tmp_path / "databus.yaml"
    path.write_text(yaml.safe_dump({"lake": str(tmp_path / "lake"), "merge": {"engine": "local"},
                                    "sources": [harness.source_config("shop", [("t", ["id"])])]}))
    config = load_config(str(path))
    capture.install(config, "shop")
    sync_source(lambda: None, config, "shop")
    snap = DeltaSnapshot(config.lake, "shop", "t")
    gone = snap.path / snap.delta().get_add_actions(flatten=True).column("path")[0].as_py()
    gone.unlink()
    capsys.readouterr()
    assert main(["--config", str(path), "status"]) == 0
    out = capsys.readouterr().out
    assert f"damaged: data file {gone.name}" in out and "databus snapshot --source shop --tables t" in out
