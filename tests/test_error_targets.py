"""Errors that name the right problem: a read of the source before capture is installed says to install it
(it once said the SQLite file must be readable from every Spark executor)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dagster_databus.cli import main
from dagster_databus.snapshot.delta import DeltaSnapshot
from tests.harness import SqliteHarness


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
