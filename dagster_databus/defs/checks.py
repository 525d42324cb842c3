"""Asset checks per source: capture verified, capture lag, log continuity, consumers within
retention, and per table: freshness, schema drift, and reconciliation with the source at one SCN.

The logic lives in the core packages; these functions only turn its findings into results."""

import time
from collections.abc import Iterator
from typing import Any

import dagster as dg
from dagster import AssetCheckExecutionContext

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.consumer.pull import MetaManager
from dagster_databus.core.lag import scn_lag, time_lag
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.defs.common import Metadata, capture_key, changelog_key, snapshot_key
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.errors import DatabusError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Retaining
from dagster_databus.sync.merge import applied_commit_ms
from dagster_databus.sync.reconcile import Reconciliation, reconcile_table, schema_drift
from dagster_databus.sync.verify import Verified


def _problems_result(key: dg.AssetCheckKey, problems: list[str], **metadata: Any) -> dg.AssetCheckResult:
    """Passed without problems; else failed, its description and metadata naming the problems and the fix."""
    if not problems:
        return dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True,
                                   metadata={"problems": dg.MetadataValue.json(problems), **metadata})
    fix = FIXES[key.name].format(source=key.asset_key.path[0], table=key.asset_key.path[-1])
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return _failed(key, f"{len(problems)} problem(s): {shown}", fix, problems=dg.MetadataValue.json(problems),
                   **metadata)


def _failed(key: dg.AssetCheckKey, problem: str, fix: str, **metadata: Any) -> dg.AssetCheckResult:
    """A failed check whose own page says what is wrong and what to do: in its description and its metadata."""
    return dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=False,
                               description=f"{problem}. Fix: {fix}",
                               metadata={"problem": dg.MetadataValue.text(problem),
                                         "fix": dg.MetadataValue.text(fix), **metadata})


def _error_result(key: dg.AssetCheckKey, exc: DatabusError) -> dg.AssetCheckResult:
    """A check that could not be evaluated (a source away, a lake it cannot read): failed with the error's own
    problem and fix, rather than Dagster's bare "Execution failed"."""
    return _failed(key, f"could not be evaluated: {exc.problem}", exc.fix, error=type(exc).__name__)


# The fix each problems-list check's failure names ({source}, {table}: the check's asset).
FIXES = {
    "capture_verified": "repair capture with `databus install --source {source}` (or materialize {source}/capture); "
                        "each problem names the object or setting, docs/operations.md says what capture needs",
    "log_continuity": "run `databus validate --source {source}`, which names the damage and its repair "
                      "(docs/operations.md, 'Lake damage')",
    "consumers_within_retention": "those consumers must bootstrap from the snapshots before they read on; to keep "
                                  "more of the log for them, raise sources[].retention",
    "schema_drift": "the next sync brings the snapshot to the source's columns; if a column's type changed in a "
                    "way it cannot follow, it names the fix, such as a bootstrap of {table} (the {source}_bootstrap "
                    "job)",
}


CAPTURE_CHECKS = {
    "capture_verified": "Capture objects present and healthy (missing or INVALID objects, disabled triggers, broken "
                        "scheduler jobs, binlog settings and privileges).",
}
CHANGELOG_CHECKS = {
    "capture_lag": "How far the source's current position is ahead of the change log's checkpoint (fails beyond "
                   "sources[].poll.max_lag_scn).",
    "log_continuity": "Segments in SCN order with no overlap, each present with the size and SCN range the manifest "
                      "records; no stray files; the checkpoint not behind the log.",
    "consumers_within_retention": "Pull consumers whose cursor is older than the log still retains (they must "
                                  "bootstrap from the snapshots).",
}
TABLE_CHECKS = {
    "freshness": "How much older the snapshot's newest change is than the change log's, in source commit time "
                 "(fails beyond sources[].poll.max_lag_seconds).",
    "schema_drift": "Source columns and types against the snapshot's.",
}
VERIFIED = ("This run's slice of the table's keys compared with the source at one SCN (the rolling verification: "
            "every row once per rotation); warns when rows differed, naming the keys and columns. A repair is a "
            "sign of a capture defect or of a change capture cannot see: see docs/operations.md.")
RECONCILED = ("Source and snapshot at one SCN: row counts and order-independent hashes per key bucket; on a "
              "mismatch, the first differing keys and columns.")


def sync_check_specs(source: SourceConfig) -> list[dg.AssetCheckSpec]:
    """The checks cheap enough to run with every sync, in the sync's own step (``assets.build_source_assets``)."""
    return [
        *[dg.AssetCheckSpec(n, asset=capture_key(source.name), description=d) for n, d in CAPTURE_CHECKS.items()],
        *[dg.AssetCheckSpec(n, asset=changelog_key(source.name), description=d) for n, d in CHANGELOG_CHECKS.items()],
        *[dg.AssetCheckSpec(n, asset=snapshot_key(source.name, t.name), description=d)
          for t in source.tables for n, d in TABLE_CHECKS.items()],
        *[dg.AssetCheckSpec("verified", asset=snapshot_key(source.name, t.name), description=VERIFIED)
          for t in source.tables if source.verify_policy(t.name) != "off"],
    ]


def sync_check(config: DatabusConfig, source: SourceConfig, key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    """The result of one of ``sync_check_specs``; the logic lives in the core packages. A check that cannot be
    evaluated fails with the error's problem and fix."""
    try:
        return _sync_check(config, source, key)
    except DatabusError as exc:
        return _error_result(key, exc)


def _sync_check(config: DatabusConfig, source: SourceConfig, key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    name = source.name
    if key.name == "capture_verified":
        return _problems_result(key, open_source(source, config.lake).setup.verify(), kind=source.kind)
    if key.name == "capture_lag":
        return _capture_lag(config, source)
    if key.name == "log_continuity":
        log = ChangeLog(config.lake, name)
        return _problems_result(key, log.continuity_problems(), segments=len(log.manifest().segments))
    if key.name == "consumers_within_retention":
        start = ChangeLog(config.lake, name).manifest().start_scn
        cursors = MetaManager(config.lake, name).cursors()
        behind = [f"{client} at SCN {cursor or 0}, the log starts after {start}"
                  for client, cursor in cursors.items() if (cursor.value if cursor else 0) < start.value]
        return _problems_result(key, behind, consumers=len(cursors), log_start_scn=dg.MetadataValue.text(str(start)))
    table = key.asset_key.path[-1]
    if key.name == "freshness":
        return _freshness(config, name, table, source.poll.max_lag_seconds)
    assert key.name == "schema_drift", key
    return _problems_result(key, schema_drift(config, source, table))


def _capture_lag(config: DatabusConfig, source: SourceConfig) -> dg.AssetCheckResult:
    key = changelog_key(source.name)
    check = dg.AssetCheckKey(key, "capture_lag")
    checkpoint = ChangeLog(config.lake, source.name).checkpoint()
    try:
        src = open_source(source, config.lake)
        position = src.stream.high_water_mark()
    except DatabusError as exc:
        return _error_result(check, exc)
    captured = checkpoint.scn if checkpoint else Scn.BEGINNING
    behind = scn_lag(position, captured)
    limit, limit_s = source.poll.max_lag_scn, source.poll.max_lag_seconds
    metadata: Metadata = {
        "lag_scn": behind, "source_scn": dg.MetadataValue.text(str(position)),
        "checkpoint_scn": dg.MetadataValue.text(str(checkpoint.scn) if checkpoint else "none yet")}
    # In time: the source has commits newer than the log's newest, so the log lags by that one's age.
    newest = ChangeLog(config.lake, source.name).commit_ms_through(checkpoint.scn) if checkpoint else None
    now_ms = int(time.time() * 1000)
    lag_s = time_lag(position, captured, now_ms, newest)
    if isinstance(src, Retaining):  # what the server keeps while capture lags (a slot's WAL)
        try:
            kept = src.retention()
        except DatabusError as exc:
            metadata["retention_error"] = str(exc)
        else:
            metadata["retained_by"] = dg.MetadataValue.text(f"{kept.holder} ({kept.status})")
            if kept.retained_bytes is not None:
                metadata["retained_wal_bytes"] = kept.retained_bytes
            # The server's own account of what waits: its position moves without changes to capture.
            lag_s = kept.lag_seconds(now_ms)
    if lag_s is not None:
        metadata["lag_seconds"] = round(lag_s, 3)
    # Limits only when set: a placeholder such as -1 would show and plot as a real figure.
    if limit is not None:
        metadata["max_lag_scn"] = limit
    if limit_s is not None:
        metadata["max_lag_seconds"] = limit_s
    over = []
    if limit is not None and behind > limit:
        over.append(f"{behind} SCNs behind the source (limit sources[].poll.max_lag_scn: {limit})")
    if limit_s is not None and lag_s is not None and lag_s > limit_s:
        over.append(f"{lag_s:.1f} s of source commits behind (limit sources[].poll.max_lag_seconds: {limit_s})")
    if over:
        return _failed(check, f"the change log is {' and '.join(over)}",
                       f"sync {source.name} more often (sources[].poll.cron, or its poll schedule turned on), find "
                       "what holds its runs back (their durations on the job's page), or raise the limit", **metadata)
    return dg.AssetCheckResult(asset_key=key, check_name=check.name, passed=True, metadata=metadata)


def build_reconcile_checks(source: SourceConfig) -> dg.AssetChecksDefinition:
    """The ``reconciled`` check of every snapshot: a full comparison with the source, too heavy for every
    sync, so its own step (run by the ``<source>_reconcile`` job and its schedule)."""
    name = source.name
    specs = [dg.AssetCheckSpec("reconciled", asset=snapshot_key(name, t.name), description=RECONCILED)
             for t in source.tables]

    @dg.multi_asset_check(specs=specs, name=f"{name}_reconciliation", can_subset=True,
                          op_tags={"databus/source": name})
    def reconciliation(context: AssetCheckExecutionContext, databus: DatabusResource
                       ) -> Iterator[dg.AssetCheckResult]:
        materialized = _materialized_here(context, name)
        if materialized:
            # Dagster's "Materialize all" selects every check of the assets it materializes; the everyday button
            # must cost what a sync costs, so the comparison that reads every row waits for its own job.
            context.log.info(
                f"{name}: the full comparison with the source (the reconciled checks) does not run in a run that "
                f"materializes {', '.join(sorted(k.to_user_string() for k in materialized))}: it reads every row "
                f"of the source. Run the {name}_reconcile job (or its schedule, sources[].reconcile), or execute "
                "the checks from their asset's Checks tab.")
            return
        config = databus.config()
        for check_key in context.selected_asset_check_keys:
            # Its two fingerprints' progress at DEBUG; one line per table says how it came out.
            try:
                r = reconcile_table(config, source, check_key.asset_key.path[-1], context.log.debug)
            except DatabusError as exc:
                context.log.error(f"{check_key.asset_key.path[-1]}: not reconciled: {exc}")
                yield _error_result(check_key, exc)
                continue
            (context.log.info if r.equal else context.log.warning)(_reconciled_line(r))
            yield _reconciled_result(check_key.asset_key, r)

    return reconciliation


def _materialized_here(context: AssetCheckExecutionContext, source: str) -> list[dg.AssetKey]:
    """The source's assets the check's run materializes: those the run selected, or, for a run of a whole job
    (no selection), the job's."""
    selected = context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys
    return [key for key in selected if key.path[0] == source]


def _reconciled_line(r: Reconciliation) -> str:
    if not r.reconciled:
        return f"{r.table}: not reconciled: {r.reason}"
    verdict = "equal" if r.equal else f"DIFFERENT in {r.differing_buckets} key bucket(s)"
    return (f"{r.table}: reconciled at SCN {r.scn}: {verdict} ({r.source_rows:,} source rows, "
            f"{r.snapshot_rows:,} snapshot rows, {r.seconds:.1f}s)")


def _reconciled_result(key: dg.AssetKey, r: Reconciliation) -> dg.AssetCheckResult:
    metadata: Metadata = {
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
        source, table = key.path[0], key.path[-1]
        fix = (f"read the differing keys again with the {source}_refresh job (tables: [{table}], key_after/"
               f"key_through around them), or bootstrap {table} (the {source}_bootstrap job); a difference points "
               "at a capture defect or a change capture cannot see: docs/operations.md, 'Reconciliation'")
        metadata["fix"] = dg.MetadataValue.text(fix)
        description = ("; ".join(d.describe() for d in r.differences[:3]) or (
            f"{r.differing_buckets} key buckets differ (the rows moved on before they could be compared)")) + \
            f". Fix: {fix}"
    return dg.AssetCheckResult(asset_key=key, check_name="reconciled", passed=r.equal, metadata=metadata,
                               severity=dg.AssetCheckSeverity.ERROR if r.reconciled else dg.AssetCheckSeverity.WARN,
                               description=description)


def verified_result(source: str, v: Verified) -> dg.AssetCheckResult:
    """The ``verified`` check of one table: passed when its slice equalled the source (or waits for the next run),
    a WARN naming the keys, columns and SCN when rows differed (repaired or not) or verification failed."""
    s = v.state
    metadata: Metadata = {"policy": v.policy, "rows_compared": v.rows, "differing_keys": v.different,
                          "repaired_keys": v.repaired, "moved_on_keys": v.moved_on, "seconds": v.seconds,
                          "repairs_so_far": s.repairs, "pass_runs": s.pass_runs}
    if v.scn is not None:
        metadata["scn"] = dg.MetadataValue.text(str(v.scn))
        metadata["keys"] = dg.MetadataValue.text(v.keys)
    if s.last_full_ms is not None:
        metadata["last_full_verify"] = dg.MetadataValue.timestamp(s.last_full_ms / 1000)
        metadata["last_full_verify_runs"] = s.last_full_runs or 0
    if v.differences:
        metadata["first_differences"] = dg.MetadataValue.json([d.as_json() for d in v.differences])
        metadata["differing_columns"] = dg.MetadataValue.text(", ".join(v.columns) or "(whole rows)")
    if v.scn is None:
        description = f"not verified this run: {v.skipped}"
        if v.failed:
            description += " (fix the cause; the sync itself went on)"
    elif v.different:
        done = ("repaired from the source" if v.repaired else
                f"left as they are (verify: report); to repair them, read the keys again: `databus snapshot "
                f"--source {source} --tables {v.table} --after K --through K` (or the {source}_refresh job)")
        description = (f"{v.different} key(s) of {source}.{v.table} differed from the source at SCN {v.scn}, "
                       f"{done}: " + "; ".join(d.describe() for d in v.differences[:3]) +
                       ". A repair points at a capture defect or a change capture cannot see: report it "
                       "(docs/operations.md, 'The verified check').")
    else:
        description = f"{v.rows:,} rows equal to the source at SCN {v.scn}"
    return dg.AssetCheckResult(asset_key=snapshot_key(source, v.table), check_name="verified",
                               passed=not v.different and not v.failed, severity=dg.AssetCheckSeverity.WARN,
                               metadata=metadata, description=description)


def _freshness(config: DatabusConfig, source: str, table: str, limit_s: float | None) -> dg.AssetCheckResult:
    log = ChangeLog(config.lake, source)
    snap = DeltaSnapshot(config.lake, source, table)
    applied = snap.applied_scn()
    key = snapshot_key(source, table)
    check = dg.AssetCheckKey(key, "freshness")
    if applied is None:
        return _failed(check, "the snapshot has not been bootstrapped yet",
                       f"materialize {source}/{table} (the first sync bootstraps it)")
    head = log.committed_scn()
    applied_ms = applied_commit_ms(snap, log, applied)
    head_ms = log.commit_ms_through(head)
    lag_s = time_lag(head, applied, head_ms, applied_ms)
    metadata: Metadata = {"applied_scn": dg.MetadataValue.text(str(applied)),
                                   "log_scn": dg.MetadataValue.text(str(head))}
    if lag_s is not None:
        metadata["lag_seconds"] = lag_s
    if limit_s is not None:
        metadata["max_lag_seconds"] = limit_s
        if lag_s is None or lag_s > limit_s:
            lag = "of unknown age" if lag_s is None else f"{lag_s:.1f} s"
            return _failed(check,
                           f"the snapshot's newest change is {lag} behind the change log's (limit "
                           f"sources[].poll.max_lag_seconds: {limit_s})",
                           f"merge it (a sync of {source}); if syncs run and it stays behind, the sync's failures "
                           "on the run page name why", **metadata)
    return dg.AssetCheckResult(asset_key=key, check_name=check.name, metadata=metadata, passed=True)

