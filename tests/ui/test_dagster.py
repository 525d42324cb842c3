"""The Dagster layer, through real Dagster instances and the command line users run."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from dagster_databus.config import MergeConfig, load_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.defs.factory import build_definitions
from dagster_databus.defs.logs import LOG_LEVEL_ENV, default_level
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.errors import ConfigError
from dagster_databus.storage.lake import Lake
from tests.support.checks import assert_snapshots_match
from tests.support.fixtures import ON_EACH_LAKE
from tests.support.paths import REPO


def write_config(tmp_path: Path, tables: list[dict] | None = None) -> Path:
    create_shop(tmp_path / "shop.db")
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({
        "lake": "lake",
        "sources": [{"name": "shop", "kind": "sqlite", "path": "shop.db", "poll": {"cron": "*/2 * * * *"},
                     "tables": tables or [{"name": "customers", "primary_key": ["id"]},
                                          {"name": "orders", "primary_key": ["id"]},
                                          {"name": "order_items", "primary_key": ["order_id", "line_no"]}]}],
    }))
    return path


def materialize(config_path: Path, instance: dg.DagsterInstance, raise_on_error: bool = True):
    defs = build_definitions(load_config(config_path), DatabusResource.for_file(config_path))
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, raise_on_error=raise_on_error)


def metadata(result, key: list[str]) -> dict:
    events = [e for e in result.get_asset_materialization_events()
              if e.asset_key == dg.AssetKey(key)]
    assert len(events) == 1, key
    return {k: v.value for k, v in events[0].materialization.metadata.items()}


def test_materialize_everything_twice_reports_metadata(tmp_path: Path, spark) -> None:
    config_path = write_config(tmp_path)
    workload = ShopWorkload(tmp_path / "shop.db", seed=2)
    workload.run(30)
    with dg.instance_for_test() as instance:
        first = materialize(config_path, instance)
        assert first.success
        boot = metadata(first, ["shop", "orders"])
        assert boot["bootstrap_rows"] == boot["dagster/row_count"] > 0
        columns = {c.name: c for c in boot["dagster/column_schema"].columns}
        assert list(columns) == DeltaSnapshot(load_config(config_path).lake, "shop", "orders").read(
            with_meta=True).column_names
        assert columns["id"].type == "long" and columns["id"].description == "source type INTEGER"
        assert columns["__commit_ts"].type == "timestamp" and columns["__scn"].description is None
        assert "delta_version" in boot and -1 not in boot.values()

        workload.run(40, rollback_every=4)
        second = materialize(config_path, instance)
        log = metadata(second, ["shop", "changelog"])
        assert log["events"] == log["inserts"] + log["updates"] + log["deletes"] > 0
        assert log["windows"] == 1 and log["lag_scn"] == 0
        assert log["scn_range"] == f"{log['scn_from']}..{log['scn_to']}"
        orders = metadata(second, ["shop", "orders"])
        assert orders["applied_scn"] == log["scn_to"] and orders["lag_scn"] == 0
        # A merge reports no bootstrap figures: a bootstrap_rows of 0 would plot as the table emptying.
        assert "bootstrap_rows" not in orders and "bootstrapped_at_scn" not in orders
        assert orders["events"] == log["events_by_table"]["orders"]
        assert orders["engine"] == "spark"
        assert instance.get_latest_materialization_event(dg.AssetKey(["shop", "order_items"])) is not None
    assert_snapshots_match(load_config(config_path))


@pytest.mark.spark  # started in the test
def test_the_cli_command_from_the_readme_captures_and_merges_on_the_first_run(tmp_path: Path) -> None:
    config_path = write_config(tmp_path)
    ShopWorkload(tmp_path / "shop.db", seed=9).run(25)
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DATABUS_CONFIG": str(config_path), "DAGSTER_HOME": str(home)}
    proc = subprocess.run(  # README's "Running it": the checkout is a dg project
        [str(Path(sys.executable).parent / "dg"), "launch", "--assets", "*"], env=env, cwd=REPO, capture_output=True,
        text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert_snapshots_match(load_config(config_path))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for table in ("customers", "orders", "order_items"):
            event = instance.get_latest_materialization_event(dg.AssetKey(["shop", table]))
            assert event is not None, table
        [run] = instance.get_runs()
        events = [e for e in instance.all_logs(run.run_id) if e.dagster_event is not None]
    # One source: its steps form a chain, so the whole run is the command's own process.
    assert any((e.message or "").startswith("Executing steps in process") for e in events)
    assert not any("multiprocess executor" in (e.message or "") for e in events)
    started = step_pids(events)
    assert set(started) == {"shop_sync_step", "shop_reconciliation"} and len(set(started.values())) == 1


def test_runs_print_what_their_steps_did_and_dagsters_debug_events_only_when_asked(tmp_path: Path) -> None:
    """A scheduled run (the source's sync job) prints its steps' lines at INFO, not Dagster's DEBUG engine
    events; DATABUS_LOG_LEVEL=DEBUG brings them back; an asset selection's run follows the instance's
    python_logs level, which docs/operations.md says to set."""
    config_path = write_config(tmp_path)
    doc = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**doc, "merge": {"engine": "local"}}))  # the console, not Spark, is tested
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DATABUS_CONFIG": str(config_path), "DAGSTER_HOME": str(home)}
    env.pop(LOG_LEVEL_ENV, None)
    dagster = str(Path(sys.executable).parent / "dagster")
    job = [dagster, "job", "execute", "-m", "dagster_databus.definitions", "-j", "shop_sync"]

    def run(command: list[str], seed: int | None, **extra: str) -> list[str]:
        if seed is not None:  # new changes first
            ShopWorkload(tmp_path / "shop.db", seed=seed).run(10)
        proc = subprocess.run(command, env={**env, **extra}, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-5000:]
        return proc.stderr.splitlines()

    def debug(lines: list[str]) -> list[str]:
        return [line for line in lines if " - DEBUG - " in line]

    quiet = run(job, 1)
    assert not debug(quiet), "\n".join(quiet)
    for table in ("customers", "orders", "order_items"):  # the bootstrap's line per table
        assert sum(f" - {table}: bootstrapped " in line for line in quiet) == 1, "\n".join(quiet)
    quiet = run(job, 2)
    assert not debug(quiet)
    for table in ("customers", "orders", "order_items"):
        assert any(" - INFO - " in line and f" - {table}: merging " in line for line in quiet), "\n".join(quiet)
    loud = run(job, 3, **{LOG_LEVEL_ENV: "debug"})
    assert sum("STEP_SUCCESS" in line for line in debug(loud)) == 1
    materialize_all = [dagster, "asset", "materialize", "-m", "dagster_databus.definitions", "--select", "*"]
    assert sum("STEP_SUCCESS" in line for line in debug(run(materialize_all, 4))) == 2  # Dagster's default
    (home / "dagster.yaml").write_text("python_logs:\n  python_log_level: INFO\n")
    quiet = run(materialize_all, 5)
    assert not debug(quiet)
    # "Materialize all" costs a sync: the full comparison says where it runs instead.
    assert sum("shop: the full comparison with the source (the reconciled checks) does not run" in line
               for line in quiet) == 1, "\n".join(quiet)
    assert not any(": reconciled at SCN " in line for line in quiet)
    quiet = run([*job[:-1], "shop_reconcile"], None)  # the log holds every change: the comparison can run
    for table in ("customers", "orders", "order_items"):  # the reconciliation: one line per table
        assert sum(f" - {table}: reconciled at SCN " in line and ": equal (" in line for line in quiet) == 1, \
            "\n".join(quiet)


def test_an_unknown_console_log_level_is_refused_at_load_naming_the_levels(monkeypatch) -> None:
    monkeypatch.setenv(LOG_LEVEL_ENV, "LOUD")
    with pytest.raises(ConfigError, match="not a log level") as caught:
        default_level()
    assert "DEBUG, INFO, WARNING" in caught.value.fix
    monkeypatch.setenv(LOG_LEVEL_ENV, " warning ")
    assert default_level() == "WARNING"


def step_pids(events: list) -> dict[str, int]:
    return {e.step_key: e.dagster_event.pid for e in events
            if e.dagster_event.event_type == dg.DagsterEventType.STEP_START}


@ON_EACH_LAKE
def test_a_run_over_two_sources_runs_their_steps_in_parallel_processes(tmp_path: Path, lake: Path | Lake) -> None:
    """Each source's steps in a process of their own, sharing nothing but the lake: on a bucket too, where nothing
    of the lake is on the local disk (docs/deployment.md)."""
    for name in ("east", "west"):
        create_shop(tmp_path / f"{name}.db")
        ShopWorkload(tmp_path / f"{name}.db", seed=5).run(10)
    path = tmp_path / "databus.yaml"
    where = {"lake": "lake"} if isinstance(lake, Path) else {"lake": lake.location.uri,
                                                             "storage_options": dict(lake.templates)}
    path.write_text(json.dumps({**where, "merge": {"engine": "local"}, "sources": [
        {"name": name, "kind": "sqlite", "path": f"{name}.db", "tables": [{"name": "orders", "primary_key": ["id"]}]}
        for name in ("east", "west")]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DATABUS_CONFIG": str(path), "DAGSTER_HOME": str(home)}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "dagster_databus.definitions",
         "--select", "*"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert_snapshots_match(load_config(path))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs()
        events = [e for e in instance.all_logs(run.run_id) if e.dagster_event is not None]
    assert any("multiprocess executor" in (e.message or "") for e in events)
    started = step_pids(events)
    assert set(started) == {"east_sync_step", "west_sync_step", "east_reconciliation", "west_reconciliation"}
    assert started["east_sync_step"] != started["west_sync_step"], "each source's step ran in a process of its own"
    assert isinstance(lake, Path) or not (tmp_path / "lake").exists(), "nothing of a bucket's lake on the local disk"


def test_a_run_where_two_sources_fail_names_both_errors_in_its_failure(tmp_path: Path) -> None:
    """Issue 54, item 6: the RUN_FAILURE of a run over two sources names each source's problem, not the first's."""
    for name in ("east", "west"):
        create_shop(tmp_path / f"{name}.db")
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({"lake": "lake", "merge": {"engine": "local"}, "sources": [
        {"name": name, "kind": "sqlite", "path": f"{name}.db", "tables": [{"name": table, "primary_key": ["id"]}]}
        for name, table in (("east", "invoices"), ("west", "receipts"))]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "dagster_databus.definitions",
         "--select", "*"], env={**os.environ, "DATABUS_CONFIG": str(path), "DAGSTER_HOME": str(home)}, cwd=REPO,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs()
        [failure] = [e.dagster_event for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)]
    said = failure.event_specific_data.error.message
    assert said.startswith("2 steps failed:"), said
    for step, table in (("east_sync_step", "invoices"), ("west_sync_step", "receipts")):
        assert any(line.startswith(f"- {step}: ") and table in line for line in said.splitlines()), said


@pytest.mark.spark  # started in the test
def test_a_failed_run_shows_the_capture_layers_message(tmp_path: Path) -> None:
    config_path = write_config(tmp_path, tables=[{"name": "invoices", "primary_key": ["id"]}])
    with dg.instance_for_test() as instance:
        result = materialize(config_path, instance, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    message = failure.step_failure_data.error.message
    assert "table 'invoices' does not exist" in message and "Fix:" in message
    assert not (tmp_path / "lake").exists()


def test_schedules_jobs_and_graph_shape(tmp_path: Path) -> None:
    config_path = write_config(tmp_path)
    defs = build_definitions(load_config(config_path), DatabusResource.for_file(config_path))
    schedule = defs.resolve_schedule_def("shop_poll")
    assert schedule.cron_schedule == "*/2 * * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    job = defs.resolve_job_def("shop_sync")
    keys = {k.to_user_string() for k in job.asset_layer.selected_asset_keys}
    assert keys == {"shop/capture", "shop/changelog", "shop/customers", "shop/orders", "shop/order_items"}
    # A source's assets and cheap checks are produced by one step, so a sync run starts Python and Spark
    # once; the full reconciliation is a step of its own.
    nodes = {defs.resolve_assets_def(dg.AssetKey(["shop", t])).node_def.name
             for t in ("capture", "changelog", "customers", "orders", "order_items")}
    assert nodes == {"shop_sync_step"}
    sync = defs.resolve_assets_def(dg.AssetKey(["shop", "orders"]))
    assert {(k.asset_key.to_user_string(), k.name) for k in sync.check_keys} >= {
        ("shop/capture", "capture_verified"), ("shop/changelog", "capture_lag"), ("shop/orders", "freshness")}
    assert not any(k.name == "reconciled" for k in sync.check_keys)
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["shop", "orders"])).parent_keys == {dg.AssetKey(["shop", "changelog"])}
    assert graph.get(dg.AssetKey(["shop", "orders"])).kinds == {"delta", "spark"}  # the default engine's
    local = load_config(config_path).model_copy(update={"merge": MergeConfig(engine="local")})
    assert build_definitions(local, DatabusResource.for_file(config_path)).resolve_asset_graph().get(
        dg.AssetKey(["shop", "orders"])).kinds == {"delta"}  # runs that start no Spark say so
    # Issue 54, item 8. Schedules and sensors show their descriptions as plain text: no Markdown marks.
    for definition in [*(defs.schedules or []), *(defs.sensors or [])]:
        assert "`" not in (definition.description or ""), definition.description
    # Asset descriptions are Markdown: no <...> that a page would take for an HTML tag and hide.
    assert "log/shop/" in graph.get(dg.AssetKey(["shop", "changelog"])).description
    for node in graph.asset_nodes:
        assert "<" not in (node.description or ""), node.description
        assert node.code_version == importlib.metadata.version("dagster-databus")  # in "Compute details"


@pytest.mark.parametrize("subset", [["shop/orders"], ["shop/customers", "shop/order_items"]])
def test_a_subset_of_snapshots_can_be_materialized(tmp_path: Path, spark, subset: list[str]) -> None:
    config_path = write_config(tmp_path)
    ShopWorkload(tmp_path / "shop.db", seed=4).run(10)
    defs = build_definitions(load_config(config_path), DatabusResource.for_file(config_path))
    selection = [dg.AssetKey(["shop", "capture"]), dg.AssetKey(["shop", "changelog"]),
                 *[dg.AssetKey.from_user_string(s) for s in subset]]
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(selection))
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance)
    produced = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert produced == {"shop/capture", "shop/changelog", *subset}


def test_a_mysql_source_materializes_through_dagster(tmp_path: Path, spark, mariadb) -> None:
    from tests.support.harness import MysqlHarness

    harness = MysqlHarness(mariadb)
    harness.create_shop()
    workload = harness.workload(seed=17)
    workload.run(20)
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({"lake": "lake", "sources": [harness.source_config(
        "inv", [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])])]}))
    with dg.instance_for_test() as instance:
        assert materialize(path, instance).success
        workload.run(20)
        second = materialize(path, instance)
    log = metadata(second, ["inv", "changelog"])
    assert log["events"] > 0 and log["lag_scn"] == 0
    assert int(log["scn_to"]) >> 32 >= 1  # binlog file number in the high bits
    capture_meta = metadata(second, ["inv", "capture"])
    assert capture_meta["capture_version"] == "binlog"
    assert_snapshots_match(load_config(path))


def test_capture_check_passes_when_healthy_and_names_a_dropped_trigger(tmp_path: Path) -> None:
    import sqlite3

    config_path = write_config(tmp_path)
    defs = build_definitions(load_config(config_path), DatabusResource.for_file(config_path))
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey(["shop", "capture"])},
        asset_check_selection={dg.AssetCheckKey(dg.AssetKey(["shop", "capture"]), "capture_verified")})
    with dg.instance_for_test() as instance:
        healthy = job.execute_in_process(instance=instance)
        [ok] = healthy.get_asset_check_evaluations()
        assert ok.passed and ok.metadata["problems"].value == []
        with sqlite3.connect(tmp_path / "shop.db") as conn:
            conn.execute("DROP TRIGGER _databus_orders_delete")
        check_only = defs.resolve_implicit_global_asset_job_def().get_subset(
            asset_selection=set(),
            asset_check_selection={dg.AssetCheckKey(dg.AssetKey(["shop", "capture"]), "capture_verified")})
        broken = check_only.execute_in_process(instance=instance, raise_on_error=False)
        [bad] = broken.get_asset_check_evaluations()
        assert not bad.passed
        assert bad.metadata["problems"].value == ["table orders: trigger(s) _databus_orders_delete missing"]


def test_the_refresh_job_reads_a_key_range_again_with_typed_run_config(tmp_path: Path, spark) -> None:
    """The ad-hoc job a user launches from the launchpad: mode refresh, one table, a key range; the
    snapshot's damage inside the range is repaired, and the metadata says what was read."""
    from deltalake import DeltaTable

    config_path = write_config(tmp_path)
    ShopWorkload(tmp_path / "shop.db", seed=6).run(30)
    config = load_config(config_path)
    with dg.instance_for_test() as instance:
        assert materialize(config_path, instance).success
        snap = DeltaSnapshot(config.lake, "shop", "orders")
        DeltaTable(snap.uri).update(updates={"total": "-1"})
        defs = build_definitions(config, DatabusResource.for_file(config_path))
        job = defs.resolve_job_def("shop_refresh")
        result = job.execute_in_process(instance=instance, run_config={"tables": ["orders"], "key_through": ["5"]})
        assert result.success
        orders = metadata(result, ["shop", "orders"])
        held = sum(1 for k in snap.read().column("id").to_pylist() if k <= 5)
        assert orders["refresh_rows_read"] == held > 0 and orders["refresh_deletes_checked"] is True
        assert orders["refresh_updated"] == held
        totals = {r["id"]: r["total"] for r in snap.read().to_pylist()}
        assert all(t != -1 for k, t in totals.items() if k <= 5)
        assert all(t == -1 for k, t in totals.items() if k > 5)
        # Rows chosen for any other mode (the step's own config, as "Materialize" with config sets it) are refused
        # with the fix.
        bad = {"ops": {"shop_sync_step": {"config": {"mode": "merge", "where": "id = 1"}}}}
        failed = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, run_config=bad, raise_on_error=False, asset_selection=[dg.AssetKey(["shop", "orders"])])
        assert not failed.success
        assert "set mode: refresh" in str(failed.get_step_failure_events()[0].event_specific_data.error)


def test_the_upkeep_job_observes_each_snapshot_with_its_files(tmp_path: Path, spark) -> None:
    config_path = write_config(tmp_path)
    workload = ShopWorkload(tmp_path / "shop.db", seed=8)
    workload.run(20)
    with dg.instance_for_test() as instance:
        assert materialize(config_path, instance).success
        for _ in range(3):
            workload.run(5)
            assert materialize(config_path, instance).success
        defs = build_definitions(load_config(config_path), DatabusResource.for_file(config_path))
        assert defs.resolve_schedule_def("shop_upkeep").default_status == dg.DefaultScheduleStatus.STOPPED
        result = defs.resolve_job_def("shop_upkeep").execute_in_process(instance=instance)
        assert result.success
        observed = {e.asset_key.to_user_string(): e.event_specific_data.asset_observation.metadata
                    for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"}
        assert set(observed) == {"shop/customers", "shop/orders", "shop/order_items"}
        orders = {k: v.value for k, v in observed["shop/orders"].items()}
        assert orders["files_after"] == orders["files_before"] - orders["files_compacted"] + orders["files_written"]
        assert orders["checkpoint_version"] == DeltaSnapshot(load_config(config_path).lake, "shop", "orders").version()
        assert orders["vacuum_retain_hours"] == 168
    assert_snapshots_match(load_config(config_path))


def test_a_table_with_history_reports_its_versions_on_its_asset(tmp_path: Path, spark) -> None:
    from dagster_databus.dataplane.history import HistoryTable

    config_path = write_config(tmp_path, [{"name": "orders", "primary_key": ["id"], "history": True}])
    workload = ShopWorkload(tmp_path / "shop.db", seed=8)
    workload.run(30)
    with dg.instance_for_test() as instance:
        first = metadata(materialize(config_path, instance), ["shop", "orders"])
        assert first["history_started_at_scn"] == first["applied_scn"]
        assert first["history_versions"] == first["dagster/row_count"] > 0
        workload.run(40)
        second = metadata(materialize(config_path, instance), ["shop", "orders"])
        assert "history_started_at_scn" not in second and second["history_scn"] == second["applied_scn"]
        hist = HistoryTable(load_config(config_path).lake, "shop", "orders").read(with_meta=True)
        assert second["history_versions"] == hist.num_rows == first["history_versions"] + \
            second["history_versions_opened"]
        assert second["history_versions_closed"] == sum(1 for e in hist["__end_scn"].to_pylist() if e is not None) > 0


def test_the_verified_check_warns_naming_the_repaired_keys_and_passes_again(tmp_path: Path) -> None:
    """The everyday safety net as the UI shows it: a value planted in a snapshot behind the log's back is named by
    the sync's ``verified`` check, a WARN with the table, key, column and SCN, repaired in the same run; the next
    run's check passes."""
    from deltalake import DeltaTable

    config_path = write_config(tmp_path)
    ShopWorkload(tmp_path / "shop.db", seed=2).run(30)
    config = load_config(config_path)
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "merge": {"engine": "local"}}))
    with dg.instance_for_test() as instance:
        assert materialize(config_path, instance).success
        snap = DeltaSnapshot(config.lake, "shop", "orders")
        damaged = min(snap.read().column("id").to_pylist())
        DeltaTable(snap.uri).update(predicate=f"id = {damaged}", updates={"total": "-1"})
        result = materialize(config_path, instance)
        checks = {(e.asset_key.path[-1], e.check_name): e for e in result.get_asset_check_evaluations()}
        warned = checks[("orders", "verified")]
        assert not warned.passed and warned.severity == dg.AssetCheckSeverity.WARN
        assert "1 key(s) of shop.orders differed" in warned.description and "total" in warned.description
        assert warned.metadata["repaired_keys"].value == 1
        assert warned.metadata["differing_columns"].value == "total"
        [named] = warned.metadata["first_differences"].value
        assert named["key"] == [damaged] and named["total"]["snapshot"] == -1
        assert warned.metadata["scn"].value == str(snap.applied_scn())
        assert all(checks[(t, "verified")].passed for t in ("customers", "order_items"))
        again = materialize(config_path, instance)
        assert all(e.passed for e in again.get_asset_check_evaluations() if e.check_name == "verified")
    assert_snapshots_match(config)
