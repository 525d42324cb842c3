"""Log retention: drop the oldest segments by age or total size, never beyond what every
snapshot of the source has absorbed (a consumer can always bootstrap, then catch up)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from dagster_databus.core.scn import Scn
from dagster_databus.log.writer import LogWriter


@dataclass(frozen=True, slots=True)
class RetentionResult:
    removed_segments: int
    removed_bytes: int
    start_scn: Scn  # the log now holds every change after this
    held_by_snapshots: bool  # limits asked for more than the snapshots allow


def apply_retention(writer: LogWriter, absorbed: Scn, max_age_s: float | None = None,
                    max_bytes: int | None = None, now: float | None = None) -> RetentionResult:
    """Remove segments older than ``max_age_s`` or beyond ``max_bytes`` (newest kept), but only
    segments whose last SCN is at or below ``absorbed`` (the lowest applied SCN of the snapshots).
    The manifest is rewritten before any file is deleted, so readers never meet a missing segment."""
    layout = writer.layout
    manifest = writer.current()
    now = time.time() if now is None else now
    segments = list(manifest.segments)
    total = sum(s.bytes for s in segments)
    drop = 0
    held = False
    for i, segment in enumerate(segments):
        too_old = max_age_s is not None and (now - segment.created_ms / 1000) > max_age_s
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            break
        if segment.last_scn > absorbed.value or i == len(segments) - 1:
            held = segment.last_scn > absorbed.value
            break
        total -= segment.bytes
        drop = i + 1
    if not drop:
        return RetentionResult(0, 0, manifest.start_scn, held)
    removed, kept = segments[:drop], segments[drop:]
    start = Scn(removed[-1].last_scn)
    writer.write_manifest(replace(manifest, start_scn=start, sealed=(), tail=tuple(kept)))
    for segment in removed:
        layout.objects.delete(layout.segment_key(segment.file))
    return RetentionResult(len(removed), sum(s.bytes for s in removed), start, held)
