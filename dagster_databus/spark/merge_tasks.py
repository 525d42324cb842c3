"""What the spark engine's merge runs inside Spark tasks (``mapInArrow``), and the plan it runs by.

Two steps, one shuffle between them:

1. ``route``, per log segment: drop changes the snapshot already holds, and tag every change with
   the group of data files that may hold its key, from the files' key statistics
   (``snapshot.files.TableFiles``); a key no file can hold is tagged with the gap between files it
   falls in. Each task also reports what it read (events by operation, windows).
2. ``apply``, per group (the shuffle brings all changes of a group, so of a key, to one task): reduce
   to the newest change per key (``sequence_by`` SCN, then position in the window), find which file
   holds each key by reading the group's key columns, and rewrite only the files that hold a key with
   an older row: the changed keys' rows dropped, new images written in key order, deletes applied
   (copy-on-write). New keys go to new files. The task reports the files it added and replaced.

The driver commits the reports in one delta-rs transaction (``snapshot.engines.spark``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.snapshot.delta import conform_changes, conform_rows
from dagster_databus.snapshot.files import DataFile, FileWriter, TableFiles, TableLocation, actions_batch
from dagster_databus.snapshot.reduce import NewestPerKey
from dagster_databus.spark.faults import task_fault

GROUP, FACT = "__group", "__fact"
FACT_GROUP = -(2**62)  # the group of the rows that carry a route task's report, not a change


@dataclass(frozen=True)
class MergePlan:
    location: TableLocation
    target: pa.Schema  # the snapshot's columns (with its metadata columns), as files are written
    changes: pa.Schema  # the change log reader's columns (``log.columns.change_schema``)
    key: tuple[str, ...]
    applied: int  # the snapshot's applied SCN: changes at or below it are already in it
    files: TableFiles
    file_rows: int
    prefix: str
    memory_bytes: int
    spill_dir: str | None
    part_column: str | None = None  # a logical table's part label: what is read is reported per part

    def route(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        routed = None
        windows: set[tuple[str, int]] = set()  # a task reads one log segment: windows are whole in it
        ops: dict[str, dict[str, int]] = {}
        for batch in batches:
            if not batch.num_rows:
                continue
            part = batch.column(self.part_column)[0].as_py() if self.part_column else ""
            windows.update((part, w) for w in np.unique(batch.column("__window_scn").to_numpy()).tolist())
            counts = pc.value_counts(batch.column("__op"))
            for op, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True):
                ops.setdefault(part, {})[op] = ops.setdefault(part, {}).get(op, 0) + n
            if self.applied:
                batch = batch.filter(pc.greater(batch.column("__scn"), self.applied))
            if not batch.num_rows:
                continue
            # Every column nullable (Spark marks literal columns not null), so the report row fits it too.
            routed = pa.schema([*(f.with_nullable(True) for f in batch.schema), pa.field(GROUP, pa.int64()),
                                pa.field(FACT, pa.string())])
            groups = self.files.route([batch.column(k) for k in self.key], room=self.file_rows)
            yield pa.RecordBatch.from_arrays([*batch.columns, pa.array(groups, pa.int64()),
                                              pa.nulls(batch.num_rows, pa.string())], schema=routed)
        fact = json.dumps({"read": ops, "windows": len(windows)})
        routed = routed or pa.schema([*self.changes, pa.field(GROUP, pa.int64()), pa.field(FACT, pa.string())])
        yield pa.RecordBatch.from_arrays(
            [*(pa.nulls(1, f.type) for f in list(routed)[:-2]), pa.array([FACT_GROUP], pa.int64()), pa.array([fact])],
            schema=routed)

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        facts: list[dict[str, Any]] = []
        reducer: NewestPerKey | None = None
        reducing = self.changes.append(pa.field(GROUP, pa.int64()))
        try:
            for batch in batches:
                is_fact = pc.equal(batch.column(GROUP), FACT_GROUP)
                if pc.any(is_fact).as_py():
                    facts += [json.loads(f) for f in batch.filter(is_fact).column(FACT).to_pylist()]
                    batch = batch.filter(pc.invert(is_fact))
                if reducer is None:  # Spark's Arrow types of the columns, which the reduce keeps
                    reducing = pa.schema(list(batch.schema)[:-1])
                    reducer = NewestPerKey(reducing, self.key, self.memory_bytes,
                                           Path(self.spill_dir) if self.spill_dir else None)
                reducer.add(pa.RecordBatch.from_arrays(batch.columns[:-1], schema=reducing))
            reduced = pa.Table.from_batches(list(reducer.results()) if reducer else [], reducing)
        finally:
            if reducer is not None:
                reducer.close()
        if facts:
            yield actions_batch([], facts=facts)
        if not reduced.num_rows:
            return
        groups = reduced.column(GROUP).to_numpy()
        order = np.argsort(groups, kind="stable")
        sorted_groups = groups[order]
        starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
        for start, end in zip(starts, [*starts[1:], len(order)], strict=True):
            group = int(sorted_groups[start])
            yield self._apply_group(group, reduced.take(pa.array(order[start:end])))

    def _apply_group(self, group: int, changes: pa.Table) -> pa.RecordBatch:
        """Rewrite the group's files that hold a key under an older row; write the group's new keys into
        its one file when it took them (``TableFiles.route``), else into new files."""
        n = changes.num_rows
        members = self.files.members(group) if group >= 0 else []
        incoming = changes.select(list(self.key)).append_column("__c", pa.array(np.arange(n), pa.int64()))
        incoming = incoming.append_column("__new", changes.column("__scn"))
        deleting = pc.equal(changes.column("__op"), "d").to_numpy(zero_copy_only=False)
        held = np.zeros(n, dtype=bool)
        # Per member file: the positions of its rows that newer changes replace, and those changes.
        replaced: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for index, member in enumerate(members):
            keys = self.location.read(member.path, columns=[*self.key, "__scn"])
            keys = conform_rows(keys, pa.schema([self.target.field(k) for k in [*self.key, "__scn"]]))
            keys = keys.rename_columns([*self.key, "__old"]).append_column(
                "__r", pa.array(np.arange(keys.num_rows), pa.int64()))
            found = incoming.join(keys, keys=list(self.key), join_type="inner", use_threads=False)
            if not found.num_rows:
                continue
            c = found.column("__c").to_numpy()
            held[c] = True
            newer = pc.greater(found.column("__new"), found.column("__old")).to_numpy(zero_copy_only=False)
            if newer.any():
                replaced[index] = (found.column("__r").to_numpy()[newer], c[newer])
        new = np.flatnonzero(~held & ~deleting)
        updated = sum(int(np.count_nonzero(~deleting[c])) for _, c in replaced.values())
        deleted = sum(int(np.count_nonzero(deleting[c])) for _, c in replaced.values())
        absorbed = np.zeros(0, np.int64)
        if len(new) and len(members) == 1:
            absorbed, new = new, np.zeros(0, np.int64)
            replaced.setdefault(0, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        added: list[DataFile] = []
        removed: list[str] = []
        rewritten_rows = rewritten_bytes = 0
        writer = FileWriter(self.location, self.target, self.file_rows, f"{self.prefix}-g{group}")
        for index, (rows, replacing) in replaced.items():
            member = members[index]
            data = conform_rows(self.location.read(member.path), self.target)
            keep = np.ones(data.num_rows, dtype=bool)
            keep[rows] = False
            images = np.concatenate([replacing[~deleting[replacing]], absorbed])
            merged = pa.concat_tables([data.filter(pa.array(keep)),
                                       conform_changes(changes.take(pa.array(images)), self.target)])
            added += writer.write(merged.sort_by([(k, "ascending") for k in self.key]).to_batches())
            removed.append(member.path)
            rewritten_rows += data.num_rows
            rewritten_bytes += member.size
        if len(new):
            fresh = conform_changes(changes.take(pa.array(new)), self.target)
            added += writer.write(fresh.sort_by([(k, "ascending") for k in self.key]).to_batches())
        task_fault("merge_files_written")
        return actions_batch(added, removed, [{
            "inserted": len(new) + len(absorbed), "updated": updated, "deleted": deleted, "files_read": len(members),
            "files_rewritten": len(removed), "rows_rewritten": rewritten_rows, "bytes_rewritten": rewritten_bytes}])


def partitions_for(groups: int, parallelism: int) -> int:
    """Shuffle partitions for the apply step: enough for every core, no more than there are groups."""
    return max(1, min(max(groups, 1) + 1, 4 * max(parallelism, 1)))

