"""One table's committed changes as Arrow record batches, decoded a segment at a time.

The merge (in-process and in Spark tasks) reads the log through this: each batch has the
table's latest columns in their snapshot (Delta) types, then the event metadata. A column an
older schema version lacks is null, or the constant default it was added with (the value the
source gave the rows that existed then); a dropped column is left out.

Segments are decoded in bulk by the one segment reader (``log.segments.decode_tables``: no Python
per value, no per-record dicts). Callers pass a ``ChangeLog``; this module needs only its layout and
row schemas (``CommittedLog``), so it sits below ``log.changelog``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.event_columns import CHANGE_META
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.log.manifest import SegmentInfo, read_manifest
from dagster_databus.log.segments import decode_tables, undecodable

if TYPE_CHECKING:
    from dagster_databus.log.layout import LogLayout
    from dagster_databus.log.schemas import SchemaRegistry

BATCH_ROWS = 65_536


class CommittedLog(Protocol):
    """What reading a table's changes needs of a log: where it is and its row schemas (``ChangeLog`` has both)."""

    @property
    def layout(self) -> LogLayout: ...
    @property
    def schemas(self) -> SchemaRegistry: ...


def change_schema(schema: TableSchema) -> pa.Schema:
    """The batches' schema: ``schema``'s columns in snapshot types, then ``CHANGE_META``."""
    return pa.schema([*schema.arrow(with_meta=False), *(pa.field(n, t) for n, t in CHANGE_META)])


def table_changes(log: CommittedLog, schema: TableSchema, since: Scn, until: Scn | None = None,
                  rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Events of ``schema.table`` with ``since < scn <= until``, in log order, ``rows`` at most per batch."""
    for segment in read_manifest(log.layout).between(since, until):
        if schema.table in segment.tables:
            yield from segment_changes(log, segment, schema, since, until, rows)


def segment_changes(log: CommittedLog, segment: SegmentInfo, schema: TableSchema, since: Scn, until: Scn | None,
                    rows: int = BATCH_ROWS, byte_range: tuple[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The events of ``schema.table`` in one segment (see ``table_changes``); with ``byte_range``, those
    of the blocks that begin in it (a part of a large segment, read by one of several tasks)."""
    target = change_schema(schema)
    fills = {name: value for name, value in log.schemas.added_fills(schema.table).items() if name in target.names}
    low, high = pa.scalar(since.value, pa.int64()), pa.scalar(until.value if until else 2**63 - 1, pa.int64())
    try:
        for decoded, wanted in decode_tables(log.layout, log.schemas, segment, {schema.table}, byte_range):
            if len(wanted) > 1:  # a segment holds one schema version per table: one branch, in log order
                raise ValueError(f"{len(wanted)} row records of table {schema.table!r}")
            for _, decoded_batch, _ in decoded:
                batch = _conform(decoded_batch, target, fills)
                scn = batch.column("__scn")
                batch = batch.filter(pc.and_(pc.greater(scn, low), pc.less_equal(scn, high)))
                for start in range(0, batch.num_rows, rows):
                    yield batch.slice(start, rows)
    except ValueError as exc:  # a value the snapshot's column type refuses
        raise undecodable(log.layout.source, segment, exc) from None


def _conform(batch: pa.RecordBatch, target: pa.Schema, fills: dict[str, Any]) -> pa.RecordBatch:
    """A batch of an older schema version in ``target``'s columns: a column it lacks is its added default
    (``fills``), or null."""
    names = batch.schema.names
    arrays = [batch.column(f.name).cast(f.type) if f.name in names else missing(f, batch.num_rows, fills)
              for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def missing(field: pa.Field, rows: int, fills: dict[str, Any]) -> pa.Array:
    """A column rows of an older shape lack: the value the source gave such rows (``fills``), or null."""
    if field.name not in fills:
        return pa.nulls(rows, field.type)
    return pa.repeat(fills[field.name], rows).cast(field.type)
