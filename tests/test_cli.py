"""The ``databus`` command line: validate, install, status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagster_databus import pipeline
from dagster_databus.cli import main
from dagster_databus.config import load_config
from dagster_databus.demo.workload import ShopWorkload, create_shop


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    create_shop(tmp_path / "shop.db")
    ShopWorkload(tmp_path / "shop.db").run(5)
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({"lake": "lake", "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db", "tables": [{"name": "orders", "primary_key": ["id"]}]}]}))
    return path


def test_validate_install_status(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "validate"]) == 0
    assert not (config_path.parent / "lake").exists()
    assert main(["--config", str(config_path), "install"]) == 0
    assert "updated ['orders']" in capsys.readouterr().out
    ShopWorkload(config_path.parent / "shop.db", seed=1).run(3)
    config = load_config(config_path)
    result = pipeline.capture(config, "shop")
    assert main(["--config", str(config_path), "status"]) == 0
    shop_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("shop"))
    assert shop_line.split()[1:4] == [str(result.until), str(result.source_hwm), "0"]


def test_errors_exit_2_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(tmp_path / "missing.yaml"), "status"]) == 2
    assert "Fix:" in capsys.readouterr().err
