"""Parts compared with their sources: each part's physical snapshot against the source's rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from dagster_databus.config import DatabusConfig
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import (
    DeltaSnapshot,
)
from dagster_databus.dataplane.logical import PART_COLUMN, LogicalSnapshot
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.sync.reconcile import Comparison, compare_rows

if TYPE_CHECKING:
    pass

@dataclass(frozen=True, slots=True)
class PartComparison:
    """A part's rows in the logical table against its physical snapshot."""

    label: str
    logical_scn: Scn | None
    physical_scn: Scn | None
    comparison: Comparison | None  # None when the two are not at the same SCN

    @property
    def comparable(self) -> bool:
        return self.comparison is not None

    @property
    def equal(self) -> bool:
        return self.comparison is not None and self.comparison.equal


def compare_parts(config: DatabusConfig, name: str) -> list[PartComparison]:
    """Each part's rows in logical table ``name`` against its physical snapshot, where both are at one SCN.

    The logical table is derived from the physical snapshots and the logs, so at equal SCNs a part's
    rows must be exactly the snapshot's (the shard column aside when it was added from labels).
    """
    logical = config.logical_table(name)
    target = LogicalSnapshot(config.lake, name)
    table = target._table()
    if table is None:
        raise SnapshotMissingError(f"logical table {name} has not been written yet ({target.uri})",
                                   f"materialize the logical/{name} asset")
    data = target.dataset(table).to_table()  # rows and SCNs from one version
    out = []
    for part in logical.parts:
        version = table.transaction_version(target.app_id(part.label))
        logical_scn = Scn(version) if version is not None else None
        snap = DeltaSnapshot(config.lake, part.source, part.table)
        try:
            physical, physical_scn, _ = snap.read_pinned()
        except FileNotFoundError:
            physical, physical_scn = None, None
        if physical is None or logical_scn != physical_scn:
            out.append(PartComparison(part.label, logical_scn, physical_scn, None))
            continue
        key = config.source(part.source).table(part.table).primary_key
        rows = data.filter(pc.equal(data[PART_COLUMN], part.label)).select(physical.column_names)
        out.append(PartComparison(part.label, logical_scn, physical_scn,
                                  compare_rows(f"{name}@{part.label}", key, physical.to_pylist(), rows.to_pylist())))
    return out
