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


def build_snapshot_jobs(source: SourceConfig) -> list[dg.UnresolvedAssetJobDefinition]:
    """Ad-hoc bootstrap and rebuild runs of a source's snapshots, launched with typed run config."""
    selection = dg.AssetSelection.assets(*[dg.AssetKey([source.name, t.name]) for t in source.tables])
    descriptions = {
        "bootstrap": f"Re-read chosen tables of `{source.name}` from the source (run config `tables`; empty = "
                     "all) into fresh snapshots; capture continues from its own checkpoint.",
        "rebuild": f"Rebuild snapshots of `{source.name}` from their last bootstrap by replaying the retained "
                   "change log (refused when the log no longer reaches back that far).",
    }
    return [
        dg.define_asset_job(
            name=f"{source.name}_{mode}", selection=selection, description=description,
            config={"ops": {f"{source.name}_snapshots": {"config": {"mode": mode, "tables": []}}}},
            tags={"databus/source": source.name, "databus/run": mode})
        for mode, description in descriptions.items()
    ]


def build_automation_sensor(source: SourceConfig) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the snapshots' eager conditions: a new change-log materialization triggers a merge."""
    return dg.AutomationConditionSensorDefinition(
        name=f"{source.name}_merge_automation", target=dg.AssetSelection.groups(source.name),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Merges `{source.name}` snapshots whenever its change log is materialized.")
