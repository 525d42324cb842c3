"""The Dagster UI in a real browser: headless Chromium (Debian's package) driven by Playwright.

Starts `dagster dev` on a free loopback port with one code location holding a source of every kind (SQLite,
MariaDB, PostgreSQL, and Oracle, whose server does not exist here: its definitions load all the same), opens each
source's asset graph, launches a materialization of the PostgreSQL source's group and of the SQLite source's,
waits for each run to succeed, opens a snapshot asset and finds its metadata, and checks that the snapshots equal
their tables. Screenshots are saved in the test's output directory."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def dagster_dev(tmp_path: Path, config: Path) -> Iterator[str]:
    """``dagster dev`` on a free loopback port over the config at ``config``; yields the UI's address."""
    require_tool(Path(CHROMIUM).exists(), "Debian's chromium package is not installed: apt-get install chromium")
    home = tmp_path / "dagster_home"
    home.mkdir()
    port = free_port()
    env = {**os.environ, "DATABUS_CONFIG": str(config), "DAGSTER_HOME": str(home)}
    log = open(tmp_path / "dagster-dev.log", "w")  # noqa: SIM115 - closed when the context ends
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


@pytest.fixture
def dagster_ui(tmp_path: Path, mariadb: MariaDBServer, pg: PostgresHarness):
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
    with dagster_dev(tmp_path, config) as url:
        yield url


def open_page(playwright: Any) -> tuple[Any, Any]:
    """Headless Chromium and a page that dismisses Dagster's first-visit dialog: Dagster opens its "join the
    community" dialog at a moment of its own choosing, sometimes after the graph has drawn, so it is dismissed
    whenever it covers what a test clicks."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.add_locator_handler(page.get_by_role("button", name="Skip"), lambda skip: skip.click())
    return browser, page


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
        browser, page = open_page(p)
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


def _runs(url: str) -> int:
    return len(graphql(url, "{ runsOrError { ... on Runs { results { runId } } } }")["data"]["runsOrError"]["results"])


def _run_messages(url: str, run_id: str) -> list[str]:
    logs = graphql(url, f'{{ logsForRun(runId: "{run_id}") {{ ... on EventConnection {{ events {{ '
                        '... on MessageEvent { message } } } } }')
    return [e["message"] for e in logs["data"]["logsForRun"]["events"] if e]


def _latest_check(url: str, asset: list[str], check: str) -> dict:
    query = (f'{{ assetCheckExecutions(assetKey: {{path: {json.dumps(asset)}}}, checkName: "{check}", limit: 1) '
             '{ runId status } }')
    return graphql(url, query)["data"]["assetCheckExecutions"][0]


@pytest.fixture
def sqlite_and_mariadb_ui(tmp_path: Path, mariadb: MariaDBServer):
    """A SQLite and a MariaDB source in one code location, the local engine (the UI, not Spark, is under test),
    each failing ``capture_lag`` as soon as the source is one SCN ahead of its log."""
    create_shop(tmp_path / "shop.db")
    ShopWorkload(tmp_path / "shop.db", seed=5).run(20)
    maria = MysqlHarness(mariadb)
    maria.create_shop()
    maria.workload(seed=6).run(10)
    keys = [("customers", ["id"]), ("orders", ["id"])]
    config = tmp_path / "databus.yaml"
    config.write_text(json.dumps({"lake": "lake", "merge": {"engine": "local"}, "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db", "poll": {"max_lag_scn": 0},
         "tables": [{"name": t, "primary_key": k} for t, k in keys]},
        maria.source_config("maria", keys, poll={"max_lag_scn": 0})]}))
    writers = {"shop": ShopWorkload(tmp_path / "shop.db", seed=7), "maria": maria.workload(seed=8)}
    with dagster_dev(tmp_path, config) as url:
        yield url, writers


def test_the_buttons_users_click_cost_what_they_say_and_errors_show_where_users_look(
        sqlite_and_mariadb_ui: tuple[str, dict], tmp_path: Path) -> None:
    """Issue 54: "Materialize all" of each source runs its sync, not the full comparison; each ad-hoc job's
    Launchpad refuses its default config (bootstrap, refresh: the tables to re-read must be named) or launches it
    (rebuild), refuses bad tables before launch and a bad filter at launch, starting no run; a failed check's page
    says what is wrong and the fix."""
    from playwright.sync_api import sync_playwright

    url, writers = sqlite_and_mariadb_ui
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as p:
        browser, page = open_page(p)

        def launchpad(job: str, config: str) -> str:
            """The job's Launchpad holding ``config``; what its ERRORS panel says once it has checked it."""
            page.goto(f"{url}/locations/dagster_databus.definitions/jobs/{job}/playground", wait_until="networkidle")
            page.locator(".CodeMirror").first.wait_for(timeout=60_000)
            if config:
                page.evaluate("(text) => document.querySelector('.CodeMirror').CodeMirror.setValue(text)", config)
            page.wait_for_timeout(2_500)  # the Launchpad validates a moment after the last edit
            body = page.inner_text("body")
            return body[body.find("ERRORS"):body.find("CONFIG ACTIONS")] if "ERRORS" in body else ""

        def launch() -> dict:
            ran = _runs(url)
            page.get_by_role("button", name="Launch Run").click()
            return _last_run(url, ran)

        for source in ("shop", "maria"):
            page.goto(f"{url}{GROUP_PAGE.format(source)}", wait_until="networkidle")
            page.get_by_text("changelog", exact=True).first.wait_for(timeout=60_000)
            ran = _runs(url)
            page.get_by_role("button", name="Materialize all").first.click()
            run = _last_run(url, ran)
            page.screenshot(path=shots / f"{source}-1-materialize-all.png")
            assert run["status"] == "SUCCESS", f"Materialize all of {source} ended as {run['status']}"
            # The button costs a sync: the comparison that reads every row is not evaluated, and the run says so.
            assert _latest_check(url, [source, "orders"], "reconciled")["status"] != "SUCCEEDED"
            assert any("does not run in a run that materializes" in m for m in _run_messages(url, run["runId"]))

            for job in ("bootstrap", "refresh"):  # re-read the source: no default may read every table
                errors = launchpad(f"{source}_{job}", "")
                assert 'Missing required config entry "tables"' in errors, errors
                assert page.get_by_role("button", name="Launch Run").is_disabled()
                page.screenshot(path=shots / f"{source}-2-{job}-default.png")
            # Rebuild reads nothing from the source: its default (every table) launches. (The Launchpad keeps
            # what was typed per job, so each job's default is looked at before anything is typed into it.)
            assert "No errors" in launchpad(f"{source}_rebuild", "")
            assert launch()["status"] == "SUCCESS", f"{source}_rebuild with its default config"
            for job in ("bootstrap", "rebuild", "refresh"):  # a table the source does not capture
                errors = launchpad(f"{source}_{job}", "tables: [invoices]\n")
                assert f"not in enum type {source}_table got invoices" in errors, errors
                assert page.get_by_role("button", name="Launch Run").is_disabled()

            # A filter the run would refuse is refused at launch: the dialog names it and no run starts.
            assert "Missing" not in launchpad(f"{source}_refresh", "tables: [orders]\nwhere: id = 1; DROP TABLE x\n")
            ran = _runs(url)
            page.get_by_role("button", name="Launch Run").click()
            page.get_by_text(f"run config of {source}_refresh").first.wait_for(timeout=60_000)
            assert page.get_by_text("';'").count() > 0
            page.screenshot(path=shots / f"{source}-3-refresh-bad-filter.png")
            page.get_by_role("button", name="OK").click()
            assert _runs(url) == ran, "a refused launch started a run"
            launchpad(f"{source}_refresh", 'tables: [orders]\nkey_through: ["5"]\nwhere: id > 2\n')
            assert launch()["status"] == "SUCCESS", f"{source}_refresh of chosen rows"

            # A failed check's own page: the source has moved on, the lag check is executed from its page.
            writers[source].run(3)
            page.goto(f"{url}/assets/{source}/changelog?view=checks&checkDetail=capture_lag", wait_until="networkidle")
            ran = _runs(url)
            page.locator("button").filter(has_text=re.compile(r"^\s*Execute\s*$")).first.click()
            assert _last_run(url, ran)["status"] == "SUCCESS"
            page.reload(wait_until="networkidle")
            page.get_by_text(f"Fix: sync {source} more often").first.wait_for(timeout=60_000)
            assert page.get_by_text("SCNs behind the source").count() > 0
            page.screenshot(path=shots / f"{source}-4-failed-check.png", full_page=True)
        browser.close()
