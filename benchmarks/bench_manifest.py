"""A commit's cost as the log grows: one-window appends to logs of 0 to ~100k segments.

The peer is what a commit cost before manifest parts: rewriting a manifest that lists every
segment (JSON of all entries, fsync, rename), measured at the same size in the same run.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import best_of
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.manifest import Manifest, SegmentInfo
from dagster_databus.storage.durable import write_json_atomic

SCHEMA = TableSchema("b", "items", (Column("id", ColumnType("long")), Column("qty", ColumnType("long"))), ("id",))


def _history(segments: int) -> tuple[SegmentInfo, ...]:
    """Manifest entries for ``segments`` earlier segments (the files themselves are not needed to append)."""
    return tuple(SegmentInfo(file=f"{10 * n + 1:020d}-{10 * n + 10:020d}.avro", first_scn=10 * n + 1,
                             last_scn=10 * n + 10, windows=1, events=10, bytes=4096, created_ms=1_700_000_000_000,
                             tables={"items": 10}) for n in range(segments))


def _commits_per_s(lake: Path, history: tuple[SegmentInfo, ...], commits: int) -> float:
    log = ChangeLog(lake, "b")
    shutil.rmtree(log.root, ignore_errors=True)
    log.root.mkdir(parents=True)
    log.write_manifest(Manifest(epoch="e", tail=history, log_id="bench"))
    first = history[-1].last_scn + 1 if history else 1
    windows = [Window(Scn(first + n), (ChangeEvent(Scn(first + n), 0, "items", Op.UPDATE, (n,), {"id": n, "qty": n},
                                                   1_700_000_000_000),)) for n in range(commits)]
    # The history's segment files do not exist: skip the damage scan (a per-run check, not per commit).
    with log.writer(refuse_damage=False) as writer:
        writer.register_schemas([SCHEMA])

        def append_all() -> None:
            for window in windows:
                writer.append([window], "e")

        seconds = best_of(append_all, repeat=1)
    assert len(log.manifest().segments) == len(history) + commits
    return commits / seconds


def main(commits: int = 200) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-manifest-"))
    part = ChangeLog.part_segments
    sizes = (0, 4 * part, 40 * part, 400 * part)  # whole parts each, so every run starts with the same tail
    rates = {size: _commits_per_s(work / str(size), _history(size), commits) for size in sizes}
    largest = _history(sizes[-1])
    whole = work / "whole-manifest.json"
    rewrite_s = best_of(lambda: write_json_atomic(whole, {"format": 2, "segments": [asdict(s) for s in largest]}))
    print(f"\nChange-log commits as the log grows ({commits} one-window appends each; parts of {part} segments)")
    for size, rate in rates.items():
        print(f"  into a log of {size:>7,} segments {rate:10,.0f} commits/s   "
              f"each takes {rates[0] / rate:5.2f}x one into an empty log")
    print(f"  peer: rewrite a manifest listing all {sizes[-1]:,}: {1 / rewrite_s:,.1f} commits/s, "
          f"{whole.stat().st_size / 2**20:,.1f} MiB each (ours is {rewrite_s * rates[sizes[-1]]:,.0f}x faster there)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
