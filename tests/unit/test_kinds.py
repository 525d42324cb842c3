"""The registry is the one place that knows the source kinds: every kind the config accepts is registered whole,
the Dagster definitions and the CLI take a config holding every kind at once, no module elsewhere names a kind,
and each of these fails when a kind's entry is removed from one layer or a kind is named where it must not be
(checked on copies of the package, as ``test_package_layout`` plants import violations)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster_databus
from tests.support.kinds import names_outside, registration_problems

REPO = Path(dagster_databus.__file__).resolve().parent.parent


def test_no_module_outside_a_kinds_own_places_names_a_kind() -> None:
    assert names_outside() == []


def test_every_kind_the_config_accepts_is_registered_and_taken_by_dagster_and_the_cli() -> None:
    assert registration_problems() == []


def _check_copy(tmp_path: Path, module: str, old: str, new: str) -> subprocess.CompletedProcess[str]:
    """``python -m tests.support.kinds`` over a copy of the package whose ``module`` has ``old`` replaced by ``new``
    (``old`` may end in ``...``: from what precedes it up to the next registry entry, or the end of the list)."""
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "dagster_databus", copy / "dagster_databus", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests" / "support").mkdir(parents=True)
    for name in ("__init__.py", "support/__init__.py", "support/kinds.py"):
        shutil.copy(REPO / "tests" / name, copy / "tests" / name)
    shutil.copytree(REPO / "sql", copy / "sql")
    planted = copy / "dagster_databus" / module
    text = planted.read_text()
    if old.endswith("..."):
        start = text.index(old[:-3])
        ends = [i for i in (text.find("\n    SourceKind(", start + 1), text.find("\n)}", start)) if i >= 0]
        old = text[start:min(ends) + 1]
    assert old in text, f"{old!r} is not in {module}: the planted change must follow the code"
    planted.write_text(text.replace(old, new, 1))
    probe = [sys.executable, "-c", "import dagster_databus, sys; sys.exit(0 if dagster_databus.__file__.startswith("
             f"{str(copy)!r}) else 3)"]
    env = {**os.environ, "PYTHONPATH": str(copy)}
    assert subprocess.run(probe, cwd=copy, env=env).returncode == 0, "the copy is not what the check imports"
    return subprocess.run([sys.executable, "-m", "tests.support.kinds"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_kind_left_out_of_the_registry_fails_the_check(tmp_path: Path) -> None:
    run = _check_copy(tmp_path, "sources/registry.py", "    SourceKind(\n        PostgresSourceConfig,...", "")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "postgres: the config accepts it but sources/registry.py has no entry" in run.stdout


def test_a_kind_left_out_of_the_configs_union_fails_the_check(tmp_path: Path) -> None:
    run = _check_copy(tmp_path, "config/sources.py", "| OracleSourceConfig | PostgresSourceConfig,",
                      "| OracleSourceConfig,")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "postgres: registered, but the config's kind union" in run.stdout


def test_a_kinds_code_gone_from_its_entry_fails_the_check(tmp_path: Path) -> None:
    run = _check_copy(tmp_path, "sources/postgres/dialect.py", "\nFILTERS = ", "\nGONE = ")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "postgres: its registry entry names code that does not load" in run.stdout


def test_a_kind_named_in_the_dagster_layer_fails_the_check(tmp_path: Path) -> None:
    run = _check_copy(tmp_path, "defs/assets.py", "class SyncRunConfig(",
                      "PLANTED = 'postgres'\n\n\nclass SyncRunConfig(")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "names a kind: defs/assets.py:" in run.stdout and "the string 'postgres'" in run.stdout
