"""A verification slice's rows in a snapshot's data files, as the canonical digests reconciliation compares
(``core.fingerprint``): which rows a slice holds, and each one's key text and row digest. Picklable, so that the
spark engine's tasks compute the digests where the files are read and the driver only joins them.

A slice is a key range in the source's key order. Where this process orders keys as the source does (numbers, dates,
timestamps: ``refresh.ORDERED_ALIKE``), or the slice is the whole key space, a row is in the slice by its key;
otherwise (a string key, ordered by the source's collation) only the keys the source's read returned are taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.parquet as pq

from dagster_databus.core.fingerprint import digests, row_texts
from dagster_databus.core.schema import TableSchema
from dagster_databus.dataplane.delta import conform_rows
from dagster_databus.dataplane.files import TableFile, TableFiles, TableLocation
from dagster_databus.dataplane.refresh import ORDERED_ALIKE, _beyond, _may_hold, _scalar
from dagster_databus.sources.base import KeyRange

DIGESTS = pa.schema([("k", pa.binary()), ("d", pa.uint64())])
DIGESTS_SPARK = "k binary, d bigint"  # Spark has no unsigned type: the digest's 64 bits as a signed long


def key_texts(rows: pa.Table, schema: TableSchema) -> list[bytes]:
    """Each row's canonical key text (its identity in a comparison)."""
    if not rows.num_rows:
        return []
    key, _ = row_texts(rows, schema, columns=())
    texts: list[bytes] = key.to_pylist()
    return texts


def digested(rows: pa.Table, schema: TableSchema) -> pa.Table:
    """(key text, row digest) of each row of ``rows`` (``schema``'s columns)."""
    if not rows.num_rows:
        return DIGESTS.empty_table()
    key, row = row_texts(rows, schema)
    return pa.table([key.cast(pa.binary()), pa.array(digests(row))], schema=DIGESTS)


@dataclass(frozen=True)
class SliceRows:
    """The rows of a snapshot in one slice: ``bounds`` in key order, or, with ``source_keys``, those keys only;
    with ``location`` and ``paths``, the data files (of the pinned version) that may hold them."""

    schema: TableSchema
    bounds: KeyRange
    source_keys: frozenset[bytes] | None = None  # None: by key order
    location: TableLocation | None = None
    paths: tuple[str, ...] = ()
    bytes: int = 0  # the files'

    @classmethod
    def of(cls, schema: TableSchema, bounds: KeyRange, source: pa.Table) -> SliceRows:
        whole = bounds.after is None and bounds.through is None
        ordered = whole or all(schema.column(k).type.kind in ORDERED_ALIKE for k in schema.primary_key)
        return cls(schema, bounds, None if ordered else frozenset(key_texts(source, schema)))

    @property
    def whole(self) -> bool:
        return self.bounds.after is None and self.bounds.through is None

    @property
    def by_order(self) -> bool:
        """Whether rows only in the snapshot are looked for (a slice by key order)."""
        return self.source_keys is None

    def in_files(self, location: TableLocation, files: TableFiles) -> SliceRows:
        """This slice with the files that may hold it (by their first key column's bounds, where ordered)."""
        chosen = [f for f in files.files if self.whole or not self.by_order or self._may_hold(f)]
        return replace(self, location=location, paths=tuple(f.path for f in chosen),
                       bytes=sum(f.size for f in chosen))

    def _may_hold(self, f: TableFile) -> bool:
        return _may_hold(f.low, f.high, self.bounds)

    def in_slice(self, rows: pa.Table) -> pa.Table:
        """The rows of ``rows`` (key columns at least) in the slice."""
        if not rows.num_rows or self.whole:
            return rows
        if self.source_keys is not None:
            return snapshot_keys(rows, self.schema, self.source_keys)
        key = tuple(self.schema.primary_key)
        mask = np.ones(rows.num_rows, dtype=bool)
        if self.bounds.after is not None:
            mask &= _beyond(rows, key, self.bounds.after)
        if self.bounds.through is not None:
            mask &= ~_beyond(rows, key, self.bounds.through)
        return rows.filter(pa.array(mask))

    def _row_groups(self, parquet: pq.ParquetFile) -> list[int]:
        """The file's row groups whose first key column's statistics may hold a key of the slice (not a filter
        pushed into the read: pyarrow cannot filter the string_view columns delta-rs writes)."""
        groups = list(range(parquet.num_row_groups))
        if not self.by_order or self.whole:
            return groups
        names = parquet.schema_arrow.names
        first = self.schema.primary_key[0]
        if first not in names:
            return groups
        index = parquet.schema.to_arrow_schema().get_field_index(first)
        out = []
        for g in groups:
            stats = parquet.metadata.row_group(g).column(index).statistics
            if stats is None or not stats.has_min_max or _may_hold((stats.min,), (stats.max,), self.bounds):
                out.append(g)
        return out

    def row_groups(self) -> pds.Expression | None:
        """A filter on the first key column that lets the Parquet reader skip row groups outside the slice."""
        if self.whole or self.source_keys is not None:
            return None
        first = self.schema.primary_key[0]
        target = self.schema.arrow(with_meta=False).field(first).type
        expr = None
        if self.bounds.after is not None:
            expr = pds.field(first) >= _scalar(self.bounds.after[0], target)
        if self.bounds.through is not None:
            upper = pds.field(first) <= _scalar(self.bounds.through[0], target)
            expr = upper if expr is None else expr & upper
        return expr

    def read(self, path: str) -> pa.Table:
        """One data file's live rows in the slice, in the schema's columns (soft-deleted rows left out)."""
        assert self.location is not None, "in_files names the files first"
        columns = [*self.schema.column_names, "__op"]
        with self.location.lake.objects.reader(self.location.object_key(path)) as f:
            parquet = pq.ParquetFile(f)
            present = [c for c in columns if c in parquet.schema_arrow.names]
            data = parquet.read_row_groups(self._row_groups(parquet), columns=present)
        # Conformed before anything is taken: delta-rs writes strings as string_view, which pyarrow cannot filter.
        rows = conform_rows(data.select([c for c in self.schema.column_names if c in data.column_names]),
                            self.schema.arrow(with_meta=False))
        if "__op" in data.column_names:
            rows = rows.filter(pc.fill_null(pc.not_equal(data.column("__op").cast(pa.string()), "d"), True))
        return self.in_slice(rows)

    def digests_of(self, paths: Sequence[str]) -> pa.Table:
        """The slice's (key text, row digest) in ``paths``, in this process."""
        parts = [digested(self.read(p), self.schema) for p in paths]
        return pa.concat_tables(parts) if parts else DIGESTS.empty_table()

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A Spark task (``mapInArrow``): the digests of the files its input ids name, each 64-bit digest as the
        signed long Spark can hold."""
        for batch in batches:
            for index in batch.column(0).to_pylist():
                table = self.digests_of([self.paths[index]])
                signed = pa.array(table.column("d").to_numpy().view(np.int64))
                yield from pa.table([table.column("k"), signed], names=["k", "d"]).to_batches()


def unsigned(table: pa.Table) -> pa.Table:
    """Digests as Spark returned them (signed longs) as ``DIGESTS``."""
    d = table.column("d").combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    return pa.table([table.column("k").cast(pa.binary()), pa.array(d)], schema=DIGESTS)


def snapshot_keys(rows: pa.Table, schema: TableSchema, wanted: Iterable[bytes]) -> pa.Table:
    """The rows of ``rows`` whose key texts are in ``wanted``."""
    chosen = wanted if isinstance(wanted, set | frozenset) else set(wanted)
    return rows.filter(pa.array([k in chosen for k in key_texts(rows, schema)], pa.bool_()))


