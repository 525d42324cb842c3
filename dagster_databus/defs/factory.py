"""Builds the Definitions for a databus config."""

from __future__ import annotations

import dagster as dg

from dagster_databus.config import DatabusConfig
from dagster_databus.defs.assets import build_source_assets
from dagster_databus.defs.checks import build_reconcile_checks
from dagster_databus.defs.common import RESOURCE
from dagster_databus.defs.executor import databus_executor
from dagster_databus.defs.logical import build_logical_asset, build_logical_automation_sensor, build_logical_check
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.defs.schedules import (
    build_automation_sensor,
    build_poll_schedule,
    build_reconcile_job,
    build_reconcile_triggers,
    build_snapshot_jobs,
    build_source_job,
)
from dagster_databus.defs.sensors import build_alert_sensor
from dagster_databus.defs.upkeep import build_logical_upkeep_job, build_upkeep_job, build_upkeep_schedule


def build_definitions(config: DatabusConfig, resource: DatabusResource, executor: bool = True) -> dg.Definitions:
    """Every source's assets, checks, jobs, schedules and sensors, and the logical tables'; ``resource`` gives the
    steps the config. With ``executor``, every run of the code location (asset selections too) takes the databus
    executor; without (a component in a user's project, whose other jobs keep theirs), only the jobs built here."""
    assets: list[dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    jobs: list[dg.JobDefinition] = []
    schedules: list[dg.ScheduleDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    for source in config.sources:
        assets += build_source_assets(source, config.merge.engine)
        checks.append(build_reconcile_checks(source))
        job = build_source_job(source)
        reconcile = build_reconcile_job(source)
        upkeep = build_upkeep_job(source)
        jobs += [job, reconcile, upkeep, *build_snapshot_jobs(config, source)]
        schedules.append(build_poll_schedule(source, job))
        schedules += build_upkeep_schedule(source.name, source.upkeep, upkeep, "sources[]")
        sensors.append(build_automation_sensor(source))
        reconcile_schedules, reconcile_sensors = build_reconcile_triggers(source, reconcile)
        schedules += reconcile_schedules
        sensors += reconcile_sensors
        alerts = build_alert_sensor(source, job)  # a source whose database signals new commits
        if alerts is not None:
            sensors.append(alerts)
    assets += [build_logical_asset(logical) for logical in config.logical_tables]
    checks += [build_logical_check(logical) for logical in config.logical_tables]
    for logical in config.logical_tables:
        upkeep = build_logical_upkeep_job(logical)
        jobs.append(upkeep)
        schedules += build_upkeep_schedule(logical.name, logical.upkeep, upkeep, "logical_tables[]")
    if config.logical_tables:
        sensors.append(build_logical_automation_sensor())
    return dg.Definitions(
        assets=assets, asset_checks=checks, jobs=jobs, schedules=schedules, sensors=sensors,
        resources={RESOURCE: resource},
        executor=databus_executor if executor else None,  # one process per run unless its steps can run side by side
    )
