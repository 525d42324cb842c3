"""Operating it from Dagster: schedules, automation, checks, bootstrap and rebuild runs, retries,
pools — through Dagster's own APIs on real pipelines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable

from dagster_databus.cli import main as cli
from dagster_databus.config import load_config
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.defs.common import MAX_RETRIES, clear_errors
from dagster_databus.defs.factory import build_definitions
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.reconcile import schema_drift
from tests.support.checks import assert_snapshots_match

TABLES = [{"name": "customers", "primary_key": ["id"]}, {"name": "orders", "primary_key": ["id"]},
          {"name": "order_items", "primary_key": ["order_id", "line_no"]}]


def setup(tmp_path: Path, **source: object):
    create_shop(tmp_path / "shop.db")
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({"lake": "lake", "sources": [
        {"name": "shop", "kind": "sqlite", "path": "shop.db", "tables": TABLES,
         "owners": ["team:data-platform"], "tags": {"tier": "gold"}, **source}]}))
    defs = build_definitions(load_config(path), DatabusResource.for_file(path))
    return path, defs, ShopWorkload(tmp_path / "shop.db", seed=3)


def run(defs: dg.Definitions, instance: dg.DagsterInstance, job: str | None = None, **kwargs):
    target = defs.resolve_job_def(job) if job else defs.resolve_implicit_global_asset_job_def()
    return target.execute_in_process(instance=instance, **kwargs)


def failed_rebuild(defs: dg.Definitions, instance: dg.DagsterInstance, table: str) -> str:
    """The step failure of a ``shop_rebuild`` run of ``table``, which must fail."""
    result = run(defs, instance, "shop_rebuild", raise_on_error=False, run_config={"tables": [table]})
    assert not result.success
    return next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE
                ).step_failure_data.error.message


def checks(result) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    return {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}


def test_poll_schedule_requests_the_sync_job(tmp_path: Path) -> None:
    _, defs, _ = setup(tmp_path, poll={"cron": "*/3 * * * *"})
    schedule = defs.resolve_schedule_def("shop_poll")
    with dg.instance_for_test() as instance:
        requests = schedule.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests
    assert len(requests) == 1 and schedule.job_name == "shop_sync" and schedule.cron_schedule == "*/3 * * * *"


def test_reconciliation_runs_on_its_own_schedule_not_with_every_sync(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path, reconcile={"cron": "0 4 * * 0", "every_syncs": 2})
    workload.run(10)
    schedule = defs.resolve_schedule_def("shop_reconcile")
    assert schedule.job_name == "shop_reconcile" and schedule.cron_schedule == "0 4 * * 0"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    sensor = defs.resolve_sensor_def("shop_reconcile_every_syncs")
    with dg.instance_for_test() as instance:
        synced = checks(run(defs, instance, "shop_sync"))
        assert ("shop/orders", "schema_drift") in synced
        assert not [k for k in synced if k[1] == "reconciled"], "the full comparison must not run with every sync"
        context = dg.build_sensor_context(instance=instance)
        assert not sensor.evaluate_tick(context).run_requests  # 1 of 2 syncs
        run(defs, instance, "shop_sync")
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
        assert len(tick.run_requests) == 1 and tick.cursor == "2"
        assert not sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor="2")).run_requests
        reconciled = checks(run(defs, instance, "shop_reconcile"))
    assert {k for k in reconciled} == {(f"shop/{t['name']}", "reconciled") for t in TABLES}
    assert all(e.passed for e in reconciled.values())


def test_reconcile_schedule_can_be_turned_off(tmp_path: Path) -> None:
    _, defs, _ = setup(tmp_path, reconcile={"cron": None})
    assert "shop_reconcile" not in {s.name for s in defs.schedules or []}
    assert defs.resolve_job_def("shop_reconcile") is not None


def test_snapshots_follow_the_change_log_automatically(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path)
    workload.run(10)
    with dg.instance_for_test() as instance:
        run(defs, instance)
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert first.total_requested == 0  # everything is up to date
        workload.run(5)
        sync = defs.resolve_job_def("shop_sync").get_subset(
            asset_selection={dg.AssetKey(["shop", "capture"]), dg.AssetKey(["shop", "changelog"])})
        sync.execute_in_process(instance=instance)
        after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    keys = ["shop/capture", "shop/changelog", "shop/customers", "shop/orders", "shop/order_items"]
    requested = {k for k in keys if after.get_num_requested(dg.AssetKey.from_user_string(k))}
    assert requested == {"shop/customers", "shop/orders", "shop/order_items"}
    # Automatic merges do not run the full comparison with the source (it has its own schedule).
    assert not after.get_num_requested(dg.AssetCheckKey(dg.AssetKey(["shop", "orders"]), "reconciled"))
    sensor = defs.resolve_sensor_def("shop_merge_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_assets_carry_pools_owners_tags_and_descriptions(tmp_path: Path) -> None:
    _, defs, _ = setup(tmp_path)
    graph = defs.resolve_asset_graph()
    changelog = graph.get(dg.AssetKey(["shop", "changelog"]))
    orders = graph.get(dg.AssetKey(["shop", "orders"]))
    assert defs.resolve_assets_def(dg.AssetKey(["shop", "changelog"])).op.pool == "databus_shop_sync"
    assert defs.resolve_assets_def(dg.AssetKey(["shop", "orders"])).op.pool == "databus_shop_sync"
    assert orders.owners == ["team:data-platform"] and orders.tags["tier"] == "gold"
    assert "Delta snapshot" in (orders.description or "") and changelog.description
    assert orders.automation_condition is not None


def test_transient_source_errors_retry_with_backoff_others_fail_at_once() -> None:
    class Context:
        retry_number = 0

    context = Context()
    with pytest.raises(dg.RetryRequested) as retry, clear_errors(context):
        raise SourceUnavailableError("server gone", "wait")
    assert retry.value.max_retries == MAX_RETRIES and retry.value.seconds_to_wait == 5
    context.retry_number = 2
    with pytest.raises(dg.RetryRequested) as retry, clear_errors(context):
        raise SourceUnavailableError("server gone", "wait")
    assert retry.value.seconds_to_wait == 20
    context.retry_number = MAX_RETRIES
    with pytest.raises(dg.Failure, match="server gone"), clear_errors(context):
        raise SourceUnavailableError("server gone", "wait")
    context.retry_number = 0
    with pytest.raises(dg.Failure, match="bad field"), clear_errors(context):
        raise ConfigError("x", "bad field", "fix it")


def test_checks_pass_on_a_healthy_source_and_fail_on_a_diverged_snapshot(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path)
    workload.run(15)
    with dg.instance_for_test() as instance:
        materialized = run(defs, instance)  # "Materialize all": the sync's checks, not the full comparison
        healthy = checks(materialized)
        assert not [k for k in healthy if k[1] == "reconciled"]
        assert any("does not run in a run that materializes" in e.user_message
                   for e in instance.all_logs(materialized.run_id) if e.step_key == "shop_reconciliation")
        healthy |= checks(run(defs, instance, "shop_reconcile"))
        assert healthy and all(e.passed for e in healthy.values()), {k: e.metadata for k, e in healthy.items()
                                                                     if not e.passed}
        assert set(healthy) >= {("shop/capture", "capture_verified"), ("shop/changelog", "capture_lag"),
                                ("shop/changelog", "log_continuity"), ("shop/changelog", "consumers_within_retention"),
                                ("shop/orders", "reconciled"), ("shop/orders", "schema_drift")}
        assert healthy[("shop/orders", "reconciled")].metadata["source_rows"].value > 0
        # No limit configured: no max_lag_scn figure at all, rather than a -1 that plots as one.
        assert "max_lag_scn" not in healthy[("shop/changelog", "capture_lag")].metadata

        # Diverge the snapshot behind the pipeline's back: one row's value changes in Delta only.
        snap = DeltaSnapshot(tmp_path / "lake", "shop", "orders")
        DeltaTable(str(snap.path)).update(updates={"status": "'tampered'"}, predicate="id = 1")
        only_checks = defs.resolve_implicit_global_asset_job_def().get_subset(
            asset_selection=set(), asset_check_selection={dg.AssetCheckKey(dg.AssetKey(["shop", "orders"]),
                                                                            "reconciled")})
        diverged = checks(only_checks.execute_in_process(instance=instance, raise_on_error=False))
    bad = diverged[("shop/orders", "reconciled")]
    assert not bad.passed and bad.severity == dg.AssetCheckSeverity.ERROR
    assert bad.metadata["source_rows"].value == bad.metadata["snapshot_rows"].value
    assert bad.metadata["source_hash"].value != bad.metadata["snapshot_hash"].value
    # The mismatch is located: the one tampered key and column, with both values.
    assert bad.metadata["differing_buckets"].value == 1
    [difference] = bad.metadata["first_differences"].value
    assert difference["key"] == [1] and difference["what"] == "differs" and difference["columns"] == ["status"]
    assert difference["status"]["snapshot"] == "tampered" and difference["status"]["source"] != "tampered"
    assert bad.metadata["differing_columns"].value == "status"
    assert bad.description.startswith("key (1): status: source ")


def test_lag_continuity_drift_and_consumer_checks_each_fail_for_their_reason(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path, poll={"max_lag_scn": 0}, retention={"max_bytes": 1})
    workload.run(10)
    lake = tmp_path / "lake"

    def evaluate(instance, names: list[tuple[list[str], str]]):
        job = defs.resolve_implicit_global_asset_job_def().get_subset(
            asset_selection=set(), asset_check_selection={dg.AssetCheckKey(dg.AssetKey(a), n) for a, n in names})
        return checks(job.execute_in_process(instance=instance, raise_on_error=False))

    with dg.instance_for_test() as instance:
        run(defs, instance)
        MetaManager(lake, "shop").subscribe("billing")
        PullConsumer(lake, "shop", "billing")  # never acks: its cursor stays at the start
        for _ in range(2):
            workload.run(10)
            run(defs, instance)  # retention cuts the log behind the snapshots
        workload.run(5)  # not captured: lag
        import sqlite3

        with sqlite3.connect(tmp_path / "shop.db") as conn:
            conn.execute("ALTER TABLE orders ADD COLUMN channel TEXT")  # not in the snapshot
        log = ChangeLog(lake, "shop")
        log.segments_dir.joinpath("stray.avro").write_bytes(b"x")
        found = evaluate(instance, [(["shop", "changelog"], "capture_lag"), (["shop", "changelog"], "log_continuity"),
                                    (["shop", "changelog"], "consumers_within_retention"),
                                    (["shop", "orders"], "schema_drift")])
    assert not found[("shop/changelog", "capture_lag")].passed
    assert found[("shop/changelog", "capture_lag")].metadata["lag_scn"].value > 0
    assert found[("shop/changelog", "capture_lag")].metadata["max_lag_scn"].value == 0
    assert found[("shop/changelog", "log_continuity")].metadata["problems"].value == [
        "file stray.avro is not in the manifest"]
    assert not found[("shop/changelog", "consumers_within_retention")].passed
    billing = MetaManager(lake, "shop").cursor("billing")  # where it subscribed; the log has moved past it
    assert found[("shop/changelog", "consumers_within_retention")].metadata["problems"].value[0].startswith(
        f"billing at SCN {billing}, the log starts after")
    assert found[("shop/orders", "schema_drift")].metadata["problems"].value == [
        "orders.channel: in the source, not in the snapshot"]
    for failed in found.values():  # issue 54, item 5: the check's own page says what is wrong and the fix
        assert not failed.passed
        assert failed.description and ". Fix: " in failed.description, failed
        assert failed.metadata["fix"].value and failed.metadata["problem"].value in failed.description
    assert "run `databus validate --source shop`" in found[("shop/changelog", "log_continuity")].description
    # The drift check reads the snapshot's schema, not its rows: with every data file gone it still answers.
    orders = DeltaSnapshot(lake, "shop", "orders")
    files = list(orders.path.rglob("*.parquet"))
    assert files
    for data in files:
        data.unlink()
    config = load_config(tmp_path / "databus.yaml")
    assert schema_drift(config, config.source("shop"), "orders") == [
        "orders.channel: in the source, not in the snapshot"]


def test_checks_that_cannot_be_evaluated_fail_with_the_problem_and_fix(tmp_path: Path, spark) -> None:
    """A source that is gone: every check that asks it fails with the source's own problem and fix on the check's
    page, rather than Dagster's bare "Execution failed", the full comparison too."""
    _, defs, workload = setup(tmp_path)
    workload.run(5)
    with dg.instance_for_test() as instance:
        run(defs, instance)
        (tmp_path / "shop.db").rename(tmp_path / "moved.db")
        names = [(["shop", "capture"], "capture_verified"), (["shop", "changelog"], "capture_lag"),
                 (["shop", "orders"], "schema_drift"), (["shop", "orders"], "reconciled")]
        job = defs.resolve_implicit_global_asset_job_def().get_subset(
            asset_selection=set(), asset_check_selection={dg.AssetCheckKey(dg.AssetKey(a), n) for a, n in names})
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        found = checks(result)
    assert set(found) == {("/".join(a), n) for a, n in names}
    for evaluation in found.values():
        assert not evaluation.passed
        assert evaluation.description.startswith("could not be evaluated: "), evaluation
        assert "shop.db" in evaluation.description and ". Fix: " in evaluation.description
        assert evaluation.metadata["error"].value and evaluation.metadata["fix"].value


def test_status_prints_positions_lag_and_consumers(tmp_path: Path, spark, capsys) -> None:
    path, defs, workload = setup(tmp_path, retention={"max_bytes": 1})
    workload.run(10)
    lake = tmp_path / "lake"
    with dg.instance_for_test() as instance:
        run(defs, instance)
        MetaManager(lake, "shop").subscribe("billing")  # never acks
        MetaManager(lake, "shop").subscribe("search")
        for _ in range(2):
            workload.run(10)
            run(defs, instance)  # retention cuts the log behind the snapshots
    search = PullConsumer(lake, "shop", "search")  # keeps up with what the log still holds
    search.meta._store("search", {**search.meta._require("search"),
                                  "cursor": str(ChangeLog(lake, "shop").manifest().start_scn)})
    search = PullConsumer(lake, "shop", "search")
    while (batch := search.get_without_ack(batch_size=1000)).id != -1:
        search.ack(batch.id)
    capsys.readouterr()
    assert cli(["--config", str(path), "status"]) == 0
    lines = {line.split()[0] + (" " + line.split()[1] if line.split()[0] == "consumer" else ""): line
             for line in capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]}  # the table, not the legend
    log = ChangeLog(lake, "shop")
    assert lines["shop"].split()[1] == str(log.checkpoint().scn)
    assert lines["orders"].split()[1] == str(DeltaSnapshot(lake, "shop", "orders").applied_scn())
    assert "behind retention" in lines["consumer billing"]
    assert lines["consumer search"].split()[2] == str(MetaManager(lake, "shop").cursor("search"))
    assert "behind retention" not in lines["consumer search"]


def test_bootstrap_and_rebuild_runs_with_typed_run_config(tmp_path: Path, spark) -> None:
    path, defs, workload = setup(tmp_path)
    workload.run(15)
    with dg.instance_for_test() as instance:
        run(defs, instance)
        workload.run(10)
        run(defs, instance)
        orders = DeltaSnapshot(tmp_path / "lake", "shop", "orders")
        customers = DeltaSnapshot(tmp_path / "lake", "shop", "customers")
        boot_orders, boot_customers = orders.bootstrap_scn(), customers.bootstrap_scn()
        result = run(defs, instance, "shop_bootstrap", run_config={"tables": ["orders"]})
        meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in
                result.get_asset_materialization_events()}
        assert set(meta) == {"shop/orders"} and meta["shop/orders"]["bootstrap_rows"].value > 0
        # Every check the run planned has its result: none is left skipped for the tables it did not read.
        planned = {(e.dagster_event.event_specific_data.asset_key.to_user_string(),
                    e.dagster_event.event_specific_data.check_name) for e in instance.all_logs(
                        result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED)}
        assert planned == set(checks(result)) and ("shop/customers", "freshness") in planned
        assert orders.bootstrap_scn() > boot_orders and customers.bootstrap_scn() == boot_customers
        assert_snapshots_match(load_config(path))
        # Straight after the bootstrap, orders is at its bootstrap's version: restoring it is nothing to do.
        assert orders.version() == orders.bootstrap_version()
        assert run(defs, instance, "shop_rebuild").success  # the default config: every table
        assert orders.bootstrap_scn() == orders.applied_scn()
        assert_snapshots_match(load_config(path))

        DeltaTable(str(customers.path)).delete("id % 2 = 0")  # damage, then rebuild from the log
        rebuilt = run(defs, instance, "shop_rebuild", run_config={"tables": ["customers"]})
        assert rebuilt.success
        assert_snapshots_match(load_config(path))
        workload.run(10)
        run(defs, instance)  # capture continues from the right position after both
        assert_snapshots_match(load_config(path))


def synced(tmp_path: Path) -> dg.Definitions:
    """The shop's definitions once a sync (the local engine) has registered its tables' schemas in the log."""
    path, defs, _ = setup(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "merge": {"engine": "local"}}))
    assert cli(["--config", str(path), "sync", "--source", "shop"]) == 0
    return defs


@pytest.mark.parametrize(("job", "config", "refusal"), [
    ("shop_refresh", {}, 'Missing required config entry "tables"'),  # the Launchpad's prefill is no config
    ("shop_bootstrap", {}, 'Missing required config entry "tables"'),
    ("shop_refresh", {"tables": []}, "no table is named, and this job reads every row"),
    ("shop_bootstrap", {"tables": []}, "Fix: name the tables to read again, e.g. tables: [customers]"),
    ("shop_bootstrap", {"tables": ["invoices"]}, "not in enum type shop_table got invoices"),
    ("shop_rebuild", {"tables": ["invoices"]}, "not in enum type shop_table got invoices"),
    ("shop_refresh", {"tables": ["orders"], "where": "id = 1; DROP TABLE orders"}, "';'"),
    ("shop_refresh", {"tables": ["orders"], "where": "no_such_column = 1"}, "no_such_column"),
    ("shop_refresh", {"tables": ["orders"], "where": "  "}, "is empty"),
    ("shop_refresh", {"tables": ["orders"], "key_after": ["1", "2"]}, "whose key is (id)"),
    ("shop_refresh", {"tables": ["orders", "customers"], "where": "id = 1"}, "choose exactly one table"),
])
def test_ad_hoc_jobs_refuse_a_config_that_would_reread_everything_or_fail_in_the_run(
        tmp_path: Path, job: str, config: dict, refusal: str) -> None:
    """Issue 54, items 2 and 4: what the Launchpad shows before launch (the config schema: required tables from
    an enum of the source's), and what a launch refuses before any run starts (the job's config mapping, by the
    run's own checks of key bounds and filters, against the schema the change log registered)."""
    defs = synced(tmp_path)
    with pytest.raises(dg.DagsterInvalidConfigError) as refused:
        dg.validate_run_config(defs.resolve_job_def(job), config)
    assert refusal in str(refused.value)


def test_ad_hoc_jobs_accept_what_they_document(tmp_path: Path) -> None:
    defs = synced(tmp_path)
    op = dg.validate_run_config(defs.resolve_job_def("shop_refresh"), {
        "tables": ["orders"], "key_after": ["3"], "where": "status = 'new' AND id < 10"})["ops"]["shop_sync_step"]
    assert op["config"] == {"mode": "refresh", "tables": ["orders"], "key_after": ["3"], "key_through": None,
                            "where": "status = 'new' AND id < 10"}
    assert dg.validate_run_config(defs.resolve_job_def("shop_rebuild"), {})["ops"]["shop_sync_step"]["config"] == {
        "mode": "rebuild", "tables": [], "key_after": None, "key_through": None, "where": None}


def test_rebuild_is_refused_when_the_log_no_longer_reaches_the_bootstrap(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path, retention={"max_bytes": 1})
    workload.run(10)
    with dg.instance_for_test() as instance:
        run(defs, instance)
        for _ in range(3):
            workload.run(10)
            run(defs, instance)
        message = failed_rebuild(defs, instance, "orders")
    assert "cannot rebuild shop.orders" in message and "mode: bootstrap" in message


def test_rebuild_whose_bootstrap_files_were_vacuumed_says_so(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path)
    workload.run(10)
    with dg.instance_for_test() as instance:
        run(defs, instance)
        workload.run(20)
        run(defs, instance)  # merges rewrite the bootstrap's files
        orders = DeltaSnapshot(tmp_path / "lake", "shop", "orders")
        assert orders.version() != orders.bootstrap_version()
        DeltaTable(str(orders.path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        message = failed_rebuild(defs, instance, "orders")
    assert "cannot be restored" in message and "mode: bootstrap" in message
    assert "of the bootstrap's data files are gone (VACUUM or upkeep removed them)" in message, message


def test_lag_in_seconds_and_the_freshness_checks(tmp_path: Path, spark) -> None:
    _, defs, workload = setup(tmp_path, poll={"max_lag_seconds": 1.0})
    workload.run(10)
    orders, changelog = dg.AssetKey(["shop", "orders"]), dg.AssetKey(["shop", "changelog"])

    def evaluate(instance) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
        job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection={
            dg.AssetCheckKey(changelog, "capture_lag"), dg.AssetCheckKey(orders, "freshness")})
        return checks(job.execute_in_process(instance=instance, raise_on_error=False))

    with dg.instance_for_test() as instance:
        result = run(defs, instance)
        snap = {k: v.value for e in result.get_asset_materialization_events() if e.asset_key == orders
                for k, v in e.materialization.metadata.items()}
        log = {k: v.value for e in result.get_asset_materialization_events() if e.asset_key == changelog
               for k, v in e.materialization.metadata.items()}
        assert snap["lag_seconds"] == 0.0 and log["lag_seconds"] == 0.0
        fresh = evaluate(instance)
        assert all(e.passed for e in fresh.values())
        assert fresh[("shop/orders", "freshness")].metadata["lag_seconds"].value == 0.0

        # Captured but not merged, 1.5 s of commits apart: the snapshot is behind the log in time.
        workload.run(3)
        time.sleep(1.5)
        workload.run(3)
        sync = defs.resolve_job_def("shop_sync").get_subset(asset_selection={dg.AssetKey(["shop", "capture"]),
                                                                              changelog})
        sync.execute_in_process(instance=instance)
        time.sleep(1.2)
        workload.run(2)  # and the source is ahead of the log: capture lags by the time since its newest commit
        stale = evaluate(instance)
    behind = stale[("shop/orders", "freshness")]
    assert not behind.passed and behind.metadata["lag_seconds"].value >= 1.4
    assert behind.metadata["max_lag_seconds"].value == 1.0
    lag = stale[("shop/changelog", "capture_lag")]
    assert not lag.passed and lag.metadata["lag_seconds"].value >= 1.2 and lag.metadata["lag_scn"].value > 0
