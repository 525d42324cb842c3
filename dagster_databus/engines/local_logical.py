"""The local engine's logical loads and merges (``engines.local``): the parts' rows conformed to the layout,
checked for keys another shard holds, and written by delta-rs in this process."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, Transaction, write_deltalake

from dagster_databus.core.batch import repeated
from dagster_databus.core.event_columns import CHANGE_META, DELIVERED_META
from dagster_databus.core.progress import Progress
from dagster_databus.core.schema import META_COLUMNS
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import conform_changes, merge_with_delta_rs
from dagster_databus.dataplane.logical import (
    LAYOUT_KEY,
    PART_COLUMN,
    LogicalLayout,
    LogicalPart,
    LogicalSnapshot,
    collision,
    key_text,
    null_shard,
)
from dagster_databus.dataplane.reduce import NewestPerKey
from dagster_databus.dataplane.results import LogicalLoaded, LogicalMerged
from dagster_databus.log.columns import change_schema, table_changes
from dagster_databus.storage.durable import crash_point, disk_errors


def load_in_process(target: LogicalSnapshot, layout: LogicalLayout, parts: Sequence[LogicalPart]) -> LogicalLoaded:
    """Overwrite the table with every part's physical snapshot, each at its own applied SCN, in this process
    (the local engine)."""
    pieces: list[pa.Table] = []
    txns: list[Transaction] = []
    rows: dict[str, int] = {}
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
            raise collision(layout, [(key_text(layout, c), sorted(c[f"{PART_COLUMN}_distinct"])) for c in clashes])
    target.prepare()
    crash_point("logical_commit")
    with disk_errors(f"loading logical table {target.name} into Delta", target.path):
        write_deltalake(target.uri, data, mode="overwrite", schema_mode="overwrite",
                        storage_options=target.storage_options,
                        commit_properties=CommitProperties(app_transactions=txns,
                                                           custom_metadata={LAYOUT_KEY: layout.document()}),
                        description=f"databus logical table {target.name}")
    crash_point("logical_committed")
    return LogicalLoaded(rows)


def _conform_snapshot(data: pa.Table, layout: LogicalLayout, label: str) -> pa.Table:
    """A physical snapshot's rows in the logical columns: shard label and part added; a column the
    snapshot does not have yet (its merge has not caught up with a new column) is null."""
    n = data.num_rows
    columns: list[Any] = []
    for field in layout.arrow():
        if field.name == PART_COLUMN or (layout.shard_from_label and field.name == layout.shard_column):
            columns.append(repeated(label, pa.string(), n))
        elif field.name in data.column_names:
            columns.append(data[field.name].cast(field.type))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=layout.arrow())


def merge_in_process(target: LogicalSnapshot, layout: LogicalLayout, ranges: Sequence[tuple[LogicalPart, Scn, Scn]],
                     memory_bytes: int, spill_dir: Path | None,
                     progress: Progress) -> LogicalMerged:
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
        reducer = NewestPerKey(change_schema(schema), schema.primary_key, memory_bytes, spill_dir, at_commit=True)
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
            raise collision(layout, [(key_text(layout, c), sorted(c[f"{PART_COLUMN}_distinct"])) for c in clashes])
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
    return LogicalMerged(by_op, counts)


def _part_schema(layout: LogicalLayout) -> pa.Schema:
    """A part's reduced changes: the logical columns (the shard's own or its label), then the log's fields."""
    fields = [f for f in layout.arrow() if f.name not in META_COLUMNS]
    meta = dict(CHANGE_META)
    return pa.schema([*fields, *(pa.field(n, meta[n]) for n in DELIVERED_META)])


def _as_part(batch: pa.RecordBatch, layout: LogicalLayout, part: LogicalPart) -> pa.RecordBatch:
    """One part's reduced changes in ``_part_schema``: the part's label in ``PART_COLUMN`` (and in the
    shard column when the label fills it)."""
    label = repeated(part.label, pa.string(), batch.num_rows)
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
    for scanned in target.dataset().to_batches(columns=columns):
        held = pa.Table.from_batches([scanned]).cast(held_schema)
        held = held.filter(pc.is_in(held[layout.shard_column], value_set=shards))
        joined = incoming.join(held.rename_columns([*layout.key, "__held"]), keys=layout.key, join_type="inner")
        clashes += joined.filter(pc.not_equal(joined[PART_COLUMN], joined["__held"])).slice(0, 3).to_pylist()
        if len(clashes) >= 3:
            break
    if clashes:
        raise collision(layout, [(key_text(layout, c), [c[PART_COLUMN], c["__held"]]) for c in clashes[:3]],
                        held=True)
