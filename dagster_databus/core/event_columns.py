"""The event columns: what every change carries beside its row, defined once.

Change batches hold them in Arrow (``EVENT_SCHEMA``, after the table's columns); the change log
writes them as Avro fields after each row record's columns (``log.segments``); readers of the log
hand the merge, the snapshots and Spark ``CHANGE_META`` beside the table's columns.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa


class EventColumn(NamedTuple):
    name: str
    type: pa.DataType
    doc: str = ""  # written into the change log's Avro schema


EVENT_COLUMNS: tuple[EventColumn, ...] = (
    EventColumn("__scn", pa.int64()),
    EventColumn("__window_scn", pa.int64(), "end SCN of the consistency window"),
    EventColumn("__seq", pa.int32(), "position within the window"),
    EventColumn("__op", pa.string(), "i, u or d"),
    EventColumn("__key", pa.string(), "primary key values as a JSON array (core.events.encode_key)"),
    EventColumn("__partition", pa.int32(), "crc32(key) mod 65536, for server-side filters"),
    EventColumn("__commit_ts_ms", pa.int64()),
)
EVENT_SCHEMA = pa.schema([(c.name, c.type) for c in EVENT_COLUMNS])
EVENT_NAMES: tuple[str, ...] = tuple(EVENT_SCHEMA.names)
# What a reader of the log delivers beside a table's columns, in this order: each event's place in
# commit order, its operation and commit time (the key is in the row's own columns).
DELIVERED_META: tuple[str, ...] = ("__scn", "__seq", "__window_scn", "__op", "__commit_ts_ms")
# The change batches the merge reads (``log.columns``): ``DELIVERED_META`` and the key's hash bucket.
CHANGE_META: tuple[tuple[str, pa.DataType], ...] = tuple(
    (name, EVENT_SCHEMA.field(name).type) for name in (*DELIVERED_META, "__partition"))
