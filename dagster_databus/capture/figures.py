"""A capture run's figures (``figures``), as the Dagster capture asset's metadata and ``databus capture --json``
give them, with the log as it stands after the run."""

from __future__ import annotations

import time
from typing import Any

from dagster_databus.capture.loop import CaptureResult
from dagster_databus.core.lag import time_lag
from dagster_databus.log.manifest import Manifest
from dagster_databus.sources.base import FailoverState


def figures(result: CaptureResult, manifest: Manifest, now_ms: int | None = None) -> dict[str, Any]:
    """A capture run's figures, with the log as it stands after it (``manifest``)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return {
        "scn_range": f"{result.since}..{result.until}",
        "scn_from": str(result.since), "scn_to": str(result.until), "source_scn": str(result.source_hwm),
        "windows": result.windows, "events": result.events, "segments_written": result.segments,
        "inserts": result.events_by_op.get("i", 0), "updates": result.events_by_op.get("u", 0),
        "deletes": result.events_by_op.get("d", 0),
        "events_by_table": dict(result.events_by_table),
        "lag_scn": result.lag_scn,
        **lag_seconds(result, now_ms),
        "log_segments": len(manifest.segments),
        "log_bytes": sum(s.bytes for s in manifest.segments),
        "epoch": result.epoch, "duration_s": round(result.duration_s, 3),
        **_failover(result, manifest),
    }


def lag_seconds(result: CaptureResult, now_ms: int) -> dict[str, float]:
    """``commit_to_log_seconds``: from the newest captured commit to now, this run's capture delay;
    ``lag_seconds``: how far the log is behind the source in time (0 when it read all there was)."""
    found: dict[str, float] = {}
    if result.newest_commit_ms:
        found["commit_to_log_seconds"] = round(max(0, now_ms - result.newest_commit_ms) / 1000, 3)
    # Behind the source, the log lags by its newest commit's age: the source has newer ones.
    lag = time_lag(result.source_hwm, result.until, now_ms, result.newest_commit_ms)
    if lag is not None:
        found["lag_seconds"] = round(lag, 3)
    return found


def _failover(result: CaptureResult, manifest: Manifest) -> dict[str, Any]:
    """Which server capture reads, and the switch this run followed (if any)."""
    server = FailoverState.of(manifest.state)
    if not manifest.lineage and not server.server:
        return {}
    out: dict[str, Any] = {"server": server.reading, "failovers": len(manifest.lineage)}
    if result.failover is not None:
        switch = result.failover
        out.update({
            "failover": dict(switch),
            "failover_to": str(switch.get("to_server", "")),
            "failover_method": str(switch.get("method", "")),
            "failover_position": f"{switch.get('resume_file')}:{switch.get('resume_offset')}",
            "reread_windows": result.reread_windows,
        })
    return out
