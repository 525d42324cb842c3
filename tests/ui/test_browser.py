"""The Dagster UI in a real browser: headless Chromium (Debian's package) driven by Playwright.

Starts `dagster dev` on a free loopback port with one code location holding a source of every kind (SQLite,
MariaDB, PostgreSQL, and Oracle, whose server does not exist here: its definitions load all the same), opens each
source's asset graph, launches a materialization of the PostgreSQL source's group and of the SQLite source's,
waits for each run to succeed, opens a snapshot asset and finds its metadata, and checks that the snapshots equal
their tables. Screenshots are saved in the test's output directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dagster_databus.config import load_config
from dagster_databus.demo.workload import ShopWorkload, create_shop
from tests.support.checks import assert_snapshots_match, require_tool
from tests.support.harness import MysqlHarness, PostgresHarness
from tests.support.mariadb import MariaDBServer, free_port
from tests.support.paths import REPO

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


SOURCES = ("shop", "maria", "pg", "ora")  # SQLite, MariaDB, PostgreSQL, Oracle
# A group's own page (its graph and its "Materialize all"); the global lineage shows several groups collapsed.
GROUP_PAGE = "/locations/dagster_databus.definitions/asset-groups/{}/lineage"


@pytest.fixture
def dagster_ui(tmp_path: Path, mariadb: MariaDBServer, pg: PostgresHarness):
    require_tool(Path(CHROMIUM).exists(), "Debian's chromium package is not installed: apt-get install chromium")
    create_shop(tmp_path / "shop.db")
    ShopWorkload(tmp_path / "shop.db", seed=5).run(20)
    maria = MysqlHarness(mariadb)
    for harness in (maria, pg):
        harness.create_shop()
        harness.workload(seed=6).run(10)
    config = tmp_path / "databus.yaml"
    keys = [("customers", ["id"]), ("orders", ["id"])]
    tables = [{"name": t, "primary_key": k} for t, k in keys]
    config.write_text(json.dumps({"lake": "lake", "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db", "tables": tables},
        maria.source_config("maria", keys), pg.source_config("pg", keys),
        {"name": "ora", "kind": "oracle", "dsn": f"127.0.0.1:{free_port()}/FREEPDB1", "user": "databus",
         "connect_timeout_s": 1, "tables": tables}]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    port = free_port()
    env = {**os.environ, "DATABUS_CONFIG": str(config), "DAGSTER_HOME": str(home)}
    log = open(tmp_path / "dagster-dev.log", "w")  # noqa: SIM115 - closed when the fixture ends
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
         "-p", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/server_info", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                output = (tmp_path / "dagster-dev.log").read_text()[-3000:]
                raise RuntimeError(f"dagster dev did not start:\n{output}") from None
            time.sleep(0.5)
    try:
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _last_run(url: str, runs_before: int) -> dict:
    """The run launched after ``runs_before`` runs, once it has ended."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = graphql(url, "{ runsOrError { ... on Runs { results { runId status } } } }")
        results = runs["data"]["runsOrError"]["results"]
        if len(results) > runs_before and results[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            return results[0]
        time.sleep(2)
    raise AssertionError("the launched run did not end within 300 s")


def test_one_location_holds_every_kind_and_a_group_materializes_from_the_ui(dagster_ui: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium package is needed: apt-get install chromium"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        # Dagster opens a first-visit "join the community" dialog at a moment of its own choosing,
        # sometimes after the graph has drawn; dismiss it whenever it covers what the test clicks.
        page.add_locator_handler(page.get_by_role("button", name="Skip"), lambda skip: skip.click())
        for n, source in enumerate(SOURCES, 1):  # every kind's graph: capture, change log, snapshots
            page.goto(f"{dagster_ui}{GROUP_PAGE.format(source)}", wait_until="networkidle")
            page.get_by_text("changelog", exact=True).first.wait_for(timeout=60_000)
            page.get_by_text("orders", exact=True).first.wait_for(timeout=60_000)
            page.screenshot(path=shots / f"0{n}-asset-graph-{source}.png")

        for n, source in enumerate(("pg", "shop"), 5):
            page.goto(f"{dagster_ui}{GROUP_PAGE.format(source)}", wait_until="networkidle")
            page.get_by_text("changelog", exact=True).first.wait_for(timeout=60_000)
            ran = len(graphql(dagster_ui, "{ runsOrError { ... on Runs { results { runId } } } }")
                      ["data"]["runsOrError"]["results"])
            page.get_by_role("button", name="Materialize all").first.click()
            run = _last_run(dagster_ui, ran)
            page.screenshot(path=shots / f"0{n}-after-launch-{source}.png")
            assert run["status"] == "SUCCESS", f"the {source} run ended as {run['status']}"
        page.goto(f"{dagster_ui}/runs/{run['runId']}", wait_until="networkidle")
        page.get_by_text("Success").first.wait_for(timeout=60_000)
        page.screenshot(path=shots / "07-run.png")

        page.goto(f"{dagster_ui}/assets/pg/orders", wait_until="networkidle")
        page.get_by_text("applied_scn").first.wait_for(timeout=60_000)
        assert page.get_by_text("dagster/row_count").count() + page.get_by_text("Row count").count() > 0
        page.screenshot(path=shots / "08-snapshot-asset.png", full_page=True)
        browser.close()
    assert len(list(shots.iterdir())) == 8
    config = load_config(tmp_path / "databus.yaml")
    assert_snapshots_match(config.model_copy(update={"sources": tuple(
        s for s in config.sources if s.name in ("pg", "shop"))}))
