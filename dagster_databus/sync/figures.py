"""The figures of a table's sync, as a user looks at them: Dagster's asset metadata and the CLI's summary are both
made from these (``defs.assets``, ``cli``), so the two never disagree; a capture's are ``capture.figures``."""

from __future__ import annotations

from typing import Any

from dagster_databus.dataplane.results import Refreshed
from dagster_databus.sync.merge import HistorySynced, TableSyncResult

# Figures are plain values: text, numbers, and lists or mappings (which Dagster shows as JSON).
Figures = dict[str, Any]


def sync_figures(r: TableSyncResult) -> Figures:
    """A table's sync figures."""
    return {
        "scn_range": f"{r.from_scn}..{r.to_scn}",
        "applied_scn": str(r.to_scn),
        "log_scn": str(r.log_scn),
        "lag_scn": r.lag_scn,
        **({"lag_seconds": r.lag_seconds} if r.lag_seconds is not None else {}),
        "windows": r.windows, "events": r.events,
        "rows_inserted": r.counts.inserted, "rows_updated": r.counts.updated, "rows_deleted": r.counts.deleted,
        # Only from a run that bootstrapped: a 0 every other run would plot as the table emptying.
        **({"bootstrapped_at_scn": str(r.bootstrapped_at), "bootstrap_rows": r.bootstrap_rows}
           if r.bootstrapped_at else {}),
        **({"schema_evolved": r.evolved} if r.evolved else {}),
        **({f"bootstrap_{name}": n for name, n in r.key_ranges.named().items()} if r.key_ranges else {}),
        **(_refreshed(r.refreshed) if r.refreshed is not None else {}),
        **(_history(r.history) if r.history is not None else {}),
        "dagster/row_count": r.snapshot_rows,
        **({"delta_version": r.delta_version} if r.delta_version is not None else {}),
        "engine": r.engine, "duration_s": round(r.duration_s, 3),
        # The spark engine's data files: rewritten (with their bytes) of those the table had, and added.
        **({f"data_{name}": n for name, n in r.data_files.named().items()} if r.data_files else {}),
    }


def _refreshed(f: Refreshed) -> Figures:
    return {"refresh_rows_read": f.rows_read, "refresh_ranges": f.ranges,
            "refresh_deletes_found": f.deletes_found, "refresh_deletes_checked": f.deletes_checked,
            "refresh_inserted": f.counts.inserted, "refresh_updated": f.counts.updated,
            "refresh_deleted": f.counts.deleted}


def _history(h: HistorySynced) -> Figures:
    """The history table's figures (``dataplane.history``): versions held, and what this run opened and closed."""
    return {"history_versions": h.versions, "history_scn": str(h.to_scn),
            "history_versions_opened": h.counts.inserted, "history_versions_closed": h.counts.updated,
            "history_versions_deleted": h.counts.deleted,
            **({"history_started_at_scn": str(h.started_at)} if h.started_at else {}),
            **({"history_delta_version": h.delta_version} if h.delta_version is not None else {})}
