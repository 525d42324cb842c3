"""What the spark engine's merge runs inside Spark tasks (``mapInArrow``), and the plan it runs by.

Two steps, one shuffle between them:

1. ``route``, per log segment: drop changes the snapshot already holds, and tag every change with
   the group of data files that may hold its key, from the files' key statistics
   (``dataplane.files.TableFiles``); a key no file can hold is tagged with the gap between files it
   falls in. Each task also reports what it read (events by operation, windows).
2. ``apply``, per group (the shuffle brings all changes of a group, so of a key, to one task): reduce
   to the newest change per key (``sequence_by`` SCN, then position in the window), find which file
   holds each key by reading the group's key columns, and rewrite only the files that hold a key with
   an older row: the changed keys' rows dropped, new images written in key order, deletes applied
   (copy-on-write). New keys go to new files. The task reports the files it added and replaced.

The driver commits the reports in one delta-rs transaction (``engines.spark``).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.batch import repeated
from dagster_databus.dataplane.delta import conform_changes, conform_rows
from dagster_databus.dataplane.files import DataFile, FileWriter, TableFiles, TableLocation, actions_batch
from dagster_databus.dataplane.reduce import HELD_ONLY, NewestPerKey, PieceEdges, same_keys

GROUP, SLOT, PAYLOAD, FACT = "__group", "__slot", "__payload", "__fact"
PAYLOAD_ROWS = 65_536  # changes per payload
FACT_GROUP = -(2**62)  # the group of the rows that carry a route task's report, not a change
# What the route step hands the shuffle: per group (and slot, which places it), its changes as an
# Arrow IPC stream, or (with FACT_GROUP) a report.
ROUTED = pa.schema([pa.field(GROUP, pa.int64()), pa.field(SLOT, pa.int64()), pa.field(PAYLOAD, pa.binary()),
                    pa.field(FACT, pa.string())])
ROUTED_SPARK = "`__group` long, `__slot` long, `__payload` binary, `__fact` string"


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
    # The apply step's partitions, and per file group the value of ``SLOT`` that puts it in its own
    # (``balanced_slots``): Spark hash-partitions by that column.
    partitions: int = 1
    group_slots: tuple[int, ...] = ()
    reads: bool = False  # the changes are rows read at their SCN: they replace a row of the same SCN too
    # A history table's merge (``dataplane.history``): the columns whose change starts a new version. Changes
    # are then reduced per key and SCN, and folded into the keys' open versions.
    history: tuple[str, ...] | None = None
    change_feed: bool = False  # the table records a change data feed: tasks write its change files too
    soft: bool = False  # deletes: soft: a delete keeps the row, marked __op = 'd' (``dataplane.delta.SOFT_DELETE``)
    # Called by a task at its named points (files written, not yet reported): the fault tests' seam in Spark's
    # tasks (``spark.faults.task_fault``), nothing elsewhere.
    fault: Callable[[str], None] | None = None

    def route(self, batches: Iterator[pa.RecordBatch], origin: tuple[str, int] | None = None,
              whole: bool = True) -> Iterator[pa.RecordBatch]:
        """A log segment's changes (or a piece of one: ``origin`` is (segment, piece), ``whole`` False), reduced
        to the newest per key within it (less to shuffle; the apply step reduces across them) and cut by group:
        each group's changes travel as one Arrow IPC payload (``ROUTED``), so Spark moves a few large values
        instead of converting every change to a row and back. Then the report row: events read by
        operation and the windows seen. A piece's first and last transactions may be cut: their events travel
        as they are (``PieceEdges``)."""
        windows: dict[str, list[int]] = {}  # per part, the distinct windows in log order
        ops: dict[str, dict[str, int]] = {}
        reducer: NewestPerKey | None = None
        edges = None if whole else PieceEdges()
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                for part, rows in self._parts(batch):
                    seen = windows.setdefault(part, [])
                    for w in np.unique(rows.column("__window_scn").to_numpy()).tolist():
                        if not seen or w > seen[-1]:
                            seen.append(w)
                    counts = pc.value_counts(rows.column("__op"))
                    for op, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(),
                                     strict=True):
                        ops.setdefault(part, {})[op] = ops.setdefault(part, {}).get(op, 0) + n
                if self.applied:
                    batch = batch.filter(pc.greater(batch.column("__scn"), self.applied))
                if reducer is None:
                    reducer = self._reducer(batch.schema)
                reducer.extend([batch] if edges is None else edges.split(batch))
            reduced = pa.Table.from_batches([*reducer.results(), *(edges.rest() if edges else [])], reducer.schema) \
                if reducer else None
        finally:
            if reducer is not None:
                reducer.close()
        if reduced is not None and reduced.num_rows:
            groups = self.files.route([reduced.column(k) for k in self.key], room=self.file_rows)
            for group, rows in _by_group(groups):
                slot = self._slots(np.array([group]))[0]
                for start in range(0, len(rows), PAYLOAD_ROWS):  # bounded values for the JVM to carry
                    yield _routed(group, slot, _payload(reduced.take(pa.array(rows[start:start + PAYLOAD_ROWS]))))
        # A window can span the pieces of one segment (never two segments): the driver counts it once.
        where = list(origin) if origin is not None else [uuid.uuid4().hex, 0]
        fact = json.dumps({"read": ops, "windows": [[part, *where, w[0], w[-1], len(w)]
                                                   for part, w in windows.items() if w]})
        yield _routed(FACT_GROUP, self._slots(np.array([FACT_GROUP]))[0], None, fact)

    def _parts(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        """``batch``'s rows by the part they belong to ("" without parts). Spark may hand one task the rows
        of several parts in one batch (a union of the parts' reads can be planned as one partition)."""
        if not self.part_column:
            yield "", batch
            return
        column = batch.column(self.part_column)
        labels = pc.unique(column).to_pylist()
        if len(labels) == 1:
            yield labels[0], batch
            return
        for label in labels:
            yield label, batch.filter(pc.equal(column, label))

    def _slots(self, groups: np.ndarray) -> np.ndarray:
        """The ``SLOT`` value of each group: a file group's own; a gap's, spread over the partitions."""
        values = slot_values(self.partitions)
        slots: np.ndarray = values[np.abs(groups) % self.partitions]
        known = (groups >= 0) & (groups < len(self.group_slots))
        slots[known] = np.asarray(self.group_slots, dtype=np.int64)[groups[known]]
        return slots

    def _reducer(self, schema: pa.Schema) -> NewestPerKey:
        key = self.key if self.history is None else (*self.key, "__scn")
        return NewestPerKey(schema, key, self.memory_bytes, Path(self.spill_dir) if self.spill_dir else None,
                            at_commit=True)

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One shuffle partition's groups: every group's payloads reduced to the newest change per key, then
        applied to its files (``_apply_group``); the report rows pass through to the driver."""
        facts: list[dict[str, Any]] = []
        reducers: dict[int, NewestPerKey] = {}
        try:
            for batch in batches:
                for group, payload, fact in zip(batch.column(GROUP).to_pylist(), batch.column(PAYLOAD).to_pylist(),
                                                batch.column(FACT).to_pylist(), strict=True):
                    if fact is not None:
                        facts.append(json.loads(fact))
                        continue
                    with pa.ipc.open_stream(payload) as stream:
                        for changes in stream:
                            if group not in reducers:
                                reducers[group] = self._reducer(changes.schema)
                            reducers[group].add(changes)
            if facts:
                yield actions_batch([], facts=facts)
            for group in sorted(reducers):
                reducer = reducers.pop(group)
                try:
                    reduced = pa.Table.from_batches(list(reducer.results()), reducer.schema)
                finally:
                    reducer.close()
                yield self._apply_group(group, reduced) if self.history is None else \
                    self._apply_history(group, reduced)
        finally:
            for reducer in reducers.values():
                reducer.close()

    def _apply_group(self, group: int, changes: pa.Table) -> pa.RecordBatch:
        """Rewrite the group's files that hold a key under an older row; write the group's new keys into
        its one file when it took them (``TableFiles.route``), else into new files."""
        n = changes.num_rows
        members = self.files.members(group) if group >= 0 else []
        incoming = pa.table([changes.column(k).cast(self.target.field(k).type) for k in self.key], names=self.key)
        deleting = pc.equal(changes.column("__op"), "d").to_numpy(zero_copy_only=False)
        # A key the reduce could not tell held or not at commit takes its image only where a live row holds it.
        held_only = pc.equal(changes.column("__op"), HELD_ONLY).to_numpy(zero_copy_only=False)
        if held_only.any():
            changes = changes.set_column(changes.schema.get_field_index("__op"), "__op", pc.if_else(
                pa.array(held_only), pa.scalar("u", changes.schema.field("__op").type), changes.column("__op")))
        held = np.zeros(n, dtype=bool)
        # Per member file: the positions of its rows that newer changes replace, and those changes.
        replaced: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        read = [*self.key, "__scn", "__op"] if held_only.any() else [*self.key, "__scn"]
        for index, member in enumerate(members):
            keys = conform_rows(self.location.read(member.path, columns=read),
                                pa.schema([self.target.field(k) for k in read]))
            r, c = self._matches(keys, incoming)
            if held_only.any() and len(r):  # a soft-deleted row does not hold its key
                live = ~(held_only[c] & pc.equal(keys.column("__op").take(pa.array(r)), "d").to_numpy(
                    zero_copy_only=False))
                r, c = r[live], c[live]
            if not len(r):
                continue
            held[c] = True
            incoming_scn, held_scn = changes.column("__scn").to_numpy()[c], keys.column("__scn").to_numpy()[r]
            newer = incoming_scn >= held_scn if self.reads else incoming_scn > held_scn
            if newer.any():
                replaced[index] = (r[newer], c[newer])
        new = np.flatnonzero(~held & ~deleting & ~held_only)
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
        feed = ChangeFeed(self.target) if self.change_feed else None
        for index, (rows, replacing) in replaced.items():
            member = members[index]
            data = conform_rows(self.location.read(member.path), self.target)
            # Each replaced row takes its new image in place, so the file stays in key order; deletes go.
            order = np.arange(data.num_rows)
            order[rows] = data.num_rows + np.arange(len(rows))
            keep = np.ones(data.num_rows, dtype=bool)
            images = conform_changes(changes.take(pa.array(replacing)), self.target)
            if self.soft:
                images = _soft_deletes(data.take(pa.array(rows)), images, deleting[replacing])
            else:
                keep[rows[deleting[replacing]]] = False
            if feed is not None:  # a soft delete is an update of the row, as the table holds it
                feed.replaced(data.take(pa.array(rows)), images, deleting[replacing] & (not self.soft))
            merged = pa.concat_tables([data, images]).take(pa.array(order[keep]))
            if len(absorbed):
                fresh = conform_changes(changes.take(pa.array(absorbed)), self.target)
                merged = pa.concat_tables([merged, fresh]).sort_by([(k, "ascending") for k in self.key])
                if feed is not None:
                    feed.add(fresh, "insert")
            added += writer.write(merged.to_batches())
            removed.append(member.path)
            rewritten_rows += data.num_rows
            rewritten_bytes += member.size
        if len(new):
            fresh = conform_changes(changes.take(pa.array(new)), self.target)
            added += writer.write(fresh.sort_by([(k, "ascending") for k in self.key]).to_batches())
            if feed is not None:
                feed.add(fresh, "insert")
        written = feed.write(self.location, f"{self.prefix}-g{group}") if feed is not None else []
        if self.fault is not None:
            self.fault("merge_files_written")
        return actions_batch(added, removed, [{
            "inserted": len(new) + len(absorbed), "updated": updated, "deleted": deleted, "files_read": len(members),
            "files_rewritten": len(removed), "rows_rewritten": rewritten_rows, "bytes_rewritten": rewritten_bytes}],
            written)

    def _apply_history(self, group: int, changes: pa.Table) -> pa.RecordBatch:
        """Fold the group's changes into the open versions of their keys: rewrite the files that hold one,
        with the new versions of those keys beside them (in key, then ``__start_scn`` order); versions of
        keys no file holds open go into the group's one file when it has one, else into new files."""
        from dagster_databus.dataplane.history import fold

        members = self.files.members(group) if group >= 0 else []
        incoming = pa.table([changes.column(k).cast(self.target.field(k).type) for k in self.key], names=self.key)
        holders: list[tuple[int, pa.Table, np.ndarray]] = []  # (member, its rows, positions of open versions)
        for index, member in enumerate(members):
            head = self.location.read(member.path, columns=[*self.key, "__end_scn"])
            head = conform_rows(head, pa.schema([self.target.field(k) for k in [*self.key, "__end_scn"]]))
            rows, _ = self._matches(head.select(list(self.key)), incoming)
            rows = rows[head.column("__end_scn").is_null().to_numpy(zero_copy_only=False)[rows]] if len(rows) else rows
            if len(rows):
                holders.append((index, conform_rows(self.location.read(member.path), self.target), np.sort(rows)))
        open_rows = pa.concat_tables([data.take(pa.array(rows)) for _, data, rows in holders]) if holders else \
            self.target.empty_table()
        folded = fold(open_rows, changes, self.key, self.history or (), self.target)
        # Each open row's file, by its position among the open rows.
        owner = np.concatenate([np.full(len(rows), i) for i, (_, _, rows) in enumerate(holders)]) if holders else \
            np.zeros(0, np.int64)
        opened = folded.opened
        placed = np.full(opened.num_rows, -1)
        if holders and opened.num_rows:
            keys = pa.table([open_rows.column(k) for k in self.key], names=self.key)
            found, at = self._matches(keys, pa.table([opened.column(k) for k in self.key], names=self.key))
            placed[at] = owner[found]
        rewrite = set(owner[folded.replaced_rows].tolist()) | {int(i) for i in placed[placed >= 0]}
        loose = np.flatnonzero(placed < 0)
        if len(loose) and len(members) == 1:
            # The group's one file takes the new keys' versions, as the snapshot's merge does: files stay few.
            if not holders:
                holders.append((0, conform_rows(self.location.read(members[0].path), self.target),
                                np.zeros(0, np.int64)))
            placed[loose] = 0
            rewrite.add(0)
            loose = np.zeros(0, np.int64)
        added: list[DataFile] = []
        removed: list[str] = []
        rewritten_rows = rewritten_bytes = 0
        writer = FileWriter(self.location, self.target, self.file_rows, f"{self.prefix}-g{group}")
        offsets = np.cumsum([0, *(len(rows) for _, _, rows in holders)])
        order = [(k, "ascending") for k in (*self.key, "__start_scn")]
        for i in sorted(rewrite):
            index, data, rows = holders[i]
            mine = np.flatnonzero(owner[folded.replaced_rows] == i)
            keep = np.ones(data.num_rows, dtype=bool)
            keep[rows[folded.replaced_rows[mine] - offsets[i]]] = False
            merged = pa.concat_tables([data.filter(pa.array(keep)), folded.replaced.take(pa.array(mine)),
                                       opened.take(pa.array(np.flatnonzero(placed == i)))]).sort_by(order)
            added += writer.write_even(merged)  # a history file only grows: split it evenly, not 20 + 2
            removed.append(members[index].path)
            rewritten_rows += data.num_rows
            rewritten_bytes += members[index].size
        if len(loose):
            added += writer.write(opened.take(pa.array(loose)).sort_by(order).to_batches())
        if self.fault is not None:
            self.fault("merge_files_written")
        return actions_batch(added, removed, [{
            "inserted": opened.num_rows, "updated": folded.closed, "deleted": folded.deleted,
            "files_read": len(members), "files_rewritten": len(removed), "rows_rewritten": rewritten_rows,
            "bytes_rewritten": rewritten_bytes}])

    def _matches(self, held: pa.Table, incoming: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``held``, positions in ``incoming``) of the keys both have."""
        held = pa.table(same_keys([held.column(k) for k in self.key]), names=list(self.key))
        incoming = pa.table(same_keys([incoming.column(k) for k in self.key]), names=list(self.key))
        if len(self.key) == 1:
            found = pc.index_in(held.column(0), value_set=incoming.column(0))
            valid = found.is_valid().to_numpy(zero_copy_only=False)
            return np.flatnonzero(valid), found.drop_null().to_numpy().astype(np.int64)
        held = held.append_column("__r", pa.array(np.arange(held.num_rows), pa.int64()))
        incoming = incoming.append_column("__c", pa.array(np.arange(incoming.num_rows), pa.int64()))
        found = incoming.join(held, keys=list(self.key), join_type="inner", use_threads=False)
        return found.column("__r").to_numpy(), found.column("__c").to_numpy()


def _soft_deletes(held: pa.Table, images: pa.Table, deleting: np.ndarray) -> pa.Table:
    """``images`` where each delete takes the held row's values, with the delete's SCN, operation and commit time."""
    mask = pa.array(deleting)
    return pa.table({name: images[name] if name in ("__scn", "__op", "__commit_ts") else
                     pc.if_else(mask, held[name], images[name]) for name in images.column_names}, schema=images.schema)


class ChangeFeed:
    """The rows a task changed, as Delta's change data feed records them: the table's columns and
    ``_change_type`` (insert, update_preimage, update_postimage, delete), written under ``_change_data/``."""

    def __init__(self, target: pa.Schema) -> None:
        self.schema = target.append(pa.field("_change_type", pa.string()))
        self.parts: list[pa.Table] = []

    def add(self, rows: pa.Table, kind: str) -> None:
        if rows.num_rows:
            self.parts.append(rows.append_column("_change_type", repeated(kind, pa.string(), rows.num_rows)))

    def replaced(self, before: pa.Table, after: pa.Table, deleting: np.ndarray) -> None:
        """Held rows ``before`` replaced by ``after`` (aligned): a delete, or an update's pre- and post-image."""
        self.add(before.filter(pa.array(deleting)), "delete")
        self.add(before.filter(pa.array(~deleting)), "update_preimage")
        self.add(after.filter(pa.array(~deleting)), "update_postimage")

    def write(self, location: TableLocation, prefix: str) -> list[DataFile]:
        from dagster_databus.dataplane.commit import CHANGE_DATA

        if not self.parts:
            return []
        rows = pa.concat_tables(self.parts)
        return FileWriter(location, self.schema, max(rows.num_rows, 1), f"{CHANGE_DATA}/{prefix}-cdc").write_even(rows)


def _by_group(groups: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(group, the positions holding it) for every group in ``groups``."""
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    for start, end in zip(starts, [*starts[1:], len(order)], strict=True):
        yield int(ordered[start]), order[start:end]


def _payload(changes: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, changes.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as stream:
        stream.write_table(changes)
    payload: bytes = sink.getvalue().to_pybytes()
    return payload


def _routed(group: int, slot: int, payload: bytes | None, fact: str | None = None) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([group], pa.int64()), pa.array([slot], pa.int64()),
                                       pa.array([payload], pa.binary()), pa.array([fact], pa.string())],
                                      schema=ROUTED)


def balanced_slots(files: TableFiles, parallelism: int) -> tuple[int, tuple[int, ...]]:
    """(partitions of the apply step, the ``SLOT`` value of each file group): groups are dealt to the
    partitions largest first, each to the least loaded, so every core gets a like share of the rows to
    rewrite; at most four partitions per core, no more than there are groups (and one for new keys)."""
    partitions = max(1, min(files.groups + 1, 4 * max(parallelism, 1)))
    rows = [0] * files.groups
    for f, g in zip(files.files, files.group_of, strict=True):
        rows[g] += f.rows + 1
    load = [0] * partitions
    assigned = [0] * files.groups
    for g in sorted(range(files.groups), key=lambda g: -rows[g]):
        target = min(range(partitions), key=load.__getitem__)
        assigned[g] = target
        load[target] += rows[g]
    values = slot_values(partitions)
    return partitions, tuple(int(values[p]) for p in assigned)


def slot_values(partitions: int) -> np.ndarray:
    """For each partition p, a number that Spark's ``repartition(partitions, column)`` puts in partition p:
    Spark places a row by Murmur3 (seed 42) of the column's value modulo the partitions."""
    values = np.zeros(partitions, dtype=np.int64)
    missing, candidate = set(range(partitions)), 0
    while missing:
        p = spark_hash_long(candidate) % partitions
        if p in missing:
            values[p] = candidate
            missing.discard(p)
        candidate += 1
    return values


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a long: Murmur3_x86_32 of its two 32-bit halves, as a signed 32-bit number."""
    def k1(k: int) -> int:
        k = (k * 0xCC9E2D51) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        return (k * 0x1B873593) & 0xFFFFFFFF

    def h1(h: int, k: int) -> int:
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        return (h * 5 + 0xE6546B64) & 0xFFFFFFFF

    v = value & 0xFFFFFFFFFFFFFFFF
    h = h1(h1(seed, k1(v & 0xFFFFFFFF)), k1(v >> 32)) ^ 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= (1 << 31) else h



def count_windows(facts: list[dict[str, Any]]) -> int:
    """Windows the route steps saw, each once: pieces of one segment that meet in a window share it."""
    pieces: dict[tuple[str, str], list[tuple[int, int, int, int]]] = {}
    for fact in facts:
        for part, segment, piece, first, last, count in fact.get("windows", ()):
            pieces.setdefault((part, segment), []).append((piece, first, last, count))
    total = 0
    for seen in pieces.values():
        seen.sort()
        total += sum(count for _, _, _, count in seen)
        total -= sum(1 for a, b in itertools.pairwise(seen) if a[2] == b[1])
    return total
