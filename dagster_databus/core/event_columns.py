"""The event columns: what every change carries beside its row, defined once.

Change batches hold them in Arrow (``EVENT_SCHEMA``, after the table's columns); the change log
writes them as Avro fields after each row record's columns (``log.segments``); readers of the log
hand the merge, the snapshots and Spark ``CHANGE_META`` beside the table's columns.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from dagster_databus.core.types import ColumnType


class EventColumn(NamedTuple):
    name: str
    type: ColumnType  # Arrow, Avro and Spark types all follow from it
    doc: str = ""  # written into the change log's Avro schema


_LONG, _INT, _TEXT = ColumnType("long"), ColumnType("integer"), ColumnType("string")
EVENT_COLUMNS: tuple[EventColumn, ...] = (
    EventColumn("__scn", _LONG),
    EventColumn("__window_scn", _LONG, "end SCN of the consistency window"),
    EventColumn("__seq", _INT, "position within the window"),
    EventColumn("__op", _TEXT, "i, u or d"),
    EventColumn("__key", _TEXT, "primary key values as a JSON array (core.events.encode_key)"),
    EventColumn("__partition", _INT, "crc32(key) mod 65536, for server-side filters"),
    EventColumn("__commit_ts_ms", _LONG),
)
EVENT_SCHEMA = pa.schema([(c.name, c.type.arrow()) for c in EVENT_COLUMNS])
EVENT_NAMES: tuple[str, ...] = tuple(EVENT_SCHEMA.names)
EVENT_TYPES: dict[str, ColumnType] = {c.name: c.type for c in EVENT_COLUMNS}
# What a reader of the log delivers beside a table's columns, in this order: each event's place in
# commit order, its operation and commit time (the key is in the row's own columns).
DELIVERED_META: tuple[str, ...] = ("__scn", "__seq", "__window_scn", "__op", "__commit_ts_ms")
# The change batches the merge reads (``log.columns``): ``DELIVERED_META`` and the key's hash bucket.
CHANGE_META: tuple[tuple[str, pa.DataType], ...] = tuple(
    (name, EVENT_SCHEMA.field(name).type) for name in (*DELIVERED_META, "__partition"))
