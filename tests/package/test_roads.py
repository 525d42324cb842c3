"""Every source kind on every road a user takes, each cell a real run of the shop workload that ends with every
snapshot equal to its source table, by a bootstrap and then by change events:

- ``dagster``: the definitions loaded from ``dagster_databus.definitions`` (``DATABUS_CONFIG``), the source's sync
  job run by Dagster on a real instance;
- ``cli``: ``databus sync --json``, whose stdout holds JSON objects only, one a line;
- ``wheel``: ``databus sync`` of the package installed from its wheel into a fresh environment, run from a folder
  outside the checkout;

on both merge engines where the road runs in this process. The kinds are the registry's: a new kind runs here
(and fails until ``tests.support.sources.harness_of`` has a harness for it); Oracle skips without a server,
naming how to configure one. The UI (``test_browser``), Dagster components (``test_component``) and a config
holding every kind at once (``test_kinds``) are the other roads."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from dagster_databus.cli import main
from dagster_databus.config import CONFIG_ENV, load_config
from tests.support.checks import assert_snapshots_match
from tests.support.harness import SourceHarness
from tests.support.sources import SOURCE_KINDS, harness_of
from tests.support.wheel import InstalledWheel

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]
ROADS = [("dagster", "local"), ("dagster", "spark"), ("cli", "local"), ("cli", "spark"), ("wheel", "local")]


def json_objects(stdout: str) -> list[dict[str, Any]]:
    """Every line of a ``--json`` command's stdout, each parsed: a line that is not a JSON object fails."""
    objects = [json.loads(line) for line in stdout.splitlines()]
    assert objects and all(isinstance(o, dict) for o in objects), stdout
    return objects


def _dagster(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The source's sync job of the definitions module, run by Dagster; events captured and rows bootstrapped."""
    import dagster_databus.definitions

    monkeypatch.setenv(CONFIG_ENV, str(path))
    defs = importlib.reload(dagster_databus.definitions).defs
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("shop_sync").execute_in_process(instance=instance)
        assert result.success
        figures: dict[str, int] = {"events": 0, "bootstrap_rows": 0}
        for event in result.get_asset_materialization_events():
            values = {k: v.value for k, v in event.materialization.metadata.items()}
            figures["events"] += int(values.get("events", 0)) if event.asset_key.path[-1] == "changelog" else 0
            figures["bootstrap_rows"] += int(values.get("bootstrap_rows") or 0)
    return figures


def _figures(steps: list[dict[str, Any]]) -> dict[str, int]:
    """What ``databus sync --json`` says it did: the capture's events and the bootstraps' rows; its verification
    of each table found nothing different (or, the first time, had no snapshot to compare yet)."""
    assert [s["step"] for s in steps] == ["capture"] + ["merge"] * len(SHOP) + ["verify"] * len(SHOP), steps
    verified = steps[1 + len(SHOP):]
    assert all(v["differing_keys"] == 0 and not (v["skipped"] or "").startswith(("the slice could not", "the "
                                                                                 "comparison failed"))
               for v in verified), verified
    return {"events": int(steps[0]["events"]),
            "bootstrap_rows": sum(int(s.get("bootstrap_rows") or 0) for s in steps[1:])}


def _cli(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    capsys.readouterr()
    assert main(["--config", str(path), "sync", "--source", "shop", "--json"]) == 0
    return _figures(json_objects(capsys.readouterr().out))


def _wheel(path: Path, installed: InstalledWheel) -> dict[str, int]:
    run = installed.run([str(installed.command("databus")), "--config", str(path), "sync", "--source", "shop",
                         "--json"], cwd=path.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    return _figures(json_objects(run.stdout))


@pytest.mark.parametrize("kind", SOURCE_KINDS)
@pytest.mark.parametrize(("road", "engine"), ROADS, ids=[f"{r}-{e}" for r, e in ROADS])
def test_a_kind_on_a_road_bootstraps_then_merges_changes_equal_to_the_source(
        kind: str, road: str, engine: str, tmp_path: Path, request: pytest.FixtureRequest, lazy_spark: object,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    harness: SourceHarness = harness_of(kind, tmp_path, request)
    if engine == "spark":  # (lazy_spark marks the spark cells) the shared session, on the test cluster, which the
        request.getfixturevalue("spark")  # runs here take as this process's active session
    installed = request.getfixturevalue("installed_wheel")[0] if road == "wheel" else None
    harness.create_shop()
    harness.workload(seed=11).run(12)
    path = tmp_path / "databus.json"
    path.write_text(json.dumps({"lake": str(tmp_path / "lake"), "merge": {"engine": engine},
                                "sources": [harness.source_config("shop", SHOP)]}))

    def sync() -> dict[str, int]:
        if road == "dagster":
            return _dagster(path, monkeypatch)
        if road == "cli":
            return _cli(path, capsys)
        assert installed is not None
        return _wheel(path, installed)

    first = sync()
    assert first["bootstrap_rows"] > 0, first
    assert_snapshots_match(load_config(path))
    harness.workload(seed=12).run(12, rollback_every=4)
    second = sync()
    assert second["events"] > 0 and second["bootstrap_rows"] == 0, second  # by change events, not a re-read
    assert_snapshots_match(load_config(path))
