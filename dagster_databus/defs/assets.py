"""Per source: a capture-install asset, a change-log asset and one multi-asset of snapshots.

The snapshots of a source are one multi-asset so that a run over the source's graph starts
Spark once (Dagster's default executor runs each step in its own process).
"""

import contextlib
import time
from collections.abc import Iterator

import dagster as dg
from dagster import AssetExecutionContext

from dagster_databus import pipeline
from dagster_databus.config import SourceConfig
from dagster_databus.errors import DatabusError
from dagster_databus.log.store import ChangeLog
from dagster_databus.snapshot.merge import TableSyncResult, pick_engine, sync_table

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


@contextlib.contextmanager
def clear_errors() -> Iterator[None]:
    """Show the capture layer's own message at the top of a failed run, not a traceback."""
    try:
        yield
    except DatabusError as exc:
        raise dg.Failure(description=str(exc), metadata={"problem": exc.problem, "fix": exc.fix}) from exc


def build_source_assets(source: SourceConfig) -> list[dg.AssetsDefinition]:
    name = source.name
    kinds = {source.kind}

    @dg.asset(
        key=capture_key(name), group_name=name, kinds=kinds, required_resource_keys={RESOURCE},
        description=INSTALL_DESCRIPTIONS[source.kind].format(name=name),
        tags={"databus/role": "install"},
    )
    def capture_install(context: AssetExecutionContext) -> dg.MaterializeResult:
        databus = getattr(context.resources, RESOURCE)
        with clear_errors():
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
        tags={"databus/role": "capture"},
    )
    def changelog(context: AssetExecutionContext) -> dg.MaterializeResult:
        databus = getattr(context.resources, RESOURCE)
        with clear_errors():
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
            "commit_to_log_seconds": round((now_ms - result.newest_commit_ms) / 1000, 3)
            if result.newest_commit_ms else 0.0,
            "log_segments": len(manifest.segments),
            "log_bytes": sum(s.bytes for s in manifest.segments),
            "epoch": result.epoch, "duration_s": round(result.duration_s, 3),
        })

    specs = [
        dg.AssetSpec(
            snapshot_key(name, t.name), group_name=name, kinds={"delta", "spark"}, deps=[changelog_key(name)],
            description=f"Delta snapshot of `{name}.{t.name}` (key {', '.join(t.primary_key)}): the latest row "
                        "per key with `__scn`, `__op`, `__commit_ts`; the bootstrap store for consumers.",
            tags={"databus/role": "snapshot"},
        )
        for t in source.tables
    ]

    @dg.multi_asset(name=f"{name}_snapshots", specs=specs, can_subset=True, required_resource_keys={RESOURCE})
    def snapshots(context: AssetExecutionContext) -> Iterator[dg.MaterializeResult]:
        databus = getattr(context.resources, RESOURCE)
        config = databus.config()
        tables = [t.name for t in source.tables if snapshot_key(name, t.name) in context.selected_asset_keys]
        with clear_errors():
            spark = databus.spark()
            engine = pick_engine(spark)
            for table in tables:
                result = sync_table(spark, config, source, table, engine, progress=context.log.info)
                yield dg.MaterializeResult(asset_key=snapshot_key(name, table), metadata=_snapshot_metadata(result))
            retention = pipeline.enforce_retention(config, name)
            if retention is not None and retention.removed_segments:
                context.log.info(f"{name}: retention removed {retention.removed_segments} segments "
                                 f"({retention.removed_bytes} bytes); the log now starts after SCN "
                                 f"{retention.start_scn}")

    return [capture_install, changelog, snapshots]


def build_capture_check(source: SourceConfig) -> dg.AssetChecksDefinition:
    """Verifies the source's capture objects or settings; each problem is named in the result."""

    @dg.asset_check(asset=capture_key(source.name), name="capture_verified", required_resource_keys={RESOURCE},
                    description="Capture objects present and healthy (missing or INVALID objects, disabled "
                                "triggers, broken scheduler jobs, binlog settings and privileges).")
    def capture_verified(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dagster_databus.sources import open_source

        try:
            problems = open_source(source).verify()
        except DatabusError as exc:
            problems = [str(exc)]
        return dg.AssetCheckResult(passed=not problems, metadata={
            "problems": dg.MetadataValue.json(problems), "kind": source.kind})

    return capture_verified


def _snapshot_metadata(r: TableSyncResult) -> dict[str, object]:
    return {
        "scn_range": f"{r.from_scn}..{r.to_scn}",
        "applied_scn": dg.MetadataValue.text(str(r.to_scn)),
        "log_scn": dg.MetadataValue.text(str(r.log_scn)),
        "lag_scn": r.lag_scn,
        "windows": r.windows, "events": r.events,
        "rows_inserted": r.counts.inserted, "rows_updated": r.counts.updated, "rows_deleted": r.counts.deleted,
        "bootstrapped_at_scn": dg.MetadataValue.text(str(r.bootstrapped_at) if r.bootstrapped_at else "-"),
        "bootstrap_rows": r.bootstrap_rows,
        "dagster/row_count": r.snapshot_rows,
        "delta_version": r.delta_version if r.delta_version is not None else -1,
        "engine": r.engine, "duration_s": round(r.duration_s, 3),
    }
