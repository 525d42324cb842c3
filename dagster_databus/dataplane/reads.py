"""What a task reads and writes, as values a driver hands its tasks (Spark's or this process's): a data file
of a Delta table read in a target's columns (``FileRead``), and where a bootstrap's tasks write
(``FilesSink``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class FileRead:
    location: Any  # dataplane.files.TableLocation of the table the file belongs to
    path: str
    constants: Mapping[str, str] = field(default_factory=dict)  # string columns added to every row
    # More files of the same table read with this one and written with it, in ``order_by`` order (compaction).
    then: tuple[str, ...] = ()
    order_by: tuple[str, ...] = ()
    as_history: bool = False  # snapshot rows turned into a history's first versions (``dataplane.history``)
    live: bool = False  # a snapshot's current rows only (``dataplane.delta.live``: no soft-deleted ones)
    fills: Mapping[str, pa.Scalar] = field(default_factory=dict)  # columns the file lacks, and their value

    def read(self, schema: pa.Schema | None = None) -> pa.Table:
        """The file's rows (with ``then``: the files' rows, joined), each file conformed to ``schema`` if given
        (files other writers wrote may hold other physical types: delta-rs's MERGE writes string views)."""
        from dagster_databus.dataplane.delta import conform_rows

        parts = [self.location.read(p, columns=None) for p in (self.path, *self.then)]
        if schema is not None:
            parts = [conform_rows(p.select([n for n in schema.names if n in p.column_names]), schema) for p in parts]
        if not self.then:
            return parts[0]
        joined = pa.concat_tables(parts)
        return joined.sort_by([(k, "ascending") for k in self.order_by]) if self.order_by else joined


@dataclass(frozen=True, slots=True)
class FilesSink:
    """Where and how a bootstrap's tasks write: the snapshot's folder, its Arrow schema (with the
    metadata columns), rows per file, the run's file-name prefix and the bootstrap's time."""

    location: Any  # dataplane.files.TableLocation
    schema: pa.Schema
    file_rows: int
    prefix: str
    read_at_ms: int
    progress: Any = None  # dataplane.resume.ProgressSpec: where each range records that it started and finished
