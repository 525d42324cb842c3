"""Committed changes read back from the log as events and whole windows (consumers, replays, tests).

Segments are decoded in bulk a group of blocks at a time (``log.segments.decode_tables``); each event
is built from its row's column values, with no per-record Avro decoding in Python. The merge reads
the same segments as Arrow batches instead (``log.columns``). Both read functions take the log's
``LogLayout`` and ``SchemaRegistry`` (``ChangeLog.read`` and ``read_windows`` pass them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.event_columns import DELIVERED_META
from dagster_databus.core.events import OPS, ChangeEvent, Window
from dagster_databus.core.scn import Scn
from dagster_databus.log.avro.decoder import Decoded
from dagster_databus.log.manifest import read_manifest
from dagster_databus.log.segments import TableVersion, decode_tables, undecodable

if TYPE_CHECKING:
    from dagster_databus.log.layout import LogLayout
    from dagster_databus.log.manifest import SegmentInfo
    from dagster_databus.log.schemas import SchemaRegistry

KeyFilter = Callable[[str, str], bool]  # (table, key as stored: a JSON array) -> deliver?


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A change event as read back from the log, with the window it belongs to."""

    window_scn: Scn
    schema_version: int
    event: ChangeEvent


def read_events(layout: LogLayout, schemas: SchemaRegistry, since: Scn = Scn.BEGINNING, until: Scn | None = None,
                tables: Iterable[str] | None = None, keep: KeyFilter | None = None) -> Iterator[LogEvent]:
    """Committed events with ``since < scn <= until``, in log order.

    ``keep(table, key_json)`` is a server-side filter on the stored key, applied before an event is built.
    """
    wanted = set(tables) if tables is not None else None
    for segment in read_manifest(layout).between(since, until):
        yield from _segment_events(layout, schemas, segment, since, until, wanted, keep)


def read_windows(layout: LogLayout, schemas: SchemaRegistry, since: Scn = Scn.BEGINNING, until: Scn | None = None,
                 tables: Iterable[str] | None = None, keep: KeyFilter | None = None) -> Iterator[Window]:
    """Whole windows after ``since`` (as far as the filters leave them); ``until`` must be a window
    boundary (or None). A window the filters empty entirely is not yielded."""
    current: list[ChangeEvent] = []
    versions: list[int] = []
    current_scn: Scn | None = None
    for item in read_events(layout, schemas, since, until, tables, keep):
        if current_scn is not None and item.window_scn is not current_scn:  # one Scn object per window
            yield Window(scn=current_scn, events=tuple(current), schema_versions=tuple(versions))
            current, versions = [], []
        current_scn = item.window_scn
        current.append(item.event)
        versions.append(item.schema_version)
    if current_scn is not None:
        yield Window(scn=current_scn, events=tuple(current), schema_versions=tuple(versions))


def _segment_events(layout: LogLayout, schemas: SchemaRegistry, segment: SegmentInfo, since: Scn,
                    until: Scn | None, tables: set[str] | None, keep: KeyFilter | None = None) -> Iterator[LogEvent]:
    """The segment's events in log order."""
    window = Scn.BEGINNING  # the events of a window share one Scn object
    keys: dict[TableVersion, tuple[str, ...]] = {}
    try:
        for decoded, wanted in decode_tables(layout, schemas, segment, tables):
            for _, table, version, row in _events(schemas, decoded, wanted, since, until, keep):
                if (table, version) not in keys:
                    keys[table, version] = tuple(schemas.load(table, version).primary_key)
                scn, window_scn = row.pop("__scn"), row.pop("__window_scn")
                if window_scn != window.value:
                    window = Scn(window_scn)
                seq, op, commit_ts_ms = row.pop("__seq"), row.pop("__op"), row.pop("__commit_ts_ms")
                key = tuple(row[k] for k in keys[table, version])
                yield LogEvent(window_scn=window, schema_version=version, event=ChangeEvent(
                    scn=window if scn == window.value else Scn(scn), seq=seq, table=table, op=OPS[op],
                    key=key, row=row, commit_ts_ms=commit_ts_ms))
    except ValueError as exc:  # a value the row's column type refuses: the segment does not hold what it says
        raise undecodable(layout.source, segment, exc) from None


def _events(schemas: SchemaRegistry, decoded: list[Decoded], wanted: dict[str, TableVersion], since: Scn,
            until: Scn | None, keep: KeyFilter | None) -> list[tuple[int, str, int, dict[str, Any]]]:
    """(position, table, version, row with event fields) of the decoded records to deliver, in log order."""
    out: list[tuple[int, str, int, dict[str, Any]]] = []
    for name, batch, positions in decoded:
        table, version = wanted[name]
        scn = batch.column("__scn")
        mask = pc.greater(scn, since.value)
        if until is not None:
            mask = pc.and_(mask, pc.less_equal(scn, until.value))
        if keep is not None:
            mask = pc.and_(mask, pa.array([keep(table, k) for k in batch.column("__key").to_pylist()]))
        selected = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if len(selected) < batch.num_rows:
            batch, positions = batch.take(pa.array(selected)), positions[selected]
        schema = schemas.load(table, version)
        images = schema.rows_from_arrow(batch.select([*schema.column_names, *DELIVERED_META]))
        out += zip(positions.tolist(), repeat(table), repeat(version), images, strict=False)
    if len(decoded) > 1:
        out.sort(key=itemgetter(0))
    return out
