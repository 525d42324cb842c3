"""Asset checks per source: capture verified, capture lag, log continuity, consumers within
retention, and per table: reconciliation with the source at one SCN and schema drift.

The logic lives in the core packages; these functions only turn its findings into results."""

import time
from collections.abc import Iterator

import dagster as dg
from dagster import AssetCheckExecutionContext

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.consumer.pull import MetaManager
from dagster_databus.defs.assets import RESOURCE, capture_key, changelog_key, snapshot_key
from dagster_databus.errors import DatabusError
from dagster_databus.log.store import ChangeLog
from dagster_databus.snapshot.delta import DeltaSnapshot
from dagster_databus.snapshot.merge import applied_commit_ms
from dagster_databus.snapshot.reconcile import Reconciliation, reconcile_table, schema_drift
from dagster_databus.sources import open_source


def _problems_result(problems: list[str], **metadata: object) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=not problems,
                               metadata={"problems": dg.MetadataValue.json(problems), **metadata})


def build_source_checks(source: SourceConfig) -> list[dg.AssetChecksDefinition]:
    name = source.name

    @dg.asset_check(asset=capture_key(name), name="capture_verified", required_resource_keys={RESOURCE},
                    description="Capture objects present and healthy (missing or INVALID objects, disabled "
                                "triggers, broken scheduler jobs, binlog settings and privileges).")
    def capture_verified(context: AssetCheckExecutionContext) -> dg.AssetCheckResult:
        try:
            problems = open_source(source, getattr(context.resources, RESOURCE).config().lake).verify()
        except DatabusError as exc:
            problems = [str(exc)]
        return _problems_result(problems, kind=source.kind)

    @dg.asset_check(asset=changelog_key(name), name="capture_lag", required_resource_keys={RESOURCE},
                    description="How far the source's current position is ahead of the change log's checkpoint "
                                "(fails beyond sources[].poll.max_lag_scn).")
    def capture_lag(context: AssetCheckExecutionContext) -> dg.AssetCheckResult:
        config = getattr(context.resources, RESOURCE).config()
        checkpoint = ChangeLog(config.lake, name).checkpoint()
        try:
            position = open_source(source, config.lake).high_water_mark()
        except DatabusError as exc:
            return dg.AssetCheckResult(passed=False, metadata={"error": str(exc)})
        behind = max(0, position.value - (checkpoint.scn.value if checkpoint else 0))
        limit, limit_s = source.poll.max_lag_scn, source.poll.max_lag_seconds
        metadata: dict[str, object] = {
            "lag_scn": behind, "source_scn": dg.MetadataValue.text(str(position)),
            "checkpoint_scn": dg.MetadataValue.text(str(checkpoint.scn) if checkpoint else "none yet")}
        # In time: nothing pending is no lag; else the source has commits newer than the log's newest.
        newest = ChangeLog(config.lake, name).commit_ms_through(checkpoint.scn) if checkpoint else None
        lag_s = 0.0 if not behind else (time.time() * 1000 - newest) / 1000 if newest else None
        if lag_s is not None:
            metadata["lag_seconds"] = round(max(0.0, lag_s), 3)
        # Limits only when set: a placeholder such as -1 would show and plot as a real figure.
        if limit is not None:
            metadata["max_lag_scn"] = limit
        if limit_s is not None:
            metadata["max_lag_seconds"] = limit_s
        passed = (limit is None or behind <= limit) and (limit_s is None or lag_s is None or lag_s <= limit_s)
        return dg.AssetCheckResult(passed=passed, metadata=metadata)

    @dg.asset_check(asset=changelog_key(name), name="log_continuity", required_resource_keys={RESOURCE},
                    description="Segments in SCN order with no overlap, each present with the size and SCN range "
                                "the manifest records; no stray files; the checkpoint not behind the log.")
    def log_continuity(context: AssetCheckExecutionContext) -> dg.AssetCheckResult:
        config = getattr(context.resources, RESOURCE).config()
        log = ChangeLog(config.lake, name)
        return _problems_result(log.continuity_problems(), segments=len(log.manifest().segments))

    @dg.asset_check(asset=changelog_key(name), name="consumers_within_retention", required_resource_keys={RESOURCE},
                    description="Pull consumers whose cursor is older than the log still retains (they must "
                                "bootstrap from the snapshots).")
    def consumers_within_retention(context: AssetCheckExecutionContext) -> dg.AssetCheckResult:
        config = getattr(context.resources, RESOURCE).config()
        start = ChangeLog(config.lake, name).manifest().start_scn
        cursors = MetaManager(config.lake, name).cursors()
        behind = [f"{client} at SCN {cursor or 0}, the log starts after {start}"
                  for client, cursor in cursors.items() if (cursor.value if cursor else 0) < start.value]
        return _problems_result(behind, consumers=len(cursors), log_start_scn=dg.MetadataValue.text(str(start)))

    table_specs = [dg.AssetCheckSpec(check, asset=snapshot_key(name, t.name), description=text)
                   for t in source.tables for check, text in (
                       ("reconciled", "Source and snapshot at one SCN: row counts and order-independent hashes per "
                                      "key bucket; on a mismatch, the first differing keys and columns."),
                       ("freshness", "How much older the snapshot's newest change is than the change log's, in "
                                     "source commit time (fails beyond sources[].poll.max_lag_seconds)."),
                       ("schema_drift", "Source columns and types against the snapshot's."))]

    @dg.multi_asset_check(specs=table_specs, name=f"{name}_table_checks", can_subset=True,
                          required_resource_keys={RESOURCE})
    def table_checks(context: AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        config = getattr(context.resources, RESOURCE).config()
        for check_key in context.selected_asset_check_keys:
            table = check_key.asset_key.path[-1]
            if check_key.name == "freshness":
                yield _freshness(config, name, table, source.poll.max_lag_seconds)
                continue
            if check_key.name == "schema_drift":
                problems = schema_drift(config, source, table)
                yield dg.AssetCheckResult(asset_key=check_key.asset_key, check_name="schema_drift",
                                          passed=not problems, metadata={"problems": dg.MetadataValue.json(problems)})
                continue
            r = reconcile_table(config, source, table, context.log.info)
            yield _reconciled_result(check_key.asset_key, r)

    return [capture_verified, capture_lag, log_continuity, consumers_within_retention, table_checks]


def _reconciled_result(key: dg.AssetKey, r: Reconciliation) -> dg.AssetCheckResult:
    metadata: dict[str, object] = {
        "scn": dg.MetadataValue.text(str(r.scn)), "reconciled": r.reconciled, "source_rows": r.source_rows,
        "snapshot_rows": r.snapshot_rows, "source_hash": dg.MetadataValue.text(f"{r.source_hash:016x}"),
        "snapshot_hash": dg.MetadataValue.text(f"{r.snapshot_hash:016x}"), "differing_buckets": r.differing_buckets,
        "compared_buckets": r.compared_buckets,
        "source_side": dg.MetadataValue.text("aggregate query in the database" if r.pushed_down
                                             else "rows streamed through the check"),
        "seconds": r.seconds}
    if r.differences:
        metadata["first_differences"] = dg.MetadataValue.json([d.as_json() for d in r.differences])
        metadata["differing_columns"] = dg.MetadataValue.text(
            ", ".join(dict.fromkeys(c for d in r.differences for c in d.columns)) or "(whole rows)")
    description = r.reason if not r.reconciled else None
    if r.reconciled and not r.equal:
        description = "; ".join(d.describe() for d in r.differences[:3]) or (
            f"{r.differing_buckets} key buckets differ (the rows moved on before they could be compared)")
    return dg.AssetCheckResult(asset_key=key, check_name="reconciled", passed=r.equal, metadata=metadata,
                               severity=dg.AssetCheckSeverity.ERROR if r.reconciled else dg.AssetCheckSeverity.WARN,
                               description=description)


def _freshness(config: DatabusConfig, source: str, table: str, limit_s: float | None) -> dg.AssetCheckResult:
    log = ChangeLog(config.lake, source)
    applied = DeltaSnapshot(config.lake, source, table).applied_scn()
    key = snapshot_key(source, table)
    if applied is None:
        return dg.AssetCheckResult(asset_key=key, check_name="freshness", passed=False,
                                   description="the snapshot has not been bootstrapped yet")
    head = log.committed_scn()
    applied_ms = applied_commit_ms(DeltaSnapshot(config.lake, source, table), log, applied)
    head_ms = log.commit_ms_through(head)
    lag_s = 0.0 if applied >= head else (max(0, head_ms - applied_ms) / 1000 if applied_ms and head_ms else None)
    metadata: dict[str, object] = {"applied_scn": dg.MetadataValue.text(str(applied)),
                                   "log_scn": dg.MetadataValue.text(str(head))}
    if lag_s is not None:
        metadata["lag_seconds"] = lag_s
    if limit_s is not None:
        metadata["max_lag_seconds"] = limit_s
    return dg.AssetCheckResult(asset_key=key, check_name="freshness", metadata=metadata,
                               passed=limit_s is None or (lag_s is not None and lag_s <= limit_s))

