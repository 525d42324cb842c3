"""What a change-log segment holds, and the one way to read it back.

A segment is an Avro object container file whose schema is a union of one row record per table
(and schema version) it holds: the table's columns, then the event fields (``EVENT_FIELDS``). Its
``databus.rows`` metadata maps each record's name to its (table, schema version). The writer
(``log.writer``) builds the union with ``segment_schema``; every reader (events in ``log.reader``,
Arrow batches in ``log.columns``, Spark tasks) decodes a segment through ``decode_tables`` (the
log's ``LogLayout`` and ``SchemaRegistry``), which opens it with ``open_segment``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from dagster_databus.core.event_columns import EVENT_COLUMNS, EVENT_NAMES
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import ChangeLogCorruptError, UnsupportedTypeError
from dagster_databus.log.avro.container import read_container
from dagster_databus.log.avro.decoder import Decoded, Decoder
from dagster_databus.log.avro.fields import Field

if TYPE_CHECKING:
    from dagster_databus.log.layout import LogLayout
    from dagster_databus.log.manifest import SegmentInfo
    from dagster_databus.log.schemas import SchemaRegistry

# The event's own fields, after the table's columns in each row record of a segment. Columns named
# like these are refused when the segment schema is built (they would also clash in the snapshot).
EVENT_FIELDS: list[dict[str, Any]] = [
    {"name": c.name, "type": c.type.avro(), **({"doc": c.doc} if c.doc else {})} for c in EVENT_COLUMNS]
# How the columnar encoder writes them (``EVENT_SCHEMA`` holds them in Arrow).
EVENT_AVRO_FIELDS = tuple(Field(c.name, c.type, nullable=False) for c in EVENT_COLUMNS)
ROW_NAMESPACE = "databus.segment"
TableVersion = tuple[str, int]


def row_fields(schemas: SchemaRegistry, table: str, version: int) -> list[Field]:
    """The fields of the row record of ``table`` in schema ``version``: its columns, then the event's."""
    return [*(Field(c.name, c.type) for c in schemas.load(table, version).columns), *EVENT_AVRO_FIELDS]


def segment_schema(schemas: SchemaRegistry, source: str,
                   versions: Mapping[str, int]) -> tuple[list[dict[str, Any]], dict[str, TableVersion]]:
    """A union of one row record per table of ``versions`` (its columns, then EVENT_FIELDS), named
    r0, r1, ... (table names need not be Avro names), and each record's (table, version)."""
    records, rows = [], {}
    for i, (table, version) in enumerate(sorted(versions.items())):
        record = schemas.record(table, version)
        clash = [f["name"] for f in record["fields"] if f["name"] in EVENT_NAMES]
        if clash:
            raise UnsupportedTypeError(
                f"table {table!r} of source {source!r} has columns named {', '.join(clash)}, which "
                "the change log and the snapshots reserve for event fields",
                "rename the columns in the source, or leave the table out of the config",
                source=source, table=table)
        records.append({**record, "name": f"r{i}", "namespace": ROW_NAMESPACE,
                        "fields": [*record["fields"], *EVENT_FIELDS]})
        rows[f"r{i}"] = (table, version)
    return records, rows


def open_segment(layout: LogLayout, segment: SegmentInfo, ranged: bool = False) -> BinaryIO:
    """A committed segment's bytes as a binary file (``ranged``: one that reads only the byte ranges
    asked for, for reading a part of a large segment); a missing one is damage, named."""
    key = layout.segment_key(segment.file)
    try:
        return layout.objects.reader(key) if ranged else layout.objects.open(key)
    except FileNotFoundError:
        raise ChangeLogCorruptError(
            f"segment {segment.file} (SCN {segment.first_scn}..{segment.last_scn}) is listed in "
            f"{layout.where('manifest')} but missing from {layout.where('segments')}",
            "restore the segment from backup, or bootstrap the source", source=layout.source) from None


def decode_tables(layout: LogLayout, schemas: SchemaRegistry, segment: SegmentInfo,
                  tables: Collection[str] | None = None, byte_range: tuple[int, int] | None = None,
                  ) -> Iterator[tuple[list[Decoded], dict[str, TableVersion]]]:
    """The records of ``tables`` (None: every table) in ``segment``, decoded in bulk a group of blocks
    at a time: each group's (record name, batch, positions) per branch, and which (table, schema
    version) each record name is. With ``byte_range``, only the blocks that begin in it (a part of
    a large segment, read by one of several tasks), through a file that reads only those ranges.

    A segment that is missing, written without ``databus.rows``, or damaged raises
    ``ChangeLogCorruptError`` naming it.
    """
    with open_segment(layout, segment, ranged=byte_range is not None) as f:
        try:
            metadata, blocks = read_container(f, *(byte_range or (0, None)))
            rows = _rows_metadata(layout.source, segment, metadata.get("databus.rows"))
            wanted = {name: tv for name, tv in rows.items() if tables is None or tv[0] in tables}
            if not wanted:
                return
            if "avro.schema" not in metadata:
                raise ValueError("the container has no avro.schema metadata")
            decoder = Decoder(json.loads(metadata["avro.schema"]),
                              {name: row_fields(schemas, *tv) for name, tv in wanted.items()})
            for group, first in Decoder.groups(blocks):
                yield decoder.decode_blocks(group, first), wanted
        except ValueError as exc:
            raise undecodable(layout.source, segment, exc) from None


def undecodable(source: str, segment: SegmentInfo, exc: ValueError) -> ChangeLogCorruptError:
    """The error for a segment of ``source``'s log whose bytes do not decode as its schema says."""
    return ChangeLogCorruptError(f"segment {segment.file} of source {source!r} cannot be decoded: {exc}",
                                 "restore the segment from backup, or bootstrap the source", source=source)


def _rows_metadata(source: str, segment: SegmentInfo, rows: str | None) -> dict[str, TableVersion]:
    """Each row record's full name → (table, schema version), from the segment's ``databus.rows``."""
    if rows is None:
        raise ChangeLogCorruptError(
            f"segment {segment.file} of source {source!r} has no databus.rows metadata: it was not "
            "written by this version's log writer", "restore the segment from backup, or run "
            f"`databus bootstrap --source {source}`", source=source)
    return {f"{ROW_NAMESPACE}.{n}": (t, v) for n, (t, v) in json.loads(rows).items()}


def avro_conversions(schema: TableSchema, direction: str) -> list[tuple[str, Any]]:
    """(column, converter) for the columns whose canonical value is not what fastavro reads or writes."""
    return [(c.name, c.type.to_avro if direction == "to" else c.type.from_avro) for c in schema.columns
            if c.type.kind in ("time", "number")]
