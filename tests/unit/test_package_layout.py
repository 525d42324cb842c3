"""The package's shape: every folder a regular package (it ships as a zip to Spark Connect servers, and
zipimport finds only those), no module over 500 lines, and the import contracts ``make lint`` runs
(pyproject.toml, ``[tool.importlinter]``) holding, and failing when a violation is planted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster_databus


def test_every_folder_of_the_package_is_a_regular_package() -> None:
    root = Path(dagster_databus.__file__).resolve().parent
    folders = [p for p in [root, *root.rglob("*")] if p.is_dir() and p.name != "__pycache__"]
    assert [str(p.relative_to(root)) for p in folders if not (p / "__init__.py").exists()] == []


MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    """A module that grows past this does more than one job: split it by job (docs/architecture.md)."""
    root = Path(dagster_databus.__file__).resolve().parent
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def _lint_imports(tmp_path: Path, plant: tuple[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts over a copy of the package, with ``plant`` (a module's
    path in the package and a line) added to that module."""
    repo = Path(dagster_databus.__file__).resolve().parent.parent
    copy = tmp_path / "copy"
    shutil.copytree(repo / "dagster_databus", copy / "dagster_databus",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "pyproject.toml", copy / "pyproject.toml")
    if plant is not None:
        module = copy / "dagster_databus" / plant[0]
        module.write_text(module.read_text() + f"\n{plant[1]}  # planted\n")
    lint = Path(sys.executable).parent / "lint-imports"
    return subprocess.run([str(lint), "--no-cache", "--no-logo"], cwd=copy, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(copy)}, timeout=300)


def test_the_import_contracts_hold_and_catch_a_planted_violation(tmp_path: Path) -> None:
    clean = _lint_imports(tmp_path / "clean")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    upward = _lint_imports(tmp_path / "upward", ("core/scn.py", "import dagster_databus.capture"))
    assert upward.returncode != 0
    assert "Each layer imports only the layers below it BROKEN" in upward.stdout
    assert "dagster_databus.core.scn -> dagster_databus.capture" in upward.stdout
    cycle = _lint_imports(tmp_path / "cycle", ("storage/durable.py", "import dagster_databus.storage.lake"))
    assert cycle.returncode != 0
    assert "No two modules or packages of one package import each other BROKEN" in cycle.stdout
    spark = _lint_imports(tmp_path / "spark", ("dataplane/reduce.py", "import pyspark"))
    assert spark.returncode != 0 and "dagster_databus.dataplane.reduce -> pyspark" in spark.stdout
