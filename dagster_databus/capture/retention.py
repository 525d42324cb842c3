"""``enforce_retention``: a source's change-log retention limits applied, keeping everything a snapshot, a logical
table or a history table has not absorbed yet."""

from __future__ import annotations

from dagster_databus.config import DatabusConfig
from dagster_databus.core.scn import Scn
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.retention import RetentionResult


def enforce_retention(config: DatabusConfig, source: str) -> RetentionResult | None:
    """Apply the source's retention limits, keeping everything some snapshot has not absorbed."""
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.dataplane.logical import LogicalSnapshot
    from dagster_databus.log.retention import apply_retention

    source_cfg = config.source(source)
    limits = source_cfg.retention
    if limits.max_age_hours is None and limits.max_bytes is None:
        return None
    applied = [DeltaSnapshot(config.lake, source, t.name).applied_scn() for t in source_cfg.tables]
    snapshots = [scn for scn in applied if scn is not None]
    # A table without a snapshot has absorbed nothing yet: then nothing may go.
    absorbed = min(snapshots) if len(snapshots) == len(applied) else Scn.BEGINNING
    # Logical tables follow the log too; one not loaded yet will load from the snapshots instead.
    for logical in config.logical_tables:
        snap = LogicalSnapshot(config.lake, logical.name)
        for part in logical.parts:
            scn = snap.applied_scn(part.label) if part.source == source else None
            absorbed = min(absorbed, scn) if scn is not None else absorbed
    # A history table follows the log too; one not started yet will start from its snapshot.
    for table in source_cfg.tables:
        scn = HistoryTable(config.lake, source, table.name).applied_scn() if table.history else None
        absorbed = min(absorbed, scn) if scn is not None else absorbed
    log = ChangeLog(config.lake, source)
    with log.writer() as writer:
        return apply_retention(writer, absorbed,
                               max_age_s=limits.max_age_hours * 3600 if limits.max_age_hours else None,
                               max_bytes=limits.max_bytes)
