"""The upkeep job of a source's snapshot tables (``snapshot.upkeep``) and its schedule.

The step runs in the source's sync pool, so it never runs beside a merge of the same source launched from
Dagster; each table's figures are an observation on its snapshot asset.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg

from dagster_databus.config import SourceConfig
from dagster_databus.defs.common import RESOURCE, clear_errors, pool, snapshot_key


def upkeep_job_name(source: str) -> str:
    return f"{source}_upkeep"


def build_upkeep_job(source: SourceConfig) -> dg.JobDefinition:
    name = source.name

    @dg.op(name=f"{name}_upkeep_step", required_resource_keys={RESOURCE}, pool=pool(name, "sync"),
           tags={"databus/source": name}, out={})
    def step(context) -> Iterator[dg.AssetObservation]:  # unannotated: Dagster reads the annotation
        from dagster_databus.snapshot.upkeep import upkeep_source

        databus = getattr(context.resources, RESOURCE)
        with clear_errors(context):
            for r in upkeep_source(databus.config(), name, databus.spark, progress=context.log.info):
                yield dg.AssetObservation(asset_key=snapshot_key(name, r.table), metadata={
                    "files_before": r.files_before, "files_after": r.files_after,
                    "bytes_before": r.bytes_before, "bytes_after": r.bytes_after,
                    "bytes_reclaimed": r.bytes_before - r.bytes_after, "files_compacted": r.compacted,
                    "files_written": r.written, "files_vacuumed": r.vacuumed,
                    "vacuum_retain_hours": r.retain_hours, "checkpoint_version": r.checkpoint_version})

    @dg.job(name=upkeep_job_name(name), tags={"databus/source": name, "databus/run": "upkeep"},
            description=f"Upkeep of `{name}`'s snapshot tables: small files joined in key order, files older "
                        "than upkeep.retain_hours vacuumed (never the last bootstrap's, which rebuild needs), the "
                        "Delta log checkpointed. Figures are observations on each snapshot asset.")
    def job() -> None:
        step()

    return job


def build_upkeep_schedule(source: SourceConfig, job: dg.JobDefinition) -> list[dg.ScheduleDefinition]:
    if not source.upkeep.cron:
        return []
    return [dg.ScheduleDefinition(
        name=upkeep_job_name(source.name), job=job, cron_schedule=source.upkeep.cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Keeps `{source.name}`'s snapshot tables up on `{source.upkeep.cron}` (sources[].upkeep.cron).")]
