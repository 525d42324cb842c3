"""Whether a source's committed log is whole: what readers and the writer check before trusting it.

``damage`` compares the newest manifest with what is stored (segments and sealed parts missing,
overlapping, or of another size or SCN range than the manifest says); ``require_intact`` refuses a
damaged log; ``continuity_problems`` adds what a health check reports beside damage (files no
manifest names, a checkpoint behind the committed log). Each takes the log's ``LogLayout``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import fastavro

from dagster_databus.core.scn import Scn
from dagster_databus.errors import ChangeLogCorruptError
from dagster_databus.log.manifest import read_manifest
from dagster_databus.log.segments import open_segment

if TYPE_CHECKING:
    from dagster_databus.log.layout import LogLayout


def damage(layout: LogLayout) -> list[str]:
    """Committed segments that overlap, are missing, or differ in size or SCN range from the manifest."""
    manifest = read_manifest(layout)
    parts = layout.listing("manifest.d/") if manifest.parts else {}
    problems = [f"manifest part {p.file} (SCN {p.first_scn}..{p.last_scn}) is missing from "
                f"{layout.where('manifest.d')}"
                for p in manifest.parts if p.file not in parts]
    stored = layout.listing("segments/")
    # Headers are read back from every segment on a local disk; in a store (a request each) from the newest.
    headers = {s.file for s in (manifest.segments if layout.lake.is_local else manifest.segments[-8:])}
    previous = manifest.start_scn
    for s in manifest.segments:
        if s.first_scn <= previous.value:
            problems.append(f"segment {s.file} starts at SCN {s.first_scn}, overlapping what ends at {previous}")
        if s.last_scn < s.first_scn:
            problems.append(f"segment {s.file} ends (SCN {s.last_scn}) before it starts ({s.first_scn})")
        info = stored.get(s.file)
        if info is None:
            problems.append(f"segment {s.file} (SCN {s.first_scn}..{s.last_scn}) is missing")
        elif info.size != s.bytes:
            problems.append(f"segment {s.file} is {info.size} bytes, the manifest says {s.bytes}")
        elif s.file in headers:
            with open_segment(layout, s) as f:
                meta = fastavro.reader(f).metadata
            if (meta.get("databus.first_scn"), meta.get("databus.last_scn")) != (str(s.first_scn),
                                                                                  str(s.last_scn)):
                problems.append(f"segment {s.file} holds SCN {meta.get('databus.first_scn')}.."
                                f"{meta.get('databus.last_scn')}, the manifest says {s.first_scn}..{s.last_scn}")
        previous = Scn(s.last_scn)
    return problems


def require_intact(layout: LogLayout) -> None:
    """Refuse to read or extend a log whose committed segments are damaged."""
    damaged = damage(layout)
    if damaged:
        raise ChangeLogCorruptError(
            f"the change log of source {layout.source!r} is damaged: " + "; ".join(damaged),
            f"restore the segments from backup, or run `databus bootstrap --source {layout.source}` to "
            "start the log and snapshots afresh from the source", source=layout.source)


def continuity_problems(layout: LogLayout) -> list[str]:
    """Damage, plus files no manifest names and a checkpoint behind the committed log."""
    manifest = read_manifest(layout)
    problems = damage(layout)
    listed = {s.file for s in manifest.segments}
    problems += [f"file {name} is not in the manifest" for name in layout.listing("segments/")
                 if name not in listed]
    checkpoint = manifest.checkpoint
    if checkpoint is not None and checkpoint.scn < manifest.last_scn:
        problems.append(f"the checkpoint ({checkpoint.scn}) is behind the last committed segment "
                        f"({manifest.last_scn})")
    return problems
