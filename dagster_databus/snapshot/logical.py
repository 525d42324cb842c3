"""Logical tables: sharded physical tables merged into one Delta snapshot (as Canal's group event sink merges shards).

``<lake>/logical/<name>`` holds the rows of every part (a configured table of a configured source)
under the logical key ``(shard_column, *primary key)``, with ``__part`` naming the part each row
comes from and the usual ``__scn``, ``__op``, ``__commit_ts``. When the physical tables have no
column called ``shard_column`` it is added, filled with each part's label, so equal keys on
different shards never collide; when they have one, its values are used and a key that two parts
both hold is refused (``ShardCollisionError``).

Each part keeps its own applied SCN, a Delta transaction id ``databus:logical.<name>@<label>``,
because SCNs of different shards come from different logs (other servers, other epochs) and must
never be compared. All parts' ids move in the same commit as the rows they cover. The first sync
loads every part from its physical snapshot at that snapshot's applied SCN; later syncs read each
part's change log after the part's own SCN and merge the union in one commit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, Transaction, write_deltalake

from dagster_databus.config import DatabusConfig, LogicalPartConfig, LogicalTableConfig
from dagster_databus.core.event_columns import CHANGE_META, DELIVERED_META
from dagster_databus.core.progress import Progress
from dagster_databus.core.schema import META_COLUMNS, Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import LogGapError, SchemaDriftError, ShardCollisionError, SnapshotMissingError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.columns import change_schema, table_changes
from dagster_databus.snapshot.delta import (
    DeltaFolder,
    DeltaSnapshot,
    MergeCounts,
    conform_changes,
    merge_with_delta_rs,
)
from dagster_databus.snapshot.reconcile import Comparison, compare_rows
from dagster_databus.snapshot.reduce import NewestPerKey
from dagster_databus.storage.durable import crash_point, disk_errors
from dagster_databus.storage.lake import Lake
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    from dagster_databus.snapshot.merge import SparkLike
PART_COLUMN = "__part"
LAYOUT_KEY = "databus.logical.layout"  # commit metadata: the layout the table was written with


@dataclass(frozen=True, slots=True)
class PartSyncResult:
    label: str
    source: str
    table: str
    from_scn: Scn  # the part's applied SCN before the catch-up (after a load: the snapshot's SCN)
    to_scn: Scn  # the part's applied SCN now
    log_scn: Scn  # the part's change log's committed SCN
    events: int
    events_by_op: dict[str, int]
    loaded_rows: int  # rows taken from the physical snapshot by a load in this sync (0 otherwise)


@dataclass(frozen=True, slots=True)
class LogicalSyncResult:
    name: str
    parts: tuple[PartSyncResult, ...]
    load_reason: str | None  # why the table was (re)loaded from the physical snapshots; None: not loaded
    events: int
    counts: MergeCounts
    row_count: int
    delta_version: int | None
    commits: int  # Delta commits this sync made: 0 for a replay
    duration_s: float

    def part(self, label: str) -> PartSyncResult:
        return next(p for p in self.parts if p.label == label)


@dataclass(frozen=True, slots=True)
class LogicalLayout:
    """The shape of a logical table, from its config and its parts' (identical) schemas."""

    name: str
    shard_column: str
    shard_from_label: bool  # the column is added and filled with part labels (else it is a data column)
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    parts: tuple[tuple[str, str, str], ...]  # (label, source, table)

    @property
    def key(self) -> list[str]:
        """The logical key: unique over the whole logical table."""
        return [self.shard_column, *[k for k in self.primary_key if k != self.shard_column]]

    @property
    def match(self) -> list[str]:
        # The MERGE matches on (part, physical key): within one part that names one row whatever its
        # shard value becomes, so an update of a data shard column moves the row instead of leaving
        # the old logical key behind. The logical key is kept unique by the collision checks.
        return [PART_COLUMN, *self.primary_key]

    def arrow(self) -> pa.Schema:
        fields = [pa.field(self.shard_column, pa.string())] if self.shard_from_label else []
        fields += [pa.field(c.name, c.type.arrow()) for c in self.columns]
        fields.append(pa.field(PART_COLUMN, pa.string()))
        return pa.schema(fields + [pa.field(n, t) for n, t in META_COLUMNS.items()])

    def document(self) -> str:
        """What a change of forces a reload: the parts, the shard column and the key."""
        return json.dumps({"shard_column": self.shard_column, "shard_from_label": self.shard_from_label,
                           "primary_key": list(self.primary_key), "parts": [list(p) for p in self.parts]},
                          sort_keys=True)


class LogicalSnapshot(DeltaFolder):
    """One logical table: ``<lake>/logical/<name>``."""

    def __init__(self, lake: Lake | LakeLocation | Path | str, name: str) -> None:
        super().__init__(lake, "logical", name)
        self.name = name

    def app_id(self, label: str) -> str:
        return f"databus:logical.{self.name}@{label}"

    def loaded_from_app_id(self, label: str) -> str:
        """Records the bootstrap SCN of the physical snapshot the part was loaded from."""
        return f"{self.app_id(label)}#loaded_from"

    def applied_scn(self, label: str) -> Scn | None:
        table = self._table()
        version = table.transaction_version(self.app_id(label)) if table is not None else None
        return Scn(version) if version is not None else None

    def loaded_from(self, label: str) -> Scn | None:
        table = self._table()
        version = table.transaction_version(self.loaded_from_app_id(label)) if table is not None else None
        return Scn(version) if version is not None else None

    def layout_document(self) -> str | None:
        table = self._table()
        if table is None:
            return None
        # Every commit of a sync carries the layout, so the newest commit's is the current one.
        return next(iter(table.history(1)), {}).get(LAYOUT_KEY)

    def read_pinned(self, labels: Sequence[str]) -> tuple[pa.Table, dict[str, Scn]]:
        """All rows (with metadata) and each part's applied SCN, from one version of the table."""
        table = self._table()
        if table is None:
            raise SnapshotMissingError(f"logical table {self.name} has not been written yet ({self.uri})",
                                       f"materialize the logical/{self.name} asset")
        scns = {}
        for label in labels:
            version = table.transaction_version(self.app_id(label))
            if version is None:
                raise SnapshotMissingError(f"logical table {self.name} holds no rows of part {label} yet",
                                           f"materialize the logical/{self.name} asset")
            scns[label] = Scn(version)
        return table.to_pyarrow_table(), scns


@dataclass(frozen=True, slots=True)
class LogicalPart:
    config: LogicalPartConfig
    log: ChangeLog
    snap: DeltaSnapshot

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def asset(self) -> str:
        return f"{self.config.source}/{self.config.table}"


def sync_logical(config: DatabusConfig, name: str, progress: Progress = lambda _: None,
                 spark: SparkLike | None = None) -> LogicalSyncResult:
    """Bring logical table ``name`` up to each part's change log.

    Loads the table from the parts' physical snapshots when it does not exist yet or can no longer
    follow the logs (a part added or removed, a physical snapshot bootstrapped again, a log that no
    longer reaches back to a part's SCN); then merges each part's log after the part's own applied
    SCN, all parts in one commit. A sync with nothing new for any part commits nothing.
    """
    from dagster_databus.snapshot.merge import engine_for
    from dagster_databus.spark.session import get_spark

    started = time.monotonic()
    engine = engine_for(spark if spark is not None else (lambda: get_spark(config.spark)), config)
    logical = config.logical_table(name)
    target = LogicalSnapshot(config.lake, name)
    lock = target.lock(f"logical table {name}", "wait for the other sync of this logical table to finish")
    with lock:
        parts = [LogicalPart(p, ChangeLog(config.lake, p.source), DeltaSnapshot(config.lake, p.source, p.table))
                 for p in logical.parts]
        for part in parts:
            _require_snapshot(logical, part)
            part.log.require_intact()
        layout = logical_layout(logical, parts)
        commits, loaded = 0, {p.label: 0 for p in parts}
        reason = _load_reason(target, layout, parts)
        if reason is not None:
            progress(f"logical {name}: loading from the physical snapshots: {reason}")
            loaded = engine.load_logical(target, layout, parts, progress)
            commits += 1
            progress(f"logical {name}: loaded {sum(loaded.values())} rows")
        applied = {p.label: _applied(target, p) for p in parts}
        until = {p.label: p.log.committed_scn() for p in parts}
        advancing = [p for p in parts if until[p.label] > applied[p.label]]
        by_op: dict[str, dict[str, int]] = {p.label: {} for p in parts}
        counts = MergeCounts()
        if advancing:
            for part in advancing:
                start = part.log.manifest().start_scn
                if start > applied[part.label]:
                    raise LogGapError(
                        f"logical table {name}: part {part.label} is at SCN {applied[part.label]}, but the change "
                        f"log of source {part.config.source!r} now starts after SCN {start}",
                        f"materialize the {part.asset} asset (its snapshot is the way past the gap), then this "
                        "logical table again; it reloads the part")
            by_op, counts = engine.merge_logical(target, layout, [(p, applied[p.label], until[p.label])
                                                                  for p in advancing], progress)
            commits += 1
        results = tuple(
            PartSyncResult(label=p.label, source=p.config.source, table=p.config.table, from_scn=applied[p.label],
                           to_scn=max(applied[p.label], until[p.label]), log_scn=until[p.label],
                           events=sum(by_op.get(p.label, {}).values()), events_by_op=by_op.get(p.label, {}),
                           loaded_rows=loaded[p.label])
            for p in parts)
        return LogicalSyncResult(
            name=name, parts=results, load_reason=reason, events=sum(r.events for r in results), counts=counts,
            row_count=target.row_count(), delta_version=target.version(), commits=commits,
            duration_s=time.monotonic() - started)


def _require_snapshot(logical: LogicalTableConfig, part: LogicalPart) -> None:
    """The part's physical snapshot exists and has followed every DDL its log recorded."""
    if part.snap.applied_scn() is None:
        raise SnapshotMissingError(
            f"logical table {logical.name}: part {part.label} needs the snapshot of "
            f"{part.config.source}.{part.config.table}, which has not been bootstrapped ({part.snap.uri})",
            f"materialize the {part.asset} asset first, then this logical table", asset=part.asset)
    ddl = part.log.ddl.last_for(part.config.table)
    if ddl is not None and ddl.scn > part.snap.absorbed_ddl_scn():
        # The rows changed without row events (or the columns did): only the physical snapshot's
        # re-read (or its evolution in place) can carry the part past that point, and it has not happened yet.
        raise SnapshotMissingError(
            f"logical table {logical.name}: table {part.config.source}.{part.config.table} was altered at SCN "
            f"{ddl.scn} ({ddl.statement[:120]}) and its snapshot has not followed the change yet",
            f"materialize the {part.asset} asset first (it re-reads the table), then this logical table; it "
            "reloads the part", asset=part.asset)


def logical_layout(logical: LogicalTableConfig, parts: Sequence[LogicalPart]) -> LogicalLayout:
    """The layout of the logical table; every part must have the same columns and primary key."""
    schemas: list[tuple[LogicalPart, TableSchema]] = []
    for part in parts:
        latest = part.log.schemas.latest(part.config.table)
        if latest is None:
            raise SnapshotMissingError(
                f"logical table {logical.name}: no schema of {part.config.source}.{part.config.table} is "
                "registered in its change log",
                f"materialize the {part.asset} asset first, then this logical table", asset=part.asset)
        schemas.append((part, latest[1]))
    first, reference = schemas[0]
    expected = {c.name: c.type for c in reference.columns}
    problems = []
    for part, schema in schemas[1:]:
        actual = {c.name: c.type for c in schema.columns}
        differences = [f"no column {c}" for c in expected if c not in actual]
        differences += [f"extra column {c}" for c in actual if c not in expected]
        differences += [f"{c} is {actual[c]}, not {expected[c]}" for c in expected
                        if c in actual and actual[c] != expected[c]]
        if schema.primary_key != reference.primary_key:
            differences.append(f"primary key ({', '.join(schema.primary_key)}), not "
                               f"({', '.join(reference.primary_key)})")
        if differences:
            problems.append(f"part {part.label} ({part.config.source}.{part.config.table}): "
                            + "; ".join(differences))
    if problems:
        raise SchemaDriftError(
            f"logical table {logical.name}: its parts do not have the same columns and primary key; compared with "
            f"part {first.label} ({first.config.source}.{first.config.table}): " + " | ".join(problems),
            "apply the same DDL to every shard (then capture and merge them), or list only tables of one shape "
            f"in logical_tables.{logical.name}.parts", logical_table=logical.name)
    return LogicalLayout(
        name=logical.name, shard_column=logical.shard_column,
        shard_from_label=logical.shard_column not in expected, columns=reference.columns,
        primary_key=reference.primary_key,
        parts=tuple((p.label, p.config.source, p.config.table) for p in parts))


def _load_reason(target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart]) -> str | None:
    """Why the table must be loaded from the physical snapshots before it can follow the logs."""
    if not target.exists():
        return "the logical table does not exist yet"
    if target.layout_document() != layout.document():
        return "its parts, shard column or key changed since it was written"
    for part in parts:
        applied = target.applied_scn(part.label)
        if applied is None:
            return f"part {part.label} has not been loaded yet"
        absorbed = part.snap.absorbed_ddl_scn()
        if target.loaded_from(part.label) != absorbed:
            # A re-read (DDL, TRUNCATE, `databus bootstrap`) changed rows without row events, or the snapshot
            # evolved in place to a new schema: either way the part is loaded again from it.
            return (f"the snapshot of {part.config.source}.{part.config.table} was bootstrapped again or evolved "
                    f"(SCN {absorbed})")
        start = part.log.manifest().start_scn
        if start > applied:
            return (f"the change log of source {part.config.source!r} now starts after SCN {start}, past part "
                    f"{part.label}'s SCN {applied}")
    return None


def _applied(target: LogicalSnapshot, part: LogicalPart) -> Scn:
    scn = target.applied_scn(part.label)
    if scn is None:  # _load records every part; anything else is a bug worth a loud stop
        raise RuntimeError(f"logical table {target.name}: part {part.label} has no applied SCN after loading")
    return scn


def load_in_process(target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart]) -> dict[str, int]:
    """Overwrite the table with every part's physical snapshot, each at its own applied SCN, in this process
    (the local engine)."""
    pieces, txns, rows = [], [], {}
    for part in parts:
        data, applied, absorbed = part.snap.read_pinned(with_meta=True)
        pieces.append(_conform_snapshot(data, layout, part.label))
        rows[part.label] = data.num_rows
        txns += [Transaction(app_id=target.app_id(part.label), version=applied.value),
                 Transaction(app_id=target.loaded_from_app_id(part.label), version=absorbed.value)]
    data = pa.concat_tables(pieces)
    if not layout.shard_from_label:
        _refuse_nulls(layout, data)
        grouped = data.group_by(layout.key).aggregate([(PART_COLUMN, "count_distinct"), (PART_COLUMN, "distinct")])
        clashes = grouped.filter(pc.greater(grouped[f"{PART_COLUMN}_count_distinct"], 1)).slice(0, 3).to_pylist()
        if clashes:
            raise collision(layout, [(_key_text(layout, c), sorted(c[f"{PART_COLUMN}_distinct"])) for c in clashes])
    target.prepare()
    crash_point("logical_commit")
    with disk_errors(f"loading logical table {target.name} into Delta", target.path):
        write_deltalake(target.uri, data, mode="overwrite", schema_mode="overwrite",
                        storage_options=target.storage_options,
                        commit_properties=CommitProperties(app_transactions=txns,
                                                           custom_metadata={LAYOUT_KEY: layout.document()}),
                        description=f"databus logical table {target.name}")
    crash_point("logical_committed")
    return rows


def _conform_snapshot(data: pa.Table, layout: LogicalLayout, label: str) -> pa.Table:
    """A physical snapshot's rows in the logical columns: shard label and part added; a column the
    snapshot does not have yet (its merge has not caught up with a new column) is null."""
    n = data.num_rows
    columns: list[Any] = []
    for field in layout.arrow():
        if field.name == PART_COLUMN or (layout.shard_from_label and field.name == layout.shard_column):
            columns.append(pa.array([label] * n, pa.string()))
        elif field.name in data.column_names:
            columns.append(data[field.name].cast(field.type))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=layout.arrow())


def merge_in_process(target: LogicalSnapshot, layout: LogicalLayout, ranges: Sequence[tuple[LogicalPart, Scn, Scn]],
                     memory_bytes: int, spill_dir: Path | None,
                     progress: Progress) -> tuple[dict[str, dict[str, int]], MergeCounts]:
    """Merge each part's log range (applied, until] in one commit that moves every part's SCN, in this
    process (the local engine).

    Each part's changes are read from its log in bulk and reduced to the newest per key
    (``NewestPerKey``: bounded by ``memory_bytes``, spilling past it), as the physical merge does; SCNs
    are only ever compared within one part's own log."""
    by_op: dict[str, dict[str, int]] = {part.label: {} for part, _, _ in ranges}
    reduced_batches: list[pa.RecordBatch] = []
    for part, since, until in ranges:
        latest = part.log.schemas.latest(part.config.table)
        if latest is None:
            continue
        schema = latest[1]
        reducer = NewestPerKey(change_schema(schema), schema.primary_key, memory_bytes, spill_dir)
        try:
            reducer.extend(table_changes(part.log, schema, since, until))
            by_op[part.label] = dict(reducer.stats.events_by_op)
            reduced_batches += [_as_part(batch, layout, part) for batch in reducer.results()]
        finally:
            reducer.close()
    reduced = pa.Table.from_batches(reduced_batches, _part_schema(layout))
    if not layout.shard_from_label:
        grouped = reduced.group_by(layout.key).aggregate([(PART_COLUMN, "count_distinct"), (PART_COLUMN, "distinct")])
        clashes = grouped.filter(pc.greater(grouped[f"{PART_COLUMN}_count_distinct"], 1)).slice(0, 3).to_pylist()
        if clashes:
            raise collision(layout, [(_key_text(layout, c), sorted(c[f"{PART_COLUMN}_distinct"])) for c in clashes])
    merged = conform_changes(reduced, layout.arrow())
    if not layout.shard_from_label:
        _refuse_nulls(layout, merged)
        _refuse_held_elsewhere(target, layout, merged)
    spans = ", ".join(f"{part.label} {since}..{until}" for part, since, until in ranges)
    progress(f"logical {target.name}: merging {merged.num_rows} rows from "
             f"{sum(sum(v.values()) for v in by_op.values())} events ({spans})")
    txns = [Transaction(app_id=target.app_id(part.label), version=until.value) for part, _, until in ranges]
    props = CommitProperties(app_transactions=txns, custom_metadata={LAYOUT_KEY: layout.document()})
    crash_point("logical_commit")
    with disk_errors(f"committing logical table {target.name} to Delta", target.path):
        counts = merge_with_delta_rs(target, layout.match, merged, props)
    crash_point("logical_committed")
    return by_op, counts


def _part_schema(layout: LogicalLayout) -> pa.Schema:
    """A part's reduced changes: the logical columns (the shard's own or its label), then the log's fields."""
    fields = [f for f in layout.arrow() if f.name not in META_COLUMNS]
    meta = dict(CHANGE_META)
    return pa.schema([*fields, *(pa.field(n, meta[n]) for n in DELIVERED_META)])


def _as_part(batch: pa.RecordBatch, layout: LogicalLayout, part: LogicalPart) -> pa.RecordBatch:
    """One part's reduced changes in ``_part_schema``: the part's label in ``PART_COLUMN`` (and in the
    shard column when the label fills it)."""
    label = pa.array([part.label] * batch.num_rows, pa.string())
    columns = {name: batch.column(name) for name in batch.schema.names}
    columns[PART_COLUMN] = label
    if layout.shard_from_label:
        columns[layout.shard_column] = label
    target = _part_schema(layout)
    return pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in target], schema=target)


def _refuse_nulls(layout: LogicalLayout, data: pa.Table) -> None:
    shard = data[layout.shard_column]
    if shard.null_count:
        raise null_shard(layout, data.filter(pc.is_null(shard))[PART_COLUMN][0].as_py())


def null_shard(layout: LogicalLayout, part: str) -> ShardCollisionError:
    return ShardCollisionError(
        f"logical table {layout.name}: part {part} has rows whose shard column {layout.shard_column!r} is NULL, "
        "so their logical key cannot tell the shards apart",
        f"fill {layout.shard_column} in every row of part {part}, or give logical_tables.{layout.name} a "
        "shard_column the physical tables do not have, so each part's label fills it",
        logical_table=layout.name, part=part)


def _refuse_held_elsewhere(target: LogicalSnapshot, layout: LogicalLayout, batch: pa.Table) -> None:
    """A key that arrives from one part while the table holds it from another is a collision. The
    table's key columns are scanned a batch at a time, so memory stays bounded whatever its size."""
    columns = [*layout.key, PART_COLUMN]
    incoming = batch.select(columns)
    shards = pc.unique(batch[layout.shard_column])
    held_schema = pa.schema([batch.schema.field(c) for c in columns])
    clashes: list[dict[str, Any]] = []
    # Filtered after the scan: pushing the filter into the Delta dataset trips over string vs
    # string_view statistics in pyarrow. Only the key columns are read.
    for scanned in target.delta().to_pyarrow_dataset().to_batches(columns=columns):
        held = pa.Table.from_batches([scanned]).cast(held_schema)
        held = held.filter(pc.is_in(held[layout.shard_column], value_set=shards))
        joined = incoming.join(held.rename_columns([*layout.key, "__held"]), keys=layout.key, join_type="inner")
        clashes += joined.filter(pc.not_equal(joined[PART_COLUMN], joined["__held"])).slice(0, 3).to_pylist()
        if len(clashes) >= 3:
            break
    if clashes:
        raise collision(layout, [(_key_text(layout, c), [c[PART_COLUMN], c["__held"]]) for c in clashes[:3]],
                        held=True)


def _key_text(layout: LogicalLayout, row: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={row[k]!r}" for k in layout.key) + ")"


def collision(layout: LogicalLayout, clashes: list[tuple[str, list[str]]], held: bool = False) -> ShardCollisionError:
    if held:
        detail = "; ".join(f"key {key} arrives from part {parts[0]} but is held from part {parts[1]}"
                           for key, parts in clashes)
    else:
        detail = "; ".join(f"key {key} arrives from parts {', '.join(parts)}" for key, parts in clashes)
    return ShardCollisionError(
        f"logical table {layout.name}: the shard column {layout.shard_column!r} does not separate the shards: "
        f"{detail}; nothing was committed",
        f"give logical_tables.{layout.name} a shard_column the physical tables do not have (each part's label "
        f"then fills it), or fix the data so each value of {layout.shard_column} lives on one shard",
        logical_table=layout.name)


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
    data = table.to_pyarrow_table()  # rows and SCNs from one version
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
