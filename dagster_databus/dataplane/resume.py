"""A bootstrap's progress, kept in the lake so a killed one resumes where it stopped.

A bootstrap reads its table in key ranges (chunks), each in its own short consistent read at a
position it reports, and writes each range's rows as data files into the snapshot's folder; nothing
is visible until one commit at the end names them all. ``<lake>/bootstrap/<source>/<table>/`` (beside
the snapshots, not among them: their folder's entries are tables) holds what lets a later run finish the
job instead of starting over:

- ``plan.json``: the ranges (fixed when the bootstrap starts, so a resumed run cuts the table the
  same way), the file-name prefix, the column list the files are written in, and the change log's
  epoch (positions of another lineage cannot be compared);
- ``started/<range>-<attempt>``: one marker each time a task starts reading a range;
- ``done/<range>.json``: written by the task once its files are written: the files, with their
  statistics, and the position the range was read at.

A resumed run reads only the ranges without a ``done`` record, so a range is read at most twice
(once by the run that was killed while reading it). Its files from the killed run's partial read are
never named in a commit and are deleted with the bootstrap's other strays at the end.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.core.pickle_text import pack, unpack
from dagster_databus.dataplane.files import ACTION_SCHEMA, TaskReport, run_prefix

if TYPE_CHECKING:
    from dagster_databus.sources.base import KeyRange
    from dagster_databus.storage.lake import Lake


@dataclass(frozen=True, slots=True)
class BootstrapPlan:
    prefix: str  # the data files' name prefix (dataplane.files.run_prefix)
    ranges: tuple[KeyRange, ...]
    fingerprint: str  # the column list (TableSchema.fingerprint) the files are written in
    epoch: str | None  # the change log's epoch when the bootstrap started


@dataclass(frozen=True, slots=True)
class ProgressSpec:
    """What a task needs to record its range's progress: the lake and the progress folder's key."""

    lake_spec: str
    key: str  # ends in '/'

    def started(self, index: int) -> None:
        from dagster_databus.storage.lake import Lake

        Lake.from_spec(self.lake_spec).objects.write(f"{self.key}started/{index:05d}-{uuid.uuid4().hex[:8]}", b"")

    def recorded(self, index: int) -> bool:
        """Whether the range's files are recorded (``done``)."""
        from dagster_databus.storage.lake import Lake

        return Lake.from_spec(self.lake_spec).objects.read(self._done(index)) is not None

    def done(self, index: int, actions: pa.RecordBatch) -> None:
        """Record the range's files; written after they are, so a record always names complete files."""
        from dagster_databus.storage.lake import Lake

        Lake.from_spec(self.lake_spec).objects.write(self._done(index), json.dumps(actions.to_pylist()).encode())

    def _done(self, index: int) -> str:
        return f"{self.key}done/{index:05d}.json"


class BootstrapProgress:
    def __init__(self, lake: Lake, source: str, table: str) -> None:
        self.lake = lake
        self.key = f"bootstrap/{source}/{table}/"

    @property
    def spec(self) -> ProgressSpec:
        return ProgressSpec(self.lake.spec(), self.key)

    def plan(self) -> BootstrapPlan | None:
        data = self.lake.objects.read(f"{self.key}plan.json")
        if data is None:
            return None
        doc = json.loads(data)
        return BootstrapPlan(doc["prefix"], unpack(doc["ranges"]), doc["fingerprint"], doc.get("epoch"))

    def start(self, ranges: tuple[KeyRange, ...], fingerprint: str, epoch: str | None) -> BootstrapPlan:
        """A new plan, replacing any earlier one (its records go with it)."""
        self.clear()
        plan = BootstrapPlan(run_prefix(), ranges, fingerprint, epoch)
        self.lake.objects.write(f"{self.key}plan.json", json.dumps({
            "prefix": plan.prefix, "ranges": pack(ranges), "fingerprint": fingerprint, "epoch": epoch,
            "range_count": len(ranges)}).encode())
        return plan

    def done(self) -> dict[int, TaskReport]:
        """Each finished range's files and facts, by range index."""
        found = {}
        for info in self.lake.objects.list(f"{self.key}done/"):
            data = self.lake.objects.read(info.key)
            if data is None:
                continue
            index = int(info.key.rpartition("/")[2].split(".")[0])
            found[index] = TaskReport.of(pa.Table.from_pylist(json.loads(data), schema=ACTION_SCHEMA))
        return found

    def starts(self) -> dict[int, int]:
        """How many times each range has been started (read), by range index."""
        counts: dict[int, int] = {}
        for info in self.lake.objects.list(f"{self.key}started/"):
            index = int(info.key.rpartition("/")[2].split("-")[0])
            counts[index] = counts.get(index, 0) + 1
        return counts

    def clear(self) -> None:
        for info in self.lake.objects.list(self.key):
            self.lake.objects.delete(info.key)
