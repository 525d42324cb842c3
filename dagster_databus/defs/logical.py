"""One asset per logical table (sharded physical tables merged into one Delta snapshot), downstream
of its parts' snapshots, and the sensor that runs them when a part's snapshot changes."""

import dagster as dg
from dagster import AssetExecutionContext

from dagster_databus.config import LogicalTableConfig
from dagster_databus.dataplane.logical import LogicalSnapshot
from dagster_databus.defs.assets import CODE_VERSION, column_schema
from dagster_databus.defs.common import Metadata, clear_errors, pool, snapshot_key
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.sync.logical.compare import compare_parts
from dagster_databus.sync.logical.sync import LogicalSyncResult, sync_logical

GROUP = "logical"


def logical_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([GROUP, name])


def build_logical_asset(logical: LogicalTableConfig) -> dg.AssetsDefinition:
    name = logical.name
    parts = ", ".join(f"`{p.source}.{p.table}` ({p.label})" for p in logical.parts)

    @dg.asset(
        key=logical_key(name), group_name=GROUP, kinds={"delta"}, code_version=CODE_VERSION,
        deps=[snapshot_key(p.source, p.table) for p in logical.parts],
        description=f"Logical Delta table `{name}` merged from the shards {parts}; key (`{logical.shard_column}`, "
                    "primary key), `__part` names each row's shard. Each shard's applied SCN is kept apart, as "
                    "its own Delta transaction id.",
        tags={"databus/role": "logical", "databus/logical_table": name}, pool=pool(GROUP, name),
        automation_condition=dg.AutomationCondition.eager(),
    )
    def logical_table(context: AssetExecutionContext, databus: DatabusResource) -> dg.MaterializeResult[None]:
        with clear_errors(context):
            result = sync_logical(databus.config(), name, progress=context.log.info, spark=databus.spark)
        return dg.MaterializeResult(metadata={
            **_metadata(result), "dagster/column_schema": column_schema(LogicalSnapshot(databus.config().lake, name))})

    return logical_table


def build_logical_check(logical: LogicalTableConfig) -> dg.AssetChecksDefinition:
    name = logical.name

    @dg.asset_check(asset=logical_key(name), name="parts_match_snapshots",
                    description="Each shard's rows in the logical table equal its physical snapshot, for the shards "
                                "whose snapshot is at the same SCN (warns when none is).")
    def parts_match_snapshots(databus: DatabusResource) -> dg.AssetCheckResult:
        parts = compare_parts(databus.config(), name)
        compared = [p for p in parts if p.comparable]
        differing = [p for p in compared if not p.equal]
        metadata: Metadata = {f"scn/{p.label}": dg.MetadataValue.text(
            f"{p.logical_scn} (snapshot {p.physical_scn})") for p in parts}
        metadata.update({f"differences/{p.label}": dg.MetadataValue.json(list(p.comparison.examples))
                         for p in differing if p.comparison is not None})
        return dg.AssetCheckResult(
            passed=bool(compared) and not differing,
            severity=dg.AssetCheckSeverity.ERROR if differing else dg.AssetCheckSeverity.WARN,
            description=None if compared else "no shard's snapshot is at the logical table's SCN for it yet",
            metadata=metadata)

    return parts_match_snapshots


def build_logical_automation_sensor() -> dg.AutomationConditionSensorDefinition:
    """Evaluates the logical tables' eager conditions: a part's new snapshot triggers a sync."""
    return dg.AutomationConditionSensorDefinition(
        name="logical_merge_automation", target=dg.AssetSelection.groups(GROUP),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Syncs logical tables whenever the snapshot of one of their parts is materialized.")


def _metadata(r: LogicalSyncResult) -> Metadata:
    metadata: Metadata = {f"applied_scn/{p.label}": dg.MetadataValue.text(str(p.to_scn)) for p in r.parts}
    metadata.update({f"events/{p.label}": p.events for p in r.parts})
    metadata.update({
        "events": r.events,
        "rows_inserted": r.counts.inserted, "rows_updated": r.counts.updated, "rows_deleted": r.counts.deleted,
        "loaded": dg.MetadataValue.text(r.load_reason or "-"),
        "dagster/row_count": r.row_count,
        **({"delta_version": r.delta_version} if r.delta_version is not None else {}),
        "commits": r.commits, "duration_s": round(r.duration_s, 3),
    })
    return metadata
