"""The Dagster UI in a real browser: headless Chromium (Debian's package) driven by Playwright.

Starts `dagster dev` on a free loopback port with a demo config, opens the asset graph, launches
a materialization of everything, waits for the run to succeed, opens a snapshot asset and finds
its metadata. Screenshots are saved in the test's output directory."""

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

from dagster_databus.demo.workload import ShopWorkload, create_shop
from tests.conftest import require_tool
from tests.mariadb import free_port

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def dagster_ui(tmp_path: Path):
    require_tool(Path(CHROMIUM).exists(), "Debian's chromium package is not installed: apt-get install chromium")
    create_shop(tmp_path / "shop.db")
    ShopWorkload(tmp_path / "shop.db", seed=5).run(20)
    config = tmp_path / "databus.yaml"
    tables = [{"name": "customers", "primary_key": ["id"]}, {"name": "orders", "primary_key": ["id"]}]
    config.write_text(json.dumps({"lake": "lake", "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db", "tables": tables}]}))
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


def test_materialize_everything_from_the_ui_and_read_snapshot_metadata(dagster_ui: str, tmp_path: Path) -> None:
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
        page.goto(f"{dagster_ui}/asset-groups/shop", wait_until="networkidle")
        page.get_by_text("changelog", exact=True).first.wait_for(timeout=60_000)
        page.screenshot(path=shots / "01-asset-graph.png")

        page.get_by_role("button", name="Materialize all").first.click()
        deadline = time.monotonic() + 300
        status = None
        while time.monotonic() < deadline:
            runs = graphql(dagster_ui, "{ runsOrError { ... on Runs { results { runId status } } } }")
            results = runs["data"]["runsOrError"]["results"]
            status = results[0]["status"] if results else None
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(2)
        page.screenshot(path=shots / "02-after-launch.png")
        assert status == "SUCCESS", f"run ended as {status}"
        run_id = results[0]["runId"]
        page.goto(f"{dagster_ui}/runs/{run_id}", wait_until="networkidle")
        page.get_by_text("Success").first.wait_for(timeout=60_000)
        page.screenshot(path=shots / "03-run.png")

        page.goto(f"{dagster_ui}/assets/shop/orders", wait_until="networkidle")
        page.get_by_text("applied_scn").first.wait_for(timeout=60_000)
        assert page.get_by_text("dagster/row_count").count() + page.get_by_text("Row count").count() > 0
        page.screenshot(path=shots / "04-snapshot-asset.png", full_page=True)
        browser.close()
    assert sorted(p.name for p in shots.iterdir()) == ["01-asset-graph.png", "02-after-launch.png", "03-run.png",
                                                        "04-snapshot-asset.png"]
