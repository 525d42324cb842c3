"""``DatabusComponent`` through ``dg`` itself, as a user adds change data capture to a Dagster project of their own:
a project made by ``create-dagster``, the component scaffolded into it (``dg scaffold defs``), given a SQLite and
a PostgreSQL source, checked (``dg check defs``), listed (``dg list defs``) and run (``dg launch``) until both
sources' snapshots equal their tables, by a bootstrap and then by change events. The package is the installed
wheel (``support/wheel.py``), so ``dg`` finds the component by the wheel's entry point; a YAML with a mistake is refused
by ``dg check defs`` naming the field and the fix."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_databus.config import parse_config
from dagster_databus.demo.workload import ShopWorkload, create_shop
from tests.support.checks import assert_snapshots_match
from tests.support.harness import PostgresHarness, SqliteHarness
from tests.support.wheel import InstalledWheel

COMPONENT = "dagster_databus.components.DatabusComponent"
SHOP = [{"name": "customers", "primary_key": ["id"]}, {"name": "orders", "primary_key": ["id"]},
        {"name": "order_items", "primary_key": ["order_id", "line_no"]}]


class Project:
    """A Dagster project made by ``create-dagster`` in a temporary folder, installed into the wheel's environment
    (with ``dg``), and run by ``dg`` there."""

    def __init__(self, installed: InstalledWheel, folder: Path) -> None:
        self.installed = installed
        for tool in ("dg", "create-dagster"):
            installed.adopt_script(tool)
        self.home = folder / "dagster_home"
        self.home.mkdir()
        (self.home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        made = self.run(["create-dagster", "project", "proj", "--no-uv-sync"], cwd=folder)
        self.root = folder / "proj"
        installed_project = self.run([str(installed.python), "-m", "pip", "install", "--quiet", "--no-deps", "-e",
                                      str(self.root)], cwd=folder)
        assert made.returncode == installed_project.returncode == 0, made.stderr + installed_project.stderr
        self.defs = self.root / "src" / "proj" / "defs"

    def run(self, args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return self.installed.run(args, cwd=cwd or self.root, DAGSTER_HOME=str(self.home), PYTHONWARNINGS="ignore",
                                  COLUMNS="200")

    def dg(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(["dg", *args])

    def write(self, folder: str, attributes: dict[str, Any]) -> Path:
        path = self.defs / folder / "defs.yaml"
        path.write_text(yaml.safe_dump({"type": COMPONENT, "attributes": attributes}, sort_keys=False))
        return path


@pytest.fixture(scope="module")
def made(installed_wheel: tuple[InstalledWheel, Any], tmp_path_factory: pytest.TempPathFactory) -> Project:
    return Project(installed_wheel[0], tmp_path_factory.mktemp("dg"))


@pytest.fixture
def project(made: Project) -> Iterator[Project]:
    """The module's project, its defs folder as create-dagster left it before each test and after."""
    yield made
    for folder in made.defs.iterdir():
        if folder.is_dir() and folder.name != "__pycache__":
            shutil.rmtree(folder)


def _launched(run: subprocess.CompletedProcess[str]) -> None:
    """``dg launch`` exits non-zero when the run fails (the console shows INFO: no RUN_SUCCESS line to look for)."""
    said = run.stdout + run.stderr
    assert run.returncode == 0 and "RUN_FAILURE" not in said and "STEP_FAILURE" not in said, said[-4000:]


def test_dg_scaffolds_checks_lists_and_launches_the_component_with_a_sqlite_and_a_postgresql_source(
        project: Project, pg: PostgresHarness) -> None:
    scaffolded = project.dg("scaffold", "defs", COMPONENT, "cdc", "--kind", "postgres")
    assert scaffolded.returncode == 0, scaffolded.stderr[-3000:]
    starter = yaml.safe_load((project.defs / "cdc" / "defs.yaml").read_text())
    assert starter["type"] == COMPONENT and [s["kind"] for s in starter["attributes"]["sources"]] == ["postgres"]
    assert starter["attributes"]["lake"] == "{{ context.project_root }}/.databus/lake"  # not in the code's folders
    checked = project.dg("check", "defs")  # the starter as written loads (nothing connects at load)
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]

    folder = project.defs / "cdc"
    create_shop(folder / "shop.db")
    lite = SqliteHarness(folder / "shop.db")
    pg.create_shop()
    for seed, harness in enumerate((lite, pg)):
        harness.workload(seed=seed).run(10)
    attributes = {"lake": "lake", "merge": {"engine": "local"}, "sources": [
        {"name": "lite", "kind": "sqlite", "path": "shop.db", "tables": SHOP},
        {**pg.source_config("pg", []), "tables": SHOP}]}
    project.write("cdc", attributes)
    checked = project.dg("check", "defs")
    assert checked.returncode == 0 and "All definitions loaded successfully" in checked.stdout + checked.stderr, \
        (checked.stdout + checked.stderr)[-3000:]
    listed = project.dg("list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    defs = json.loads(listed.stdout)
    assets = {a["asset_key"] for a in defs["assets"]}
    assert {f"{s}/{t}" for s in ("lite", "pg") for t in ("capture", "changelog", "orders", "order_items")} <= assets
    assert {"lite_sync", "pg_sync", "pg_refresh"} <= {j["name"] for j in defs["jobs"]}
    config = parse_config(attributes, base=folder)

    assert [r["name"] for r in defs["resources"]] == ["databus"]

    # An asset selection's run (both groups' assets and their checks, reconciliation too: a step each, in
    # processes of their own, as the project's executor runs them), then each source's own job.
    _launched(project.dg("launch", "--assets", "group:lite or group:pg"))
    assert_snapshots_match(config)
    ShopWorkload(folder / "shop.db", seed=7).run(10, rollback_every=3)
    pg.workload(seed=8).run(10, rollback_every=3)
    _launched(project.dg("launch", "--job", "lite_sync"))
    _launched(project.dg("launch", "--job", "pg_sync"))
    assert_snapshots_match(config)


@pytest.mark.parametrize(("attributes", "refusal"), [
    ({"lake": "lake", "sources": [{"name": "s", "kind": "sqllite", "path": "x.db",
                                   "tables": [{"name": "t", "primary_key": ["id"]}]}]},
     ["sources[0].kind: unknown source kind 'sqllite'", "Fix: use one of: sqlite"]),
    ({"config_file": "databus.yaml", "lake": "lake",
      "sources": [{"name": "s", "kind": "sqlite", "path": "x.db", "tables": [{"name": "t", "primary_key": ["id"]}]}]},
     ["give either config_file (a databus config file) or the config itself"]),
], ids=["misspelled-kind", "config-twice"])
def test_dg_check_defs_refuses_a_component_yaml_with_a_mistake_naming_the_field_and_the_fix(
        project: Project, attributes: dict[str, Any], refusal: list[str]) -> None:
    (project.defs / "cdc").mkdir()
    project.write("cdc", attributes)
    checked = project.dg("check", "defs")
    said = " ".join((checked.stdout + checked.stderr).split())
    assert checked.returncode != 0 and all(part in said for part in refusal), said[-3000:]
    assert "cdc/defs.yaml" in said or "cdc" in said
    assert not (project.defs / "cdc" / "lake").exists() and not (project.defs / "cdc" / "x.db").exists()


def test_the_component_takes_a_config_file_of_its_own(project: Project) -> None:
    """``config_file``: a databus config file beside defs.yaml (relative paths from its own folder)."""
    (project.defs / "cdc").mkdir()
    create_shop(project.defs / "cdc" / "shop.db")
    (project.defs / "cdc" / "databus.yaml").write_text(yaml.safe_dump({"lake": "lake", "merge": {"engine": "local"},
        "sources": [{"name": "filed", "kind": "sqlite", "path": "shop.db", "tables": SHOP}]}))
    project.write("cdc", {"config_file": "databus.yaml"})
    _launched(project.dg("launch", "--job", "filed_sync"))
    assert_snapshots_match(parse_config({"lake": "lake", "sources": [
        {"name": "filed", "kind": "sqlite", "path": "shop.db", "tables": SHOP}]}, base=project.defs / "cdc"))
