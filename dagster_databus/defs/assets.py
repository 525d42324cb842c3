"""Per source, one multi-asset: install/verify capture, poll the change log, merge the snapshots, and
run the cheap checks, all in one step.

One step per source, so a sync run costs what its work costs: one process (with ``databus_executor``,
the run's own) starts Python and Spark once, rather than a process per asset and check. Each asset
and check still shows and can be selected on its own (the step runs only what is selected); several
sources' steps run in parallel processes.
"""

import importlib.metadata
from collections.abc import Iterator
from typing import Literal

import dagster as dg
from dagster import AssetExecutionContext
from pydantic import Field

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.schema import TableSchema
from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot
from dagster_databus.defs.checks import sync_check, sync_check_specs, verified_result
from dagster_databus.defs.common import Metadata, capture_key, changelog_key, clear_errors, pool, snapshot_key
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.base import ALL_ROWS, RowSelection
from dagster_databus.sources.registry import source_kind
from dagster_databus.sync.figures import Figures, sync_figures
from dagster_databus.sync.merge import TableSyncResult, engine_for, sync_tables
from dagster_databus.sync.verify import RollingVerification

# What Dagster's "Compute details" show as the code that made a materialization: the installed package's version.
CODE_VERSION = importlib.metadata.version("dagster-databus")
KEY_AFTER = "only keys after this one (one value per key column, in key order); one table"
KEY_THROUGH = "only keys up to and including this one; one table"
WHERE = "only rows matching this condition, in the source's SQL; one table"


class SyncRunConfig(dg.Config):
    """Run config of a source's sync step (typed in the launchpad); it applies to the snapshots."""

    mode: Literal["merge", "bootstrap", "rebuild", "refresh"] = Field(
        default="merge", description="merge: apply the log; bootstrap: re-read the tables from the source first; "
                                     "rebuild: restore each snapshot to its last bootstrap and replay the log; "
                                     "refresh: merge, then read chosen rows (key_after, key_through, where) again "
                                     "and fold them into the kept snapshot")
    tables: list[str] = Field(default_factory=list, description="limit to these tables (default: all selected)")
    key_after: list[str] | None = Field(default=None, description=f"refresh: {KEY_AFTER}")
    key_through: list[str] | None = Field(default=None, description=f"refresh: {KEY_THROUGH}")
    where: str | None = Field(default=None, description=f"refresh: {WHERE}")


def sync_op_name(source: str) -> str:
    return f"{source}_sync_step"


def build_source_assets(source: SourceConfig, engine: str) -> list[dg.AssetsDefinition]:
    """The source's sync step and its assets; ``engine`` (``merge.engine``) labels the snapshots' kinds: the local
    engine's runs start no Spark."""
    name = source.name
    kinds: set[str] = {source.kind}
    owners = list(source.owners)
    tags = {"databus/source": name, "databus/kind": source.kind, **source.tags}
    table_keys = {snapshot_key(name, t.name): t.name for t in source.tables}
    specs = [
        dg.AssetSpec(capture_key(name), group_name=name, kinds=kinds, code_version=CODE_VERSION,
                     description=source_kind(source.kind).installs.format(name=name),
                     tags={**tags, "databus/role": "install"}, owners=owners),
        dg.AssetSpec(changelog_key(name), group_name=name, kinds={"avro"}, deps=[capture_key(name)],
                     code_version=CODE_VERSION,
                     description=f"The durable change log of `{name}`: whole transaction windows since the last "
                                 f"checkpoint, as Avro segments in the lake's `log/{name}/` folder. Each run polls up "
                                 "to the source's position at its start.",
                     tags={**tags, "databus/role": "capture"}, owners=owners),
        *[dg.AssetSpec(
            key, group_name=name, kinds={"delta"} if engine == "local" else {"delta", "spark"},
            code_version=CODE_VERSION,
            deps=[changelog_key(name)],
            description=f"Delta snapshot of `{name}.{table}` (key {', '.join(source.table(table).primary_key)}): "
                        "the latest row per key with `__scn`, `__op`, `__commit_ts`; the bootstrap store for "
                        "consumers.",
            tags={**tags, "databus/role": "snapshot", "databus/table": table}, owners=owners,
            automation_condition=dg.AutomationCondition.eager(),
        ) for key, table in table_keys.items()],
    ]

    @dg.multi_asset(name=sync_op_name(name), specs=specs, check_specs=sync_check_specs(source), can_subset=True,
                    pool=pool(name, "sync"), op_tags={"databus/source": name})
    def sync(context: AssetExecutionContext, config: SyncRunConfig, databus: DatabusResource
             ) -> Iterator[dg.MaterializeResult[None] | dg.AssetCheckResult]:
        lake_config: DatabusConfig = databus.config()
        selected = context.selected_asset_keys
        checks = context.selected_asset_check_keys

        def checks_of(key: dg.AssetKey) -> Iterator[dg.AssetCheckResult]:
            for check in sorted(checks, key=str):
                if check.asset_key == key and check.name != "verified":
                    yield sync_check(lake_config, source, check)

        tables = _tables(config, source, [table_keys[k] for k in table_keys if k in selected])
        with clear_errors(context):
            databus.start_spark(name, tables, config.mode)  # if it will be needed, meanwhile install and capture
            if capture_key(name) in selected:
                yield _install(context, lake_config, name)
            yield from checks_of(capture_key(name))
            # databus.spark starts Spark only if the engine runs a job (not the local engine).
            engine = engine_for(databus.spark, lake_config) if tables else None
            # The slices are read before capture, so that the log reaches their SCN once it is done.
            verifying = [t for t in tables if dg.AssetCheckKey(snapshot_key(name, t), "verified") in checks] \
                if config.mode == "merge" and engine is not None else []
            verification = RollingVerification(lake_config, source, verifying, engine, context.log.info) \
                if engine is not None and verifying else None
            if verification is not None:
                verification.read()
            if changelog_key(name) in selected:
                yield _capture(context, lake_config, name)
            yield from checks_of(changelog_key(name))
            rows = _rows(config, lake_config, name, tables)
            # ``tables`` is in ``table_keys``' order, which the loop below follows.
            synced = sync_tables(lake_config, source, tables, engine, progress=context.log.info,
                                 mode=config.mode, rows=rows) if engine is not None else iter(())
            failed: Exception | None = None
            for table in table_keys.values():
                if table in tables:
                    outcome = next(synced)[1]
                    if isinstance(outcome, Exception):  # reported once the other tables are done
                        failed = failed or outcome
                    else:
                        yield _snapshot_result(lake_config, name, table, outcome)
                # A table whose merge failed still has its checks evaluated: each says how the snapshot stands,
                # on its own page, rather than Dagster's bare "Execution failed".
                yield from checks_of(snapshot_key(name, table))
            if verification is not None:
                if failed is None:
                    for verified in verification.settle():
                        yield verified_result(name, verified)
                verification.close()
            if failed is not None:
                raise failed
            if tables:
                _enforce_retention(context, lake_config, name)

    return [sync]


def _tables(config: SyncRunConfig, source: SourceConfig, selected: list[str]) -> list[str]:
    unknown = [t for t in config.tables if t not in {t.name for t in source.tables}]
    if unknown:
        raise dg.Failure(description=f"run config names tables {unknown} that source {source.name!r} does not "
                                     f"capture; use some of: {[t.name for t in source.tables]}")
    return [t for t in selected if not config.tables or t in config.tables]


def _rows(config: SyncRunConfig, lake_config: DatabusConfig, source: str, tables: list[str]) -> RowSelection:
    chosen = config.key_after is not None or config.key_through is not None or config.where is not None
    if chosen and config.mode != "refresh":
        raise dg.Failure(description=f"run config chooses rows (key_after, key_through, where) but mode is "
                                     f"{config.mode!r}: set mode: refresh to read those rows again")
    if config.mode != "refresh" or not tables:
        return ALL_ROWS
    return capture.row_selection(lake_config, source, tables, config.key_after, config.key_through, config.where)


def _install(context: AssetExecutionContext, config: DatabusConfig, name: str) -> dg.MaterializeResult[None]:
    report = capture.install(config, name)
    # Said at INFO only when it did something: a scheduled run's install finds nothing to change.
    (context.log.info if report.changed else context.log.debug)(
        f"capture in {name}: updated {list(report.changed)}, unchanged {list(report.unchanged)}")
    return dg.MaterializeResult(asset_key=capture_key(name), metadata={
        "epoch": report.epoch, "capture_version": report.version,
        "tables_updated": dg.MetadataValue.json(list(report.changed)),
        "tables_unchanged": dg.MetadataValue.json(list(report.unchanged)),
    })


def _capture(context: AssetExecutionContext, config: DatabusConfig, name: str) -> dg.MaterializeResult[None]:
    result = capture.run(config, name, progress=context.log.info)
    return dg.MaterializeResult(asset_key=changelog_key(name), metadata=metadata(
        capture.figures(result, ChangeLog(config.lake, name).manifest())))


def _snapshot_result(config: DatabusConfig, name: str, table: str,
                     result: TableSyncResult) -> dg.MaterializeResult[None]:
    schema = column_schema(DeltaSnapshot(config.lake, name, table), ChangeLog(config.lake, name).schemas.latest(table))
    return dg.MaterializeResult(asset_key=snapshot_key(name, table),
                                metadata={**metadata(sync_figures(result)), "dagster/column_schema": schema})


def _enforce_retention(context: AssetExecutionContext, config: DatabusConfig, name: str) -> None:
    retention = capture.enforce_retention(config, name)
    if retention is not None and retention.removed_segments:
        context.log.info(f"{name}: retention removed {retention.removed_segments} segments "
                         f"({retention.removed_bytes} bytes); the log now starts after SCN {retention.start_scn}")


def column_schema(snap: DeltaFolder, registered: tuple[int, TableSchema] | None = None) -> dg.TableSchema:
    """The snapshot's Delta columns, each described by the type the source declares (when known)."""
    declared = {c.name: c.source_type for c in registered[1].columns} if registered is not None else {}
    return dg.TableSchema(columns=[
        dg.TableColumn(name, typ, description=f"source type {declared[name]}" if declared.get(name) else None)
        for name, typ in snap.delta_types().items()])


def metadata(figures: Figures) -> Metadata:
    """Figures as asset metadata: lists and mappings as JSON, SCNs (text, 64-bit) as text, the rest as they are."""
    return {key: dg.MetadataValue.json(value) if isinstance(value, dict | list) else value
            for key, value in figures.items()}
