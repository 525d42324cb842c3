"""One sync job and one poll schedule per source (stopped until a user turns it on)."""

from __future__ import annotations

import dagster as dg

from dagster_databus.config import SourceConfig


def sync_job_name(source: str) -> str:
    return f"{source}_sync"


def build_source_job(source: SourceConfig) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        name=sync_job_name(source.name),
        selection=dg.AssetSelection.groups(source.name),
        description=f"Install/verify capture, poll the change log and merge the snapshots of `{source.name}`.",
        tags={"databus/source": source.name},
    )


def build_poll_schedule(source: SourceConfig, job: dg.UnresolvedAssetJobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{source.name}_poll", job=job, cron_schedule=source.poll.cron,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Polls `{source.name}` on `{source.poll.cron}` (sources[].poll.cron). Off by default.",
    )
