"""Delta snapshot tables and the two ways of committing to them.

Each snapshot commit carries a Delta transaction identifier (app id ``databus:<source>.<table>``,
version = the SCN it brings the table to), so the data change and the applied SCN land in
one atomic commit and a replay is recognised. Commits go through delta-spark when its
classes load in the Spark session, and through delta-rs otherwise; the table layout is the
same either way.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from dagster_databus.core.schema import META_COLUMNS, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.log.durable import exclusive_lock
from dagster_databus.storage.lake import Lake, as_lake
from dagster_databus.storage.location import LakeLocation

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession

# Reduced change rows in the snapshot's columns: in memory, streamed, or a distributed Spark DataFrame.
Changes: TypeAlias = "pa.Table | pa.RecordBatchReader | DataFrame"


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
        key = "/".join(parts)
        self.path = Path(self.lake.where(key))  # the folder, on a local lake; else only for messages
        self.uri = str(self.path) if self.lake.is_local else self.lake.location.child(*parts)
        self.storage_options = dict(self.lake.location.options) or None
        # Hadoop's file systems (delta-spark) name S3 s3a://; delta-rs takes either.
        self.spark_uri = "s3a://" + self.uri[len("s3://"):] if self.uri.startswith("s3://") else self.uri

    def delta(self, version: int | None = None) -> DeltaTable:
        return DeltaTable(self.uri, version=version, storage_options=self.storage_options)

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

    def _table(self) -> DeltaTable | None:
        try:
            return self.delta()
        except TableNotFoundError:
            return None

    def exists(self) -> bool:
        return self._table() is not None

    def version(self) -> int | None:
        table = self._table()
        return table.version() if table is not None else None

    def read(self, with_meta: bool = False) -> pa.Table:
        table = self._table()
        if table is None:
            raise FileNotFoundError(self.uri)
        data = table.to_pyarrow_table()
        if not with_meta:
            data = data.select([n for n in data.column_names if not n.startswith("__")])
        return data

    def delta_types(self) -> dict[str, str]:
        """Column name → Delta type name (``decimal(10,2)``, ``timestamp_ntz``, ...); empty when absent."""
        table = self._table()
        if table is None:
            return {}
        return {f.name: str(getattr(f.type, "type", f.type)) for f in table.schema().fields}

    def type_differences(self, schema: TableSchema) -> list[str]:
        """Columns of ``schema`` the table holds in another type (a snapshot written before typed columns,
        or a column whose declared type changed)."""
        held = self.delta_types()
        return [f"{c.name}: {held[c.name]} in the snapshot, {c.type.delta()} now" for c in schema.columns
                if c.name in held and held[c.name] != c.type.delta()]

    def row_count(self) -> int:
        table = self._table()
        return 0 if table is None else table.to_pyarrow_dataset().count_rows()


class DeltaSnapshot(DeltaFolder):
    """One snapshot table: ``<lake>/snapshot/<source>/<table>``."""

    def __init__(self, lake: Lake | LakeLocation | Path | str, source: str, table: str) -> None:
        super().__init__(lake, "snapshot", source, table)
        self.app_id = f"databus:{source}.{table}"
        self.source, self.table = source, table

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


    def bootstrapped_ms(self) -> int | None:
        """When the snapshot was last written whole (bootstrap or rebuild), from the Delta history (ms)."""
        table = self._table()
        if table is None:
            return None
        return next((int(h["timestamp"]) for h in table.history()
                     if (h.get("operationParameters") or {}).get("mode") == "Overwrite"), None)

    def read_pinned(self, with_meta: bool = False) -> tuple[pa.Table, Scn, Scn | None]:
        """(rows, applied SCN, bootstrap SCN) from one version of the table, so a merge committing
        meanwhile cannot pair rows of one version with the SCN of another."""
        table = self._table()
        applied = table.transaction_version(self.app_id) if table is not None else None
        if table is None or applied is None:
            raise FileNotFoundError(self.uri)
        boot = table.transaction_version(self.bootstrap_app_id)
        data = table.to_pyarrow_table()
        if not with_meta:
            data = data.select([n for n in data.column_names if not n.startswith("__")])
        return data, Scn(applied), Scn(boot) if boot is not None else None

    def pinned_dataset(self) -> tuple[Scn, ds.Dataset] | None:
        """(applied SCN, the rows of that one version as a dataset to scan a batch at a time); None before
        bootstrap."""
        table = self._table()
        applied = table.transaction_version(self.app_id) if table is not None else None
        if table is None or applied is None:
            return None
        return Scn(applied), table.to_pyarrow_dataset()


def with_meta(batch: pa.RecordBatch | pa.Table, scn: Scn, op: str, commit_ts_ms: int) -> pa.RecordBatch:
    """Append the metadata columns; a batch that already has per-row ``__scn`` keeps it."""
    n = batch.num_rows
    names = batch.schema.names
    if "__scn" in names:
        scns = batch.column(names.index("__scn"))
        batch = batch.select([i for i, name in enumerate(names) if name != "__scn"])
    else:
        scns = pa.array([scn.value] * n, pa.int64())
    arrays = [*batch.columns,
              scns,
              pa.array([op] * n, pa.string()),
              pa.array([commit_ts_ms * 1000] * n, pa.int64()).cast(META_COLUMNS["__commit_ts"])]
    names = [*batch.schema.names, "__scn", "__op", "__commit_ts"]
    return pa.RecordBatch.from_arrays(arrays, names=names)


class DeltaEngine(Protocol):
    name: str

    def bootstrap(self, snap: DeltaSnapshot, schema: TableSchema, batches: Iterator[pa.RecordBatch],
                  scn: Scn) -> int: ...

    def merge(self, snap: DeltaSnapshot, schema: TableSchema, changes: Changes, scn: Scn) -> MergeCounts: ...


def merge_clauses(key: Sequence[str], columns: Sequence[str]) -> tuple[str, dict[str, str], str, str]:
    """The MERGE's text for source ``s`` into target ``t``: (match predicate on ``key``, assignments of
    every column, ``newer`` guard, ``is_delete`` test). Names are validated plain identifiers."""
    predicate = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in key)
    assignments = {_q(c): f"s.{_q(c)}" for c in columns}
    newer = f"s.{_q('__scn')} > t.{_q('__scn')}"
    is_delete = f"s.{_q('__op')} = 'd'"
    return predicate, assignments, newer, is_delete


def merge_with_delta_rs(target: DeltaFolder, key: Sequence[str], changes: pa.Table | pa.RecordBatchReader,
                        props: CommitProperties) -> MergeCounts:
    """Apply reduced changes (one row per ``key``) with delta-rs in one commit carrying ``props``.

    SCD type 1 with ``apply_as_deletes``: a newer delete removes the key, a newer image replaces
    the row, an unseen key is inserted; a row whose ``__scn`` is not above the target's changes
    nothing. No changes still commit, so the transaction ids in ``props`` are recorded. A reader
    streams into the MERGE batch by batch.
    """
    table = target.delta()
    source = _non_empty(changes)
    if source is None:
        write_deltalake(table, pa.schema(table.schema().to_arrow()).empty_table(), mode="append",
                        commit_properties=props)
        return MergeCounts()
    predicate, assignments, newer, is_delete = merge_clauses(key, source.schema.names)
    metrics = (
        table.merge(source, predicate=predicate, source_alias="s", target_alias="t", merge_schema=True,
                    streamed_exec=isinstance(source, pa.RecordBatchReader), commit_properties=props)
        .when_matched_delete(predicate=f"{is_delete} AND {newer}")
        .when_matched_update(updates=assignments, predicate=f"NOT ({is_delete}) AND {newer}")
        .when_not_matched_insert(updates=assignments, predicate=f"NOT ({is_delete})")
        .execute()
    )
    return MergeCounts(inserted=metrics["num_target_rows_inserted"], updated=metrics["num_target_rows_updated"],
                       deleted=metrics["num_target_rows_deleted"])


def _non_empty(changes: pa.Table | pa.RecordBatchReader) -> pa.Table | pa.RecordBatchReader | None:
    """``changes`` if it holds a row (a reader is re-wrapped after its first batch is read), else None."""
    if isinstance(changes, pa.Table):
        return changes if changes.num_rows else None
    for first in changes:
        if first.num_rows:
            return pa.RecordBatchReader.from_batches(changes.schema, itertools.chain([first], changes))
    return None


class DeltaRsEngine:
    """Commits through delta-rs (the ``deltalake`` package): no JVM jars needed."""

    name = "delta-rs"

    def _props(self, snap: DeltaSnapshot, scn: Scn, bootstrap: bool = False) -> CommitProperties:
        txns = [Transaction(app_id=snap.app_id, version=scn.value)]
        if bootstrap:
            txns.append(Transaction(app_id=snap.bootstrap_app_id, version=scn.value))
        return CommitProperties(app_transactions=txns)

    def bootstrap(self, snap: DeltaSnapshot, schema: TableSchema, batches: Iterator[pa.RecordBatch],
                  scn: Scn) -> int:
        now = int(time.time() * 1000)
        count = 0
        failure: list[BaseException] = []

        def stamped() -> Iterator[pa.RecordBatch]:
            nonlocal count
            try:
                for batch in batches:
                    count += batch.num_rows
                    yield with_meta(batch, scn, "r", now)
            except Exception as exc:  # delta-rs would wrap it in a DeltaError; keep the source's own error
                failure.append(exc)
                raise

        snap.prepare()
        reader = pa.RecordBatchReader.from_batches(schema.arrow(with_meta=True), stamped())
        try:
            write_deltalake(snap.uri, reader, mode="overwrite", schema_mode="overwrite",
                            storage_options=snap.storage_options,
                            commit_properties=self._props(snap, scn, bootstrap=True),
                            description=f"databus snapshot of {snap.source}.{snap.table}")
        except Exception:
            if failure:
                raise failure[0] from None
            raise
        return count

    def merge(self, snap: DeltaSnapshot, schema: TableSchema, changes: Changes, scn: Scn) -> MergeCounts:
        # With no changes for this table in the window range this records the SCN it is now current to.
        if not isinstance(changes, pa.Table | pa.RecordBatchReader):
            changes = changes.toArrow()  # a Spark DataFrame: delta-rs commits from this process
        return merge_with_delta_rs(snap, schema.primary_key, changes, self._props(snap, scn))


class DeltaSparkEngine:
    """Commits through delta-spark's MERGE; needs the Delta jars on the session's classpath."""

    name = "delta-spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def _txn(self, snap: DeltaSnapshot, scn: Scn) -> None:
        self.spark.conf.set("spark.databricks.delta.write.txnAppId", snap.app_id)
        self.spark.conf.set("spark.databricks.delta.write.txnVersion", str(scn.value))

    def _clear(self) -> None:
        self.spark.conf.unset("spark.databricks.delta.write.txnAppId")
        self.spark.conf.unset("spark.databricks.delta.write.txnVersion")

    def bootstrap(self, snap: DeltaSnapshot, schema: TableSchema, batches: Iterator[pa.RecordBatch],
                  scn: Scn) -> int:
        now = int(time.time() * 1000)
        data = pa.Table.from_batches([with_meta(b, scn, "r", now) for b in batches], schema=schema.arrow())
        (self.spark.createDataFrame(data).write.format("delta").mode("overwrite")
         .option("overwriteSchema", "true").option("txnAppId", snap.app_id).option("txnVersion", scn.value)
         .save(snap.spark_uri))
        # delta-spark takes one transaction id per write: record the bootstrap SCN in a second, empty one.
        (self.spark.createDataFrame(data.slice(0, 0)).write.format("delta").mode("append")
         .option("txnAppId", snap.bootstrap_app_id).option("txnVersion", scn.value).save(snap.spark_uri))
        return data.num_rows

    def merge(self, snap: DeltaSnapshot, schema: TableSchema, changes: Changes, scn: Scn) -> MergeCounts:
        from delta.tables import DeltaTable as SparkDeltaTable

        if isinstance(changes, pa.RecordBatchReader):
            changes = changes.read_all()
        # A DataFrame stays distributed: the MERGE runs in the executors, not through the driver.
        source = self.spark.createDataFrame(changes) if isinstance(changes, pa.Table) else changes
        predicate, assignments, newer, is_delete = merge_clauses(schema.primary_key, source.columns)
        backtick = {k.replace('"', "`"): v.replace('"', "`") for k, v in assignments.items()}
        self._txn(snap, scn)
        try:
            (SparkDeltaTable.forPath(self.spark, snap.spark_uri).alias("t")
             .merge(source.alias("s"), predicate.replace('"', "`"))
             .whenMatchedDelete(f"{is_delete} AND {newer}".replace('"', "`"))
             .whenMatchedUpdate(f"NOT ({is_delete}) AND {newer}".replace('"', "`"), set=backtick)
             .whenNotMatchedInsert(f"NOT ({is_delete})".replace('"', "`"), values=backtick)
             .execute())
        finally:
            self._clear()
        metrics = SparkDeltaTable.forPath(self.spark, snap.spark_uri).history(1).collect()[0]["operationMetrics"]
        return MergeCounts(inserted=int(metrics.get("numTargetRowsInserted", 0)),
                           updated=int(metrics.get("numTargetRowsUpdated", 0)),
                           deleted=int(metrics.get("numTargetRowsDeleted", 0)))


def drop_stale(changes: Changes, applied: Scn) -> Changes:
    """Rows at or below the applied SCN are already in the snapshot."""
    if isinstance(changes, pa.Table):
        return changes.filter(pc.greater(changes["__scn"], applied.value))
    if isinstance(changes, pa.RecordBatchReader):
        batches = (b.filter(pc.greater(b["__scn"], applied.value)) for b in changes)
        return pa.RecordBatchReader.from_batches(changes.schema, batches)
    return changes.where(changes["__scn"] > applied.value)
