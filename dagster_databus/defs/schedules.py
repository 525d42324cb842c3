"""Per source: a sync job and its poll schedule (stopped until a user turns it on), ad-hoc snapshot jobs,
and a reconcile job on a schedule of its own (the full comparison with the source is too heavy for
every sync)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.defs.assets import KEY_AFTER, KEY_THROUGH, WHERE, sync_op_name
from dagster_databus.defs.executor import databus_executor
from dagster_databus.defs.logs import LOG_LEVEL_ENV, default_level, job_config
from dagster_databus.errors import ConfigError


def sync_job_name(source: str) -> str:
    return f"{source}_sync"


def table_checks(source: SourceConfig, name: str) -> dg.AssetSelection:
    """The check called ``name`` of every snapshot of ``source``."""
    return dg.AssetSelection.checks(*[dg.AssetCheckKey(dg.AssetKey([source.name, t.name]), name)
                                      for t in source.tables])


def build_source_job(source: SourceConfig) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        name=sync_job_name(source.name),
        selection=dg.AssetSelection.groups(source.name) - table_checks(source, "reconciled"),
        description=f"Install/verify capture, poll the change log and merge the snapshots of `{source.name}`.",
        tags={"databus/source": source.name}, config=job_config(), executor_def=databus_executor,
    )


def build_poll_schedule(source: SourceConfig, job: dg.UnresolvedAssetJobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{source.name}_poll", job=job, cron_schedule=source.poll.cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Polls {source.name} on {source.poll.cron} (sources[].poll.cron). Off by default.",
    )


def build_snapshot_jobs(config: DatabusConfig, source: SourceConfig) -> list[dg.UnresolvedAssetJobDefinition]:
    """Ad-hoc bootstrap, rebuild and refresh runs of a source's snapshots, launched with typed run config
    (``snapshot_config``). They select the snapshots and the checks their step runs; not the full comparison
    (the ``<source>_reconcile`` job) nor the rolling verification (a merge's), which would only be planned and
    then skipped for the tables a run leaves alone."""
    selection = dg.AssetSelection.assets(*[dg.AssetKey([source.name, t.name]) for t in source.tables]) \
        - table_checks(source, "reconciled") - table_checks(source, "verified")
    descriptions = {
        "bootstrap": f"Re-read the tables named in run config `tables` (at least one) of `{source.name}` from the "
                     "source into fresh snapshots; capture continues from its own checkpoint.",
        "rebuild": f"Rebuild snapshots of `{source.name}` from their last bootstrap by replaying the retained "
                   "change log (run config `tables`; empty = all); refused when the log no longer reaches back "
                   "that far.",
        "refresh": f"Read chosen rows of tables of `{source.name}` again (run config `tables`, at least one; for one "
                   "table also `key_after`, `key_through` (one value per key column) and/or `where` (a condition "
                   "in the source's SQL)) and fold them into the kept snapshot: repairs those rows; the log and "
                   "the rest are untouched.",
    }
    return [
        dg.define_asset_job(
            name=f"{source.name}_{mode}", selection=selection, description=description,
            config=snapshot_config(config, source, mode),
            tags={"databus/source": source.name, "databus/run": mode}, executor_def=databus_executor)
        for mode, description in descriptions.items()
    ]


def snapshot_config(config: DatabusConfig, source: SourceConfig, mode: str) -> dg.ConfigMapping:
    """The run config of an ad-hoc snapshot job, as the Launchpad shows and checks it before launch: `tables`
    from the source's tables (an enum), required where the run re-reads the source (bootstrap, refresh), so no
    default click reads every row of every table; the refresh's key bounds and filter checked at launch by the
    run's own checks (``capture.check_row_choice``), so a bad one never starts a run."""
    table = dg.Enum(f"{source.name}_table", [dg.EnumValue(t.name) for t in source.tables])
    rereads = mode != "rebuild"
    fields: dict[str, dg.Field] = {
        "tables": dg.Field([table], is_required=True, description="the tables to read again (at least one)")
        if rereads else dg.Field([table], default_value=[], description="limit to these tables (empty: all)"),
        "log_level": dg.Field(str, default_value=default_level(),
                              description=f"the console's log level (default: {LOG_LEVEL_ENV}, else INFO)"),
    }
    if mode == "refresh":
        fields |= {
            "key_after": dg.Field([str], is_required=False, description=KEY_AFTER),
            "key_through": dg.Field([str], is_required=False, description=KEY_THROUGH),
            "where": dg.Field(str, is_required=False, description=WHERE),
        }

    def run_config(values: dict[str, Any]) -> dict[str, Any]:
        tables = list(values["tables"])
        op: dict[str, Any] = {"mode": mode, "tables": tables}
        try:
            if rereads and not tables:
                raise ConfigError("tables", "no table is named, and this job reads every row of the tables it "
                                  "names from the source", f"name the tables to read again, e.g. tables: "
                                  f"[{source.tables[0].name}]")
            if mode == "refresh":
                chosen: dict[str, Any] = {k: values[k] for k in ("key_after", "key_through", "where") if k in values}
                capture.check_row_choice(config, source.name, tables, chosen.get("key_after"),
                                         chosen.get("key_through"), chosen.get("where"))
                op |= chosen
        except ConfigError as exc:  # Dagster's own config error, so the launch shows this message and no trace
            raise dg.DagsterInvalidConfigError(  # type: ignore[no-untyped-call]
                f"run config of {source.name}_{mode}: {exc}", [], values) from None
        return job_config({"ops": {sync_op_name(source.name): {"config": op}}}, values["log_level"])

    return dg.ConfigMapping(config_fn=run_config, config_schema=fields)


def build_automation_sensor(source: SourceConfig) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the snapshots' eager conditions: a new change-log materialization triggers a merge."""
    return dg.AutomationConditionSensorDefinition(
        name=f"{source.name}_merge_automation", target=dg.AssetSelection.groups(source.name),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Merges {source.name} snapshots whenever its change log is materialized.")


def build_reconcile_job(source: SourceConfig) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        name=f"{source.name}_reconcile", selection=table_checks(source, "reconciled"),
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
        description=f"Reconciles {source.name} on {source.reconcile.cron} (sources[].reconcile.cron).",
    )] if source.reconcile.cron else []
    every = source.reconcile.every_syncs
    if every is None:
        return schedules, []
    sync = sync_job_name(source.name)

    @dg.sensor(name=f"{source.name}_reconcile_every_syncs", job=job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Reconciles {source.name} after every {every} successful {sync} runs "
                           "(sources[].reconcile.every_syncs).")
    def every_syncs(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        done = context.instance.get_runs_count(dg.RunsFilter(job_name=sync, statuses=[dg.DagsterRunStatus.SUCCESS]))
        last = int(context.cursor) if context.cursor else 0
        if done - last < every:
            return dg.SensorResult(skip_reason=f"{done - last} of {every} syncs since the last reconciliation")
        return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"after-sync-{done}")], cursor=str(done))

    return schedules, [every_syncs]
