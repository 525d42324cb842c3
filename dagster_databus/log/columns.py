"""One table's committed changes as Arrow record batches, decoded a segment at a time.

The merge (in-process and in Spark tasks) reads the log through this: each batch has the
table's latest columns in their snapshot (Delta) types, then the event metadata. A column an
older schema version lacks is null; a dropped column is left out.

Segments are decoded in bulk by ``avro_decode`` (no Python per value, no per-record dicts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ChangeLogCorruptError
from dagster_databus.log.avro.container import read_container
from dagster_databus.log.avro.decoder import decode_segment
from dagster_databus.log.avro.fields import Field
from dagster_databus.log.store import EVENT_AVRO_FIELDS, ROW_NAMESPACE, ChangeLog, SegmentInfo

# Event metadata after the table's own columns; ``__partition`` is the key's stored hash bucket.
CHANGE_META: tuple[tuple[str, pa.DataType], ...] = (
    ("__scn", pa.int64()), ("__seq", pa.int32()), ("__window_scn", pa.int64()), ("__op", pa.string()),
    ("__commit_ts_ms", pa.int64()), ("__partition", pa.int32()))

BATCH_ROWS = 65_536


def change_schema(schema: TableSchema) -> pa.Schema:
    """The batches' schema: ``schema``'s columns in snapshot types, then ``CHANGE_META``."""
    return pa.schema([*schema.arrow(with_meta=False), *(pa.field(n, t) for n, t in CHANGE_META)])


def table_changes(log: ChangeLog, schema: TableSchema, since: Scn, until: Scn | None = None,
                  rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Events of ``schema.table`` with ``since < scn <= until``, in log order, ``rows`` at most per batch."""
    for segment in log.manifest().between(since, until):
        if schema.table in segment.tables:
            yield from segment_changes(log, segment, schema, since, until, rows)


def segment_changes(log: ChangeLog, segment: SegmentInfo, schema: TableSchema, since: Scn, until: Scn | None,
                    rows: int = BATCH_ROWS, byte_range: tuple[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The events of ``schema.table`` in one segment (see ``table_changes``); with ``byte_range``, those
    of the blocks that begin in it (a part of a large segment, read by one of several tasks)."""
    target = change_schema(schema)
    low, high = pa.scalar(since.value, pa.int64()), pa.scalar(until.value if until else 2**63 - 1, pa.int64())
    try:
        for decoded_batch in _decoded(log, segment, schema.table, byte_range):
            batch = _conform(decoded_batch, target)
            scn = batch.column("__scn")
            batch = batch.filter(pc.and_(pc.greater(scn, low), pc.less_equal(scn, high)))
            for start in range(0, batch.num_rows, rows):
                yield batch.slice(start, rows)
    except ValueError as exc:
        raise ChangeLogCorruptError(
            f"segment {segment.file} of source {log.source!r} cannot be decoded: {exc}",
            "restore the segment from backup, or bootstrap the source", source=log.source) from None


def _decoded(log: ChangeLog, segment: SegmentInfo, table: str,
             byte_range: tuple[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The segment's records of ``table`` in log order (a segment holds one schema version per table, so
    one union branch). The segment is opened once: from a store, that is one request (a part of it:
    requests for the byte ranges read)."""
    with log.open_segment(segment, ranged=byte_range is not None) as f:
        metadata, _ = read_container(f)
        rows = json.loads(metadata.get("databus.rows") or "null")
        if not isinstance(rows, dict):
            raise ValueError("no databus.rows metadata")
        branches = {f"{ROW_NAMESPACE}.{name}": [*(Field(c.name, c.type) for c in log.schemas.load(t, v).columns),
                                               *EVENT_AVRO_FIELDS]
                    for name, (t, v) in rows.items() if t == table}
        if not branches:
            return
        if len(branches) > 1:
            raise ValueError(f"{len(branches)} row records of table {table!r}")
        f.seek(0)
        for _, batch, _ in decode_segment(f, branches, byte_range=byte_range):
            yield batch


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    names = batch.schema.names
    arrays = [batch.column(f.name).cast(f.type) if f.name in names else pa.nulls(batch.num_rows, f.type)
              for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)
