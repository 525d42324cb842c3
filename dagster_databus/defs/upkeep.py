"""The upkeep jobs (``sync.upkeep``) and their schedules: one per source, for its snapshot and history
tables, and one per logical table.

A source's step runs in its sync pool, so it never runs beside a merge of the same source launched from
Dagster; a logical table's in that table's pool. Each table's figures are an observation on its asset
(a history table's, prefixed ``history_``, on its snapshot's asset).
"""

from collections.abc import Iterator

import dagster as dg

from dagster_databus.config import LogicalTableConfig, SourceConfig, UpkeepConfig
from dagster_databus.defs.common import Metadata, clear_errors, pool, snapshot_key
from dagster_databus.defs.executor import databus_executor
from dagster_databus.defs.logs import job_config
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.sync.upkeep import UpkeepResult


def upkeep_job_name(source: str) -> str:
    return f"{source}_upkeep"


def logical_upkeep_job_name(name: str) -> str:
    return f"{name}_logical_upkeep"


def _figures(r: UpkeepResult) -> Metadata:
    prefix = "history_" if r.kind == "history" else ""
    return {f"{prefix}{k}": v for k, v in {
        "files_before": r.files_before, "files_after": r.files_after,
        "bytes_before": r.bytes_before, "bytes_after": r.bytes_after,
        "bytes_reclaimed": r.bytes_before - r.bytes_after, "files_compacted": r.compacted,
        "files_written": r.written, "files_retyped": r.retyped, "files_vacuumed": r.vacuumed,
        "vacuum_retain_hours": r.retain_hours, "checkpoint_version": r.checkpoint_version}.items()}


def build_upkeep_job(source: SourceConfig) -> dg.JobDefinition:
    name = source.name

    @dg.op(name=f"{name}_upkeep_step", pool=pool(name, "sync"), tags={"databus/source": name}, out={})
    def step(context: dg.OpExecutionContext, databus: DatabusResource) -> Iterator[dg.AssetObservation]:
        from dagster_databus.sync.upkeep import upkeep_source

        with clear_errors(context):
            for r in upkeep_source(databus.config(), name, databus.spark, progress=context.log.info):
                yield dg.AssetObservation(asset_key=snapshot_key(name, r.table), metadata=_figures(r))

    @dg.job(name=upkeep_job_name(name), tags={"databus/source": name, "databus/run": "upkeep"},
            config=job_config(), executor_def=databus_executor,
            description=f"Upkeep of `{name}`'s snapshot and history tables: small files joined in key order, "
                        "files older than upkeep.retain_hours vacuumed (never the last bootstrap's, which rebuild "
                        "needs), the Delta log checkpointed. Figures are observations on each snapshot asset.")
    def job() -> None:
        step()

    return job


def build_logical_upkeep_job(logical: LogicalTableConfig) -> dg.JobDefinition:
    from dagster_databus.defs.logical import GROUP, logical_key

    name = logical.name

    @dg.op(name=f"{name}_logical_upkeep_step", pool=pool(GROUP, name), tags={"databus/logical_table": name},
           out={})
    def step(context: dg.OpExecutionContext, databus: DatabusResource) -> Iterator[dg.AssetObservation]:
        from dagster_databus.sync.upkeep import upkeep_logical

        with clear_errors(context):
            result = upkeep_logical(databus.config(), name, databus.spark, progress=context.log.info)
            if result is not None:
                yield dg.AssetObservation(asset_key=logical_key(name), metadata=_figures(result))

    @dg.job(name=logical_upkeep_job_name(name), tags={"databus/logical_table": name, "databus/run": "upkeep"},
            config=job_config(), executor_def=databus_executor,
            description=f"Upkeep of logical table `{name}`: small files joined in key order, files older than "
                        "upkeep.retain_hours vacuumed, the Delta log checkpointed.")
    def job() -> None:
        step()

    return job


def build_upkeep_schedule(name: str, upkeep: UpkeepConfig, job: dg.JobDefinition, where: str
                          ) -> list[dg.ScheduleDefinition]:
    """``job`` on ``upkeep.cron`` (stopped until turned on); none without a cron. ``where``: the config field."""
    if not upkeep.cron:
        return []
    return [dg.ScheduleDefinition(
        name=job.name, job=job, cron_schedule=upkeep.cron, default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Keeps {name}'s tables up on {upkeep.cron} ({where}.upkeep.cron).")]
