"""Delta snapshot tables: where they are, what they hold, and the MERGE text the engines share.

Each snapshot commit carries a Delta transaction identifier (app id ``databus:<source>.<table>``,
version = the SCN it brings the table to), so the data change and the applied SCN land in
one atomic commit and a replay is recognised. Every engine (``engines/``) writes the
same table layout: the source's columns, then ``__scn``, ``__op`` and ``__commit_ts``.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from dagster_databus.core.batch import repeated
from dagster_databus.core.schema import META_COLUMNS, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.files import delta_writer
from dagster_databus.dataplane.reduce import HELD_ONLY
from dagster_databus.errors import DatabusError, SnapshotDamagedError, SnapshotMissingError
from dagster_databus.log.columns import missing
from dagster_databus.storage.arrowfs import arrow_filesystem
from dagster_databus.storage.durable import exclusive_lock
from dagster_databus.storage.lake import Lake, as_lake
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    import pyarrow.dataset as ds


@dataclass(frozen=True, slots=True)
class MergeCounts:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


def _q(name: str) -> str:
    return f'"{name}"'  # names are validated plain identifiers


class DeltaFolder:
    """A Delta table in a folder of the lake (a local folder or a prefix in an object store, through
    delta-rs with the lake's storage options): whether it exists, its version, its rows."""

    def __init__(self, lake: Lake | LakeLocation | Path | str, *parts: str) -> None:
        self.lake = as_lake(lake)
        self.key = key = "/".join(parts)  # the table's folder, relative to the lake's root
        self.path = Path(self.lake.where(key))  # the folder, on a local lake; else only for messages
        self.uri = str(self.path) if self.lake.is_local else self.lake.location.child(*parts)
        self.storage_options = dict(self.lake.location.options) or None
        # Hadoop's file systems (delta-spark) name S3 s3a://; delta-rs takes either.
        self.spark_uri = "s3a://" + self.uri[len("s3://"):] if self.uri.startswith("s3://") else self.uri

    def delta(self, version: int | None = None) -> DeltaTable:
        return DeltaTable(self.uri, version=version, storage_options=self.storage_options)

    def dataset(self, table: DeltaTable | None = None) -> ds.Dataset:
        """The files of ``table`` (a version of this one; its newest by default) as a pyarrow dataset, read
        through a native file system (``storage.arrowfs``: delta-rs's default one can abort the process at exit).
        Every Arrow read of the lake's Delta tables goes through here."""
        table = self.delta() if table is None else table
        return table.to_pyarrow_dataset(filesystem=arrow_filesystem(self.lake.location, self.key))

    def prepare(self) -> None:
        """Make the table's parent folder on a local lake (an object store needs none)."""
        if self.lake.is_local:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def lock(self, what: str, fix: str) -> contextlib.AbstractContextManager[None]:
        """On a local lake, turn a second writer of this table away up front. In an object store there
        is no lock: Delta's own commit (each version created only if absent) keeps two writers from
        both committing, and the transaction ids make the loser's retry a no-op."""
        if not self.lake.is_local:
            return contextlib.nullcontext()
        return exclusive_lock(self.path.parent / f".{self.path.name}.lock", what, fix)

    def existing(self) -> DeltaTable | None:
        """The table at its newest version; None before its first commit."""
        try:
            return self.delta()
        except TableNotFoundError:
            return None

    _table = existing  # what every read of the newest version opens (``one_version`` pins it)

    @contextlib.contextmanager
    def one_version(self) -> Iterator[None]:
        """Within the block, the reads of the newest version (``version``, ``row_count``, ``applied_scn``, ...)
        answer from one opening of the table: for a run holding the table's lock after its last write, whose
        reads would each read the Delta log again (5-20 ms each here, more in an object store)."""
        table = self.existing()
        self._table = lambda: table  # type: ignore[method-assign]
        try:
            yield
        finally:
            del self._table

    def exists(self) -> bool:
        return self._table() is not None

    def version(self) -> int | None:
        table = self._table()
        return table.version() if table is not None else None

    def read(self, with_meta: bool = False) -> pa.Table:
        """The table's current rows (without soft-deleted ones: ``live``)."""
        table = self._table()
        if table is None:
            raise FileNotFoundError(self.uri)
        data = live(self.dataset(table).to_table())
        if not with_meta:
            data = data.select([n for n in data.column_names if not n.startswith("__")])
        return data

    def delta_types(self) -> dict[str, str]:
        """Column name → Delta type name (``decimal(10,2)``, ``timestamp_ntz``, ...); empty when absent."""
        table = self._table()
        if table is None:
            return {}
        return {f.name: str(getattr(f.type, "type", f.type)) for f in table.schema().fields}

    def arrow_schema(self) -> pa.Schema:
        """The table's columns (metadata columns included) as Arrow types."""
        return pa.schema(self.delta().schema().to_arrow())

    def type_differences(self, schema: TableSchema) -> list[str]:
        """Columns of ``schema`` the table holds in another type (a snapshot written before typed columns,
        or a column whose declared type changed)."""
        held = self.delta_types()
        return [f"{c.name}: {held[c.name]} in the snapshot, {c.type.delta()} now" for c in schema.columns
                if c.name in held and held[c.name] != c.type.delta()]

    def row_count(self) -> int:
        """The live rows (not soft-deleted): the Delta log's per-file counts when no file's ``__op`` statistics
        allow a soft delete or a null there (no data read, whatever the table's size); else the files scanned."""
        table = self._table()
        if table is None:
            return 0
        actions = pa.table(table.get_add_actions(flatten=True))
        if not actions.num_rows:
            return 0
        if {"num_records", "min.__op", "max.__op", "null_count.__op"} <= set(actions.column_names):
            lo, hi = actions["min.__op"].cast(pa.string()), actions["max.__op"].cast(pa.string())
            certain = pc.and_(pc.and_(pc.is_valid(actions["num_records"]), pc.equal(actions["null_count.__op"], 0)),
                              pc.or_(pc.greater(lo, "d"), pc.less(hi, "d")))
            if pc.all(pc.fill_null(certain, False)).as_py():
                return int(pc.sum(actions["num_records"]).as_py() or 0)
        return int(live_dataset(self.dataset(table)).count_rows())

    def damage(self, version: int | None = None) -> list[str]:
        """Data files the table's current version (or ``version``) names that are missing, or not the size it recorded
        (a file deleted or truncated behind Delta's back, or removed by VACUUM): one listing of the table's folder."""
        table = self._table() if version is None else self.delta(version)
        if table is None:
            return []
        actions = table.get_add_actions(flatten=True)
        paths = [unquote(p) for p in actions.column("path").to_pylist()]
        sizes = actions.column("size_bytes").to_pylist()
        stored = {info.key[len(self.key) + 1:]: info.size for info in self.lake.objects.list(f"{self.key}/")}
        problems = []
        for path, size in zip(paths, sizes, strict=True):
            held = stored.get(path)
            if held is None:
                problems.append(f"data file {path} of {self.key} (version {table.version()}) is missing")
            elif held != size:
                problems.append(f"data file {path} of {self.key} is {held} bytes, Delta recorded {size}")
        return problems

    @contextlib.contextmanager
    def damage_named(self, fix: str) -> Iterator[None]:
        """Run a read or write of the table; when it fails on a table whose files are damaged, raise
        ``SnapshotDamagedError`` naming them and ``fix`` instead of the engine's error about one file."""
        try:
            yield
        except DatabusError:
            raise
        except Exception as exc:
            damaged = self.damage()
            if not damaged:
                raise
            raise SnapshotDamagedError(f"the Delta table {self.uri} is damaged: {'; '.join(damaged[:5])}"
                                       f"{f' (and {len(damaged) - 5} more)' if len(damaged) > 5 else ''}", fix,
                                       table=self.key) from exc


class DeltaSnapshot(DeltaFolder):
    """One snapshot table: ``<lake>/snapshot/<source>/<table>``."""

    def __init__(self, lake: Lake | LakeLocation | Path | str, source: str, table: str) -> None:
        super().__init__(lake, "snapshot", source, table)
        self.app_id = f"databus:{source}.{table}"
        self.source, self.table = source, table

    def bootstrapped(self) -> tuple[DeltaTable, Scn]:
        """The table as it is now and the SCN that version reflects; refused, naming the fix, before its
        bootstrap."""
        table = self._table()
        version = table.transaction_version(self.app_id) if table is not None else None
        if table is None or version is None:
            raise SnapshotMissingError(
                f"snapshot {self.source}.{self.table} has not been bootstrapped ({self.uri})",
                f"materialize the {self.source}/{self.table} asset, which bootstraps it first")
        return table, Scn(version)

    def applied_scn(self) -> Scn | None:
        """The SCN the snapshot reflects, read from the Delta log; None before bootstrap."""
        table = self._table()
        if table is None:
            return None
        version = table.transaction_version(self.app_id)
        return Scn(version) if version is not None else None

    @property
    def bootstrap_app_id(self) -> str:
        return f"{self.app_id}#bootstrap"

    def bootstrap_scn(self) -> Scn | None:
        """The SCN of the source read the snapshot was last bootstrapped from."""
        table = self._table()
        version = table.transaction_version(self.bootstrap_app_id) if table is not None else None
        return Scn(version) if version is not None else None

    def bootstrap_version(self) -> int | None:
        """The table version its last bootstrap committed (the first that records the current bootstrap SCN):
        what ``rebuild`` restores, so what VACUUM must keep."""
        boot = self.bootstrap_scn()
        if boot is None:
            return None
        lo, hi = 0, self.delta().version()
        while lo < hi:
            mid = (lo + hi) // 2
            if self.delta(version=mid).transaction_version(self.bootstrap_app_id) == boot.value:
                hi = mid
            else:
                lo = mid + 1
        return lo

    @property
    def evolved_app_id(self) -> str:
        return f"{self.app_id}#evolved"

    def absorbed_ddl_scn(self) -> Scn:
        """Schema changes at or below this SCN are in the snapshot: it was read from the source after them,
        or evolved in place to them."""
        table = self._table()
        return self.absorbed_in(table) if table is not None else Scn.BEGINNING

    def absorbed_in(self, table: DeltaTable) -> Scn:
        """``absorbed_ddl_scn`` of one version of the table."""
        found = [v for v in (table.transaction_version(self.bootstrap_app_id),
                             table.transaction_version(self.evolved_app_id)) if v is not None]
        return Scn(max(found)) if found else Scn.BEGINNING


    def bootstrapped_ms(self) -> int | None:
        """When the snapshot was last written whole (bootstrap or rebuild), from the Delta history (ms)."""
        table = self._table()
        if table is None:
            return None
        return next((int(h["timestamp"]) for h in table.history()
                     if (h.get("operationParameters") or {}).get("mode") == "Overwrite"
                     or h.get("operation") == "RESTORE"), None)

    def read_pinned(self, with_meta: bool = False) -> tuple[pa.Table, Scn, Scn]:
        """(rows, applied SCN, the last schema change it absorbed: ``absorbed_in``) from one version of the
        table, so a merge committing meanwhile cannot pair rows of one version with the SCN of another."""
        table = self._table()
        applied = table.transaction_version(self.app_id) if table is not None else None
        if table is None or applied is None:
            raise FileNotFoundError(self.uri)
        absorbed = self.absorbed_in(table)
        data = live(self.dataset(table).to_table())
        if not with_meta:
            data = data.select([n for n in data.column_names if not n.startswith("__")])
        return data, Scn(applied), absorbed

    def pinned_dataset(self) -> tuple[Scn, ds.Dataset] | None:
        """(applied SCN, the current rows of that one version as a dataset to scan a batch at a time); None
        before bootstrap."""
        table = self._table()
        applied = table.transaction_version(self.app_id) if table is not None else None
        if table is None or applied is None:
            return None
        return Scn(applied), live_dataset(self.dataset(table))


def live(rows: pa.Table) -> pa.Table:
    """``rows`` without soft-deleted ones (``deletes: soft`` keeps a deleted row, marked ``__op = 'd'``)."""
    if "__op" not in rows.column_names:
        return rows
    deleted = pc.equal(rows["__op"].cast(pa.string()), "d")  # delta-rs's MERGE may write string views
    return rows.filter(pc.invert(deleted)) if pc.any(deleted).as_py() else rows


def live_dataset(dataset: ds.Dataset) -> ds.Dataset:
    """``live`` for a dataset to scan (the filter reaches the files' statistics)."""
    import pyarrow.dataset as pds

    if "__op" not in dataset.schema.names:
        return dataset
    return dataset.filter(pds.field("__op").cast(pa.string()) != "d")  # delta-rs's MERGE may write string views


def with_meta(batch: pa.RecordBatch | pa.Table, scn: Scn, op: str, commit_ts_ms: int) -> pa.RecordBatch:
    """Append the metadata columns; a batch that already has per-row ``__scn`` keeps it."""
    n = batch.num_rows
    names = batch.schema.names
    if "__scn" in names:
        scns = batch.column(names.index("__scn"))
        batch = batch.select([i for i, name in enumerate(names) if name != "__scn"])
    else:
        scns = repeated(scn.value, pa.int64(), n)
    arrays = [*batch.columns,
              scns,
              repeated(op, pa.string(), n),
              repeated(commit_ts_ms * 1000, META_COLUMNS["__commit_ts"], n)]
    names = [*batch.schema.names, "__scn", "__op", "__commit_ts"]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def merge_clauses(key: Sequence[str], columns: Sequence[str], reads: bool = False
                  ) -> tuple[str, dict[str, str], str, str]:
    """The MERGE's text for source ``s`` into target ``t``: (match predicate on ``key``, assignments of
    every column, ``newer`` guard, ``is_delete`` test). Names are validated plain identifiers. ``reads``:
    the changes are the source's rows read at their SCN (``dataplane.refresh``), which replace a row of the
    same SCN too (the same row, when the snapshot is sound; the source's, when it is not)."""
    predicate = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in key)
    assignments = {_q(c): f"s.{_q(c)}" for c in columns}
    newer = f"s.{_q('__scn')} {'>=' if reads else '>'} t.{_q('__scn')}"
    is_delete = f"s.{_q('__op')} = 'd'"
    return predicate, assignments, newer, is_delete


def merge_with_delta_rs(target: DeltaFolder, key: Sequence[str], changes: pa.Table | pa.RecordBatchReader,
                        props: CommitProperties, reads: bool = False, soft: bool = False,
                        always: bool = False) -> MergeCounts:
    """Apply reduced changes (one row per ``key``) with delta-rs in one commit carrying ``props``.

    SCD type 1 with ``apply_as_deletes``: a newer delete removes the key, a newer image replaces
    the row, an unseen key is inserted; a row whose ``__scn`` is not above the target's changes
    nothing. No changes still commit, so the transaction ids in ``props`` are recorded. A reader
    streams into the MERGE batch by batch. ``soft``: a delete keeps the row, marked (``SOFT_DELETE``); the
    counts then hold soft deletes among the updates (``soft_deleted`` tells them apart). ``always``: every change
    applies whatever the row's SCN (a verification's repair of keys it found wrong and no later event touched).
    """
    table = target.delta()
    source = _non_empty(changes)
    if source is None:
        write_deltalake(table, pa.schema(table.schema().to_arrow()).empty_table(), mode="append",
                        commit_properties=props)
        return MergeCounts()
    predicate, assignments, newer, is_delete = merge_clauses(key, source.schema.names, reads)
    newer = "TRUE" if always else newer
    # A key the reduce could not tell held or not at commit (``HELD_ONLY``) takes its image only where held.
    held_only = f"s.{_q('__op')} = '{HELD_ONLY}'"
    assignments = {**assignments, _q("__op"): f"CASE WHEN {held_only} THEN 'u' ELSE s.{_q('__op')} END"}
    merge = table.merge(source, predicate=predicate, source_alias="s", target_alias="t", merge_schema=True,
                        streamed_exec=isinstance(source, pa.RecordBatchReader), commit_properties=props,
                        writer_properties=delta_writer())
    merge = merge.when_matched_update(updates=SOFT_DELETE, predicate=f"{is_delete} AND {newer}") if soft else \
        merge.when_matched_delete(predicate=f"{is_delete} AND {newer}")
    metrics = (
        merge.when_matched_update(updates=assignments, predicate=f"NOT ({is_delete}) AND {newer} AND NOT "
                                  f"({held_only} AND t.{_q('__op')} = 'd')")
        .when_not_matched_insert(updates=assignments, predicate=f"NOT ({is_delete}) AND NOT ({held_only})")
        .execute()
    )
    return MergeCounts(inserted=metrics["num_target_rows_inserted"], updated=metrics["num_target_rows_updated"],
                       deleted=metrics["num_target_rows_deleted"])


# A soft delete: the row keeps its values and takes the delete's SCN, operation and commit time.
SOFT_DELETE = {_q(c): f"s.{_q(c)}" for c in ("__scn", "__op", "__commit_ts")}


def soft_deleted(target: DeltaFolder, counts: MergeCounts, since: int) -> MergeCounts:
    """``counts`` of a soft-deleting MERGE with the rows it marked deleted (marked after SCN ``since``) moved
    from the updates to the deletes."""
    import pyarrow.dataset as pds

    marked = target.dataset().count_rows(filter=(pds.field("__op").cast(pa.string()) == "d")
                                         & (pds.field("__scn") > since))
    return MergeCounts(counts.inserted, max(0, counts.updated - marked), counts.deleted + marked)


def _non_empty(changes: pa.Table | pa.RecordBatchReader) -> pa.Table | pa.RecordBatchReader | None:
    """``changes`` if it holds a row (a reader is re-wrapped after its first batch is read), else None."""
    if isinstance(changes, pa.Table):
        return changes if changes.num_rows else None
    for first in changes:
        if first.num_rows:
            return pa.RecordBatchReader.from_batches(changes.schema, itertools.chain([first], changes))
    return None


def conform_changes(data: pa.Table | pa.RecordBatch, target: pa.Schema) -> pa.Table:
    """Change rows as read from the log (``__commit_ts_ms``), in the snapshot's columns and types."""
    columns = [pc.multiply(data["__commit_ts_ms"], 1000).cast(f.type) if f.name == "__commit_ts"
               else data[f.name].cast(f.type) for f in target]
    return pa.Table.from_arrays(columns, schema=target)


def conform_rows(data: pa.Table, target: pa.Schema, fills: Mapping[str, pa.Scalar] | None = None) -> pa.Table:
    """Snapshot rows written under an older schema in ``target``'s columns: a column they lack is null, or its
    value in ``fills`` (the constant default it was added with)."""
    names = data.column_names
    return pa.Table.from_arrays([data[f.name].cast(f.type) if f.name in names
                                 else missing(f, data.num_rows, dict(fills or {})) for f in target], schema=target)
