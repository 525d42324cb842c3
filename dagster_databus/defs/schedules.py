"""Per source: a sync job and its poll schedule (stopped until a user turns it on), ad-hoc snapshot jobs,
and a reconcile job on a schedule of its own (the full comparison with the source is too heavy for
every sync)."""

from __future__ import annotations

import dagster as dg

from dagster_databus.config import SourceConfig
from dagster_databus.defs.assets import sync_op_name
from dagster_databus.defs.executor import databus_executor
from dagster_databus.defs.logs import job_config


def sync_job_name(source: str) -> str:
    return f"{source}_sync"


def reconciled_checks(source: SourceConfig) -> dg.AssetSelection:
    return dg.AssetSelection.checks(*[dg.AssetCheckKey(dg.AssetKey([source.name, t.name]), "reconciled")
                                      for t in source.tables])


def build_source_job(source: SourceConfig) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        name=sync_job_name(source.name),
        selection=dg.AssetSelection.groups(source.name) - reconciled_checks(source),
        description=f"Install/verify capture, poll the change log and merge the snapshots of `{source.name}`.",
        tags={"databus/source": source.name}, config=job_config(), executor_def=databus_executor,
    )


def build_poll_schedule(source: SourceConfig, job: dg.UnresolvedAssetJobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{source.name}_poll", job=job, cron_schedule=source.poll.cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Polls `{source.name}` on `{source.poll.cron}` (sources[].poll.cron). Off by default.",
    )


def build_snapshot_jobs(source: SourceConfig) -> list[dg.UnresolvedAssetJobDefinition]:
    """Ad-hoc bootstrap, rebuild and refresh runs of a source's snapshots, launched with typed run config."""
    selection = dg.AssetSelection.assets(*[dg.AssetKey([source.name, t.name]) for t in source.tables])
    descriptions = {
        "bootstrap": f"Re-read chosen tables of `{source.name}` from the source (run config `tables`; empty = "
                     "all) into fresh snapshots; capture continues from its own checkpoint.",
        "rebuild": f"Rebuild snapshots of `{source.name}` from their last bootstrap by replaying the retained "
                   "change log (refused when the log no longer reaches back that far).",
        "refresh": f"Read chosen rows of one table of `{source.name}` again (run config `tables`, and `key_after`, "
                   "`key_through` (one value per key column) and/or `where` (a condition in the source's SQL)) and "
                   "fold them into the kept snapshot: repairs those rows; the log and the rest are untouched.",
    }
    return [
        dg.define_asset_job(
            name=f"{source.name}_{mode}", selection=selection, description=description,
            config=job_config({"ops": {sync_op_name(source.name): {"config": {"mode": mode, "tables": []}}}}),
            tags={"databus/source": source.name, "databus/run": mode}, executor_def=databus_executor)
        for mode, description in descriptions.items()
    ]


def build_automation_sensor(source: SourceConfig) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the snapshots' eager conditions: a new change-log materialization triggers a merge."""
    return dg.AutomationConditionSensorDefinition(
        name=f"{source.name}_merge_automation", target=dg.AssetSelection.groups(source.name),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Merges `{source.name}` snapshots whenever its change log is materialized.")


def build_reconcile_job(source: SourceConfig) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        name=f"{source.name}_reconcile", selection=reconciled_checks(source),
        description=f"Compare every snapshot of `{source.name}` with the source at one SCN (the `reconciled` "
                    "checks): fingerprints computed where the data lives, differing keys named.",
        tags={"databus/source": source.name, "databus/run": "reconcile"}, config=job_config(),
        executor_def=databus_executor)


def build_reconcile_triggers(source: SourceConfig, job: dg.UnresolvedAssetJobDefinition
                             ) -> tuple[list[dg.ScheduleDefinition], list[dg.SensorDefinition]]:
    """A cron schedule (sources[].reconcile.cron, stopped like the poll schedule) and a sensor that runs
    the job after every N successful syncs (sources[].reconcile.every_syncs)."""
    schedules = [dg.ScheduleDefinition(
        name=f"{source.name}_reconcile", job=job, cron_schedule=source.reconcile.cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Reconciles `{source.name}` on `{source.reconcile.cron}` (sources[].reconcile.cron).",
    )] if source.reconcile.cron else []
    every = source.reconcile.every_syncs
    if every is None:
        return schedules, []
    sync = sync_job_name(source.name)

    @dg.sensor(name=f"{source.name}_reconcile_every_syncs", job=job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Reconciles `{source.name}` after every {every} successful `{sync}` runs "
                           "(sources[].reconcile.every_syncs).")
    def every_syncs(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        done = context.instance.get_runs_count(dg.RunsFilter(job_name=sync, statuses=[dg.DagsterRunStatus.SUCCESS]))
        last = int(context.cursor) if context.cursor else 0
        if done - last < every:
            return dg.SensorResult(skip_reason=f"{done - last} of {every} syncs since the last reconciliation")
        return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"after-sync-{done}")], cursor=str(done))

    return schedules, [every_syncs]
