"""Reading a table as it was: the rows of a history table (``dataplane.history``) as of an SCN or a time.

    rows = as_of(lake, "shop", "orders", scn=Scn(1234))            # the source's rows at SCN 1234
    rows = as_of(lake, "shop", "orders", at=datetime(2026, 11, 1, tzinfo=UTC))

The same read in SQL over the Delta table (Spark, DuckDB, delta-rs's QueryBuilder), for SCN ``s``::

    SELECT * FROM history WHERE __start_scn <= s AND (__end_scn IS NULL OR __end_scn > s)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.history import HistoryTable
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.storage.lake import Lake
from dagster_databus.storage.location import LakeLocation


def as_of(lake: Lake | LakeLocation | Path | str, source: str, table: str, scn: Scn | None = None,
          at: datetime | None = None, columns: Sequence[str] | None = None, with_meta: bool = False) -> pa.Table:
    """The rows ``table`` held at SCN ``scn`` (or at source commit time ``at``, timezone-aware), from one version
    of its history table: ``columns`` (default: the table's own), and with ``with_meta`` the history columns.
    A point outside what the history covers (before it starts, after the SCN it reached) is refused."""
    if (scn is None) == (at is None):
        raise ValueError("give exactly one of scn= and at=")
    hist = HistoryTable(lake, source, table)
    delta = hist.existing()
    applied = delta.transaction_version(hist.app_id) if delta is not None else None
    if delta is None or applied is None:
        raise SnapshotMissingError(f"{source}.{table} has no history table ({hist.uri})",
                                   f"set history: true on table {table} of source {source} and sync it")
    start = delta.transaction_version(hist.start_app_id)
    if scn is not None and not (start is not None and start <= scn.value <= applied):
        raise SnapshotMissingError(
            f"the history of {source}.{table} covers SCN {start}..{applied}, not SCN {scn}",
            "sync the table to bring its history further, or ask for an SCN it covers")
    if at is not None and at.tzinfo is None:
        raise ValueError("at= must be timezone-aware (source commit times are UTC)")
    dataset = hist.dataset(delta)
    if scn is not None:
        value: pa.Scalar = pa.scalar(scn.value, pa.int64())
        start_col, end_col = ds.field("__start_scn"), ds.field("__end_scn")
    else:
        value = pa.scalar(at, pa.timestamp("us", tz="UTC"))
        start_col, end_col = ds.field("__start_at"), ds.field("__end_at")
    held = (start_col <= value) & (end_col.is_null() | (end_col > value))
    names = list(columns) if columns is not None else [
        n for n in dataset.schema.names if with_meta or not n.startswith("__")]
    return dataset.to_table(columns=names, filter=held)
