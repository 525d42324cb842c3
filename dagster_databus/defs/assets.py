"""Per source: a capture-install asset, a change-log asset and one multi-asset of snapshots.

The snapshots of a source are one multi-asset so that a run over the source's graph starts
Spark once (Dagster's default executor runs each step in its own process).
"""

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Literal

import dagster as dg
from dagster import AssetExecutionContext
from pydantic import Field

from dagster_databus import pipeline
from dagster_databus.config import SourceConfig
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import ConcurrentRunError, DatabusError, SourceUnavailableError
from dagster_databus.log.store import ChangeLog, Manifest
from dagster_databus.pipeline import CaptureResult
from dagster_databus.snapshot.delta import DeltaFolder, DeltaSnapshot
from dagster_databus.snapshot.merge import TableSyncResult, engine_for, sync_table

RESOURCE = "databus"
INSTALL_DESCRIPTIONS = {
    "sqlite": "Installs and verifies change capture in SQLite source `{name}`: the txlog, epoch counter and "
              "per-table triggers. Re-running changes nothing.",
    "oracle": "Installs (idempotently) and verifies Databus capture in Oracle source `{name}`: sy$txlog, "
              "sy$sources, sync_core, sync_alert, J_COALESCE_LOG, J_CALL_SIGNAL, and per table the txn column, "
              "triggers, delete shadow table and sy$ view. Reports missing or INVALID objects by name.",
    "mysql": "Verifies that MySQL source `{name}` is ready for binlog capture (log_bin, ROW format, FULL row "
             "image and metadata, replica id, privileges) and records where capture starts.",
}


def capture_key(source: str) -> dg.AssetKey:
    return dg.AssetKey([source, "capture"])


def changelog_key(source: str) -> dg.AssetKey:
    return dg.AssetKey([source, "changelog"])


def snapshot_key(source: str, table: str) -> dg.AssetKey:
    return dg.AssetKey([source, table])


TRANSIENT = (SourceUnavailableError, ConcurrentRunError)
MAX_RETRIES = 3
BASE_BACKOFF_S = 5


class SnapshotRunConfig(dg.Config):
    """Run config of a source's snapshot step (typed in the launchpad)."""

    mode: Literal["merge", "bootstrap", "rebuild"] = Field(
        default="merge", description="merge: apply the log; bootstrap: re-read the tables from the source first; "
                                     "rebuild: restore each snapshot to its last bootstrap and replay the log")
    tables: list[str] = Field(default_factory=list, description="limit to these tables (default: all selected)")


def pool(source: str, step: str) -> str:
    return f"databus_{source}_{step}"


@contextlib.contextmanager
def clear_errors(context: Any = None) -> Iterator[None]:
    """Show the capture layer's own message at the top of a failed run, not a traceback; retry
    transient source errors (unreachable server, a concurrent run) with exponential backoff."""
    try:
        yield
    except TRANSIENT as exc:
        attempt = getattr(context, "retry_number", MAX_RETRIES) if context is not None else MAX_RETRIES
        if attempt < MAX_RETRIES:
            raise dg.RetryRequested(max_retries=MAX_RETRIES, seconds_to_wait=BASE_BACKOFF_S * 2 ** attempt) from exc
        raise dg.Failure(description=str(exc), metadata={"problem": exc.problem, "fix": exc.fix}) from exc
    except DatabusError as exc:
        raise dg.Failure(description=str(exc), metadata={"problem": exc.problem, "fix": exc.fix}) from exc


def build_source_assets(source: SourceConfig) -> list[dg.AssetsDefinition]:
    name = source.name
    kinds = {source.kind}
    owners = list(source.owners)
    tags = {"databus/source": name, "databus/kind": source.kind, **source.tags}

    @dg.asset(
        key=capture_key(name), group_name=name, kinds=kinds, required_resource_keys={RESOURCE},
        description=INSTALL_DESCRIPTIONS[source.kind].format(name=name),
        tags={**tags, "databus/role": "install"}, owners=owners, pool=pool(name, "capture"),
    )
    def capture_install(context: AssetExecutionContext) -> dg.MaterializeResult:
        databus = getattr(context.resources, RESOURCE)
        with clear_errors(context):
            report = pipeline.install(databus.config(), name)
        context.log.info(f"capture in {name}: updated {list(report.changed)}, unchanged {list(report.unchanged)}")
        return dg.MaterializeResult(metadata={
            "epoch": report.epoch, "capture_version": report.version,
            "tables_updated": dg.MetadataValue.json(list(report.changed)),
            "tables_unchanged": dg.MetadataValue.json(list(report.unchanged)),
        })

    @dg.asset(
        key=changelog_key(name), group_name=name, kinds={"avro"}, deps=[capture_key(name)],
        required_resource_keys={RESOURCE},
        description=f"The durable change log of `{name}`: whole transaction windows since the last "
                    "checkpoint, as Avro segments under <lake>/log/. Each run polls up to the source's "
                    "position at its start.",
        tags={**tags, "databus/role": "capture"}, owners=owners, pool=pool(name, "capture"),
    )
    def changelog(context: AssetExecutionContext) -> dg.MaterializeResult:
        databus = getattr(context.resources, RESOURCE)
        with clear_errors(context):
            result = pipeline.capture(databus.config(), name, progress=context.log.info)
            manifest = ChangeLog(databus.config().lake, name).manifest()
        now_ms = int(time.time() * 1000)
        return dg.MaterializeResult(metadata={
            "scn_range": f"{result.since}..{result.until}",
            "scn_from": dg.MetadataValue.text(str(result.since)),
            "scn_to": dg.MetadataValue.text(str(result.until)),
            "source_scn": dg.MetadataValue.text(str(result.source_hwm)),
            "windows": result.windows, "events": result.events, "segments_written": result.segments,
            "inserts": result.events_by_op.get("i", 0), "updates": result.events_by_op.get("u", 0),
            "deletes": result.events_by_op.get("d", 0),
            "events_by_table": dg.MetadataValue.json(result.events_by_table),
            "lag_scn": result.lag_scn,
            **_capture_lag_seconds(result, now_ms),
            "log_segments": len(manifest.segments),
            "log_bytes": sum(s.bytes for s in manifest.segments),
            "epoch": result.epoch, "duration_s": round(result.duration_s, 3),
            **_failover_metadata(result, manifest),
        })

    specs = [
        dg.AssetSpec(
            snapshot_key(name, t.name), group_name=name, kinds={"delta", "spark"}, deps=[changelog_key(name)],
            description=f"Delta snapshot of `{name}.{t.name}` (key {', '.join(t.primary_key)}): the latest row "
                        "per key with `__scn`, `__op`, `__commit_ts`; the bootstrap store for consumers.",
            tags={**tags, "databus/role": "snapshot", "databus/table": t.name}, owners=owners,
            automation_condition=dg.AutomationCondition.eager(),
        )
        for t in source.tables
    ]

    @dg.multi_asset(name=f"{name}_snapshots", specs=specs, can_subset=True, required_resource_keys={RESOURCE},
                    pool=pool(name, "merge"))
    def snapshots(context: AssetExecutionContext, config: SnapshotRunConfig) -> Iterator[dg.MaterializeResult]:
        databus = getattr(context.resources, RESOURCE)
        lake_config = databus.config()
        unknown = [t for t in config.tables if t not in {t.name for t in source.tables}]
        if unknown:
            raise dg.Failure(description=f"run config names tables {unknown} that source {name!r} does not "
                                         f"capture; use some of: {[t.name for t in source.tables]}")
        tables = [t.name for t in source.tables if snapshot_key(name, t.name) in context.selected_asset_keys
                  and (not config.tables or t.name in config.tables)]
        with clear_errors(context):
            # databus.spark starts Spark only if the engine runs a job (not the local engine).
            engine = engine_for(databus.spark, lake_config)
            for table in tables:
                result = sync_table(lake_config, source, table, engine, progress=context.log.info, mode=config.mode)
                yield dg.MaterializeResult(asset_key=snapshot_key(name, table), metadata={
                    **_snapshot_metadata(result),
                    "dagster/column_schema": column_schema(DeltaSnapshot(lake_config.lake, name, table),
                                                           ChangeLog(lake_config.lake, name).schemas.latest(table))})
            retention = pipeline.enforce_retention(lake_config, name)
            if retention is not None and retention.removed_segments:
                context.log.info(f"{name}: retention removed {retention.removed_segments} segments "
                                 f"({retention.removed_bytes} bytes); the log now starts after SCN "
                                 f"{retention.start_scn}")

    return [capture_install, changelog, snapshots]


def _capture_lag_seconds(result: CaptureResult, now_ms: int) -> dict[str, float]:
    """``commit_to_log_seconds``: from the newest captured commit to now, this run's capture delay;
    ``lag_seconds``: how far the log is behind the source in time (0 when it read all there was)."""
    if not result.newest_commit_ms:
        return {"lag_seconds": 0.0} if result.until >= result.source_hwm else {}
    delay = round(max(0, now_ms - result.newest_commit_ms) / 1000, 3)
    return {"commit_to_log_seconds": delay, "lag_seconds": 0.0 if result.until >= result.source_hwm else delay}


def _failover_metadata(result: CaptureResult, manifest: Manifest) -> dict[str, object]:
    """Which server capture reads, and the switch this run followed (if any)."""
    if not manifest.lineage and not manifest.state.get("server"):
        return {}
    out: dict[str, object] = {"server": manifest.state.get("server", "primary"), "failovers": len(manifest.lineage)}
    if result.failover is not None:
        switch = result.failover
        out.update({
            "failover": dg.MetadataValue.json(switch),
            "failover_to": str(switch.get("to_server", "")),
            "failover_method": str(switch.get("method", "")),
            "failover_position": f"{switch.get('resume_file')}:{switch.get('resume_offset')}",
            "reread_windows": result.reread_windows,
        })
    return out


def column_schema(snap: DeltaFolder, registered: tuple[int, TableSchema] | None = None) -> dg.TableSchema:
    """The snapshot's Delta columns, each described by the type the source declares (when known)."""
    declared = {c.name: c.source_type for c in registered[1].columns} if registered is not None else {}
    return dg.TableSchema(columns=[
        dg.TableColumn(name, typ, description=f"source type {declared[name]}" if declared.get(name) else None)
        for name, typ in snap.delta_types().items()])


def _snapshot_metadata(r: TableSyncResult) -> dict[str, object]:
    return {
        "scn_range": f"{r.from_scn}..{r.to_scn}",
        "applied_scn": dg.MetadataValue.text(str(r.to_scn)),
        "log_scn": dg.MetadataValue.text(str(r.log_scn)),
        "lag_scn": r.lag_scn,
        **({"lag_seconds": r.lag_seconds} if r.lag_seconds is not None else {}),
        "windows": r.windows, "events": r.events,
        "rows_inserted": r.counts.inserted, "rows_updated": r.counts.updated, "rows_deleted": r.counts.deleted,
        "bootstrapped_at_scn": dg.MetadataValue.text(str(r.bootstrapped_at) if r.bootstrapped_at else "-"),
        "bootstrap_rows": r.bootstrap_rows,
        "dagster/row_count": r.snapshot_rows,
        **({"delta_version": r.delta_version} if r.delta_version is not None else {}),
        "engine": r.engine, "duration_s": round(r.duration_s, 3),
        # The spark engine's data files: rewritten (with their bytes) of those the table had, and added.
        **{f"data_{name}": value for name, value in r.files.items()},
    }
