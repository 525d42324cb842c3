"""One table's committed changes as Arrow record batches, decoded a segment at a time.

The merge (in-process and in Spark tasks) reads the log through this: each batch has the
table's latest columns in their snapshot (Delta) types, then the event metadata. A column an
older schema version lacks is null; a dropped column is left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.log.store import ChangeLog, SegmentInfo, avro_conversions

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
                    rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The events of ``schema.table`` in one segment (see ``table_changes``)."""
    lo, hi = since.value, until.value if until is not None else None
    target = change_schema(schema)
    versions: dict[str, TableSchema] = {}
    pending: list[tuple[dict[str, Any], str]] = []
    with log.open_segment(segment) as (records, row_tables):
        names = {name for name, (table, _) in row_tables.items() if table == schema.table}
        for name, rec in records:
            if name not in names:
                continue
            scn = rec["__scn"]
            if scn <= lo or (hi is not None and scn > hi):
                continue
            pending.append((rec, name))
            if len(pending) >= rows:
                yield _to_batch(log, schema, target, pending, row_tables, versions)
                pending = []
    if pending:
        yield _to_batch(log, schema, target, pending, row_tables, versions)


def _to_batch(log: ChangeLog, schema: TableSchema, target: pa.Schema, pending: list[tuple[dict[str, Any], str]],
              row_tables: dict[str, tuple[str, int]], versions: dict[str, TableSchema]) -> pa.RecordBatch:
    for _, name in pending:
        if name not in versions:
            versions[name] = log.schemas.load(*row_tables[name])
    for name in {name for _, name in pending}:
        # time is stored as microseconds, its snapshot form too: no round trip through timedelta.
        conversions = [(c, f) for c, f in avro_conversions(versions[name], "from")
                       if versions[name].column(c).type.kind != "time"]
        if conversions:
            for rec, rec_name in pending:
                if rec_name == name:
                    for column, convert in conversions:
                        rec[column] = convert(rec[column])
    recs = [rec for rec, _ in pending]
    arrays = [pa.array([rec.get(c.name) for rec in recs], type=c.type.arrow()) if c.type.kind == "time"
              else c.type.to_arrow([rec.get(c.name) for rec in recs]) for c in schema.columns]
    arrays += [pa.array([rec[n] for rec in recs], type=t) for n, t in CHANGE_META]
    return pa.RecordBatch.from_arrays(arrays, schema=target)
