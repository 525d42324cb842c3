"""Bring Delta snapshots up to the change log: bootstrap a table once, then merge windows.

The merge reads the committed log after the snapshot's applied SCN, reduces it to the newest
event per key (``sequence_by`` = SCN, then position in the window), and MERGEs: deletes remove
the key (``apply_as_deletes``), newer images replace older ones (SCD type 1), and nothing older
than what the snapshot holds is ever applied.

With delta-spark the read, the reduce and the MERGE are Spark jobs, distributed. With delta-rs
(one process commits) the change batches are read and reduced in-process by column, spilling
past a memory budget, and stream into the MERGE as a ``RecordBatchReader``: no Spark job, and
the change set is never held whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.config import DatabusConfig, SourceConfig
from dagster_databus.core.progress import Progress, Ticker
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SnapshotMissingError
from dagster_databus.log.columns import change_schema, table_changes
from dagster_databus.log.durable import crash_point, disk_errors
from dagster_databus.log.store import ChangeLog
from dagster_databus.snapshot.delta import (
    Changes,
    DeltaEngine,
    DeltaRsEngine,
    DeltaSnapshot,
    DeltaSparkEngine,
    MergeCounts,
    drop_stale,
)
from dagster_databus.snapshot.reduce import ChangeStats, NewestPerKey
from dagster_databus.snapshot.spark import task_errors
from dagster_databus.sources import open_source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A Spark session, or a function that starts one when a step first needs it: a merge through delta-rs
# of a table that is already bootstrapped never does, so it does not pay Spark's start-up.
SparkLike: TypeAlias = "SparkSession | Callable[[], SparkSession]"


@dataclass(frozen=True, slots=True)
class TableSyncResult:
    source: str
    table: str
    engine: str
    bootstrapped_at: Scn | None
    bootstrap_rows: int
    from_scn: Scn
    to_scn: Scn
    events: int
    windows: int
    events_by_op: dict[str, int]
    counts: MergeCounts
    snapshot_rows: int
    log_scn: Scn
    delta_version: int | None
    duration_s: float
    # Source commit times (ms) of the last transaction the snapshot reflects and of the log's newest.
    applied_commit_ms: int | None = None
    log_commit_ms: int | None = None

    @property
    def lag_scn(self) -> int:
        return max(0, self.log_scn.value - self.to_scn.value)

    @property
    def lag_seconds(self) -> float | None:
        """How much older the snapshot's newest change is than the log's, in source commit time."""
        if self.to_scn >= self.log_scn:
            return 0.0
        if self.applied_commit_ms is None or self.log_commit_ms is None:
            return None
        return max(0, self.log_commit_ms - self.applied_commit_ms) / 1000


def pick_engine(spark: SparkLike, config: DatabusConfig | None = None) -> DeltaEngine:
    """delta-spark when its classes load in the session, else delta-rs; with ``config`` saying delta-spark
    cannot be on the classpath, delta-rs without starting a session."""
    from dagster_databus.snapshot.spark import delta_spark_available, may_commit_with_delta_spark

    if config is not None and not may_commit_with_delta_spark(config.spark):
        return DeltaRsEngine()
    session = session_of(spark)
    return DeltaSparkEngine(session) if delta_spark_available(session) else DeltaRsEngine()


def session_of(spark: SparkLike) -> SparkSession:
    return spark() if callable(spark) else spark  # type: ignore[return-value]


def read_changes(spark: SparkSession, config: DatabusConfig, source: str, table: str,
                 since: Scn, until: Scn) -> DataFrame:
    return (spark.read.format("databus_log")
            .option("lake", config.lake.spec()).option("source", source).option("table", table)
            .option("since", str(since)).option("until", str(until)).load())


def reduce_latest(changes: DataFrame, primary_key: Sequence[str]) -> DataFrame:
    """One row per key: the event with the highest (SCN, position in window)."""
    from pyspark.sql import Window as SparkWindow
    from pyspark.sql import functions as F

    order = SparkWindow.partitionBy(*[F.col(f"`{k}`") for k in primary_key]).orderBy(
        F.col("__scn").desc(), F.col("__seq").desc())
    return changes.withColumn("__rank", F.row_number().over(order)).where("__rank = 1").drop("__rank")


def to_merge_table(reduced: DataFrame, schema: TableSchema) -> pa.Table:
    return conform_changes(reduced.toArrow(), schema.arrow(with_meta=True))


def to_merge_frame(reduced: DataFrame, schema: TableSchema) -> DataFrame:
    """Reduced change rows in the snapshot's columns, still a distributed Spark DataFrame."""
    from pyspark.sql import functions as F

    return reduced.select(*[F.col(f"`{c}`") for c in schema.column_names], "__scn", "__op",
                          F.timestamp_millis("__commit_ts_ms").alias("__commit_ts"))


def conform_changes(data: pa.Table | pa.RecordBatch, target: pa.Schema) -> pa.Table:
    """Change rows as read from the log (``__commit_ts_ms``), in the snapshot's columns and types."""
    columns = [pc.multiply(data["__commit_ts_ms"], 1000).cast(f.type) if f.name == "__commit_ts"
               else data[f.name].cast(f.type) for f in target]
    return pa.Table.from_arrays(columns, schema=target)


@contextmanager
def reduced_in_process(log: ChangeLog, schema: TableSchema, since: Scn, until: Scn, memory_bytes: int,
                       spill_dir: Path | None = None, progress: Progress = lambda _: None
                       ) -> Iterator[tuple[pa.RecordBatchReader, ChangeStats]]:
    """The newest change per key after ``since``, as a stream in the snapshot's columns; the stats are
    complete on entry (the reduce has read every change), the rows come as the stream is read."""
    reducer = NewestPerKey(change_schema(schema), schema.primary_key, memory_bytes, spill_dir)
    expected = sum(s.tables.get(schema.table, 0) for s in log.manifest().between(since, until))
    try:
        reading = Ticker(progress, f"{schema.table}: reading and reducing changes", "events", expected)
        reducer.extend(reading.counted(table_changes(log, schema, since, until), lambda b: b.num_rows))
        reading.finish()
        target = schema.arrow(with_meta=True)
        merging = Ticker(progress, f"{schema.table}: merging", "keys")
        batches = (b for reduced in reducer.results() for b in conform_changes(reduced, target).to_batches())
        with pa.RecordBatchReader.from_batches(target, merging.counted(batches, lambda b: b.num_rows)) as reader:
            yield reader, reducer.stats
        merging.finish()
    finally:
        reducer.close()


def apply_changes(engine: DeltaEngine, snap: DeltaSnapshot, schema: TableSchema,
                  changes: Changes, until: Scn) -> MergeCounts | None:
    """Merge reduced changes that bring the snapshot up to ``until``.

    A replay (``until`` at or below the applied SCN) changes nothing and returns None; rows
    at or below the applied SCN are dropped; per key, the MERGE applies only newer SCNs.
    """
    applied = snap.applied_scn()
    if applied is None:
        raise SnapshotMissingError(
            f"snapshot {snap.source}.{snap.table} has not been bootstrapped ({snap.uri})",
            f"materialize the {snap.source}/{snap.table} asset, which bootstraps it first",
        )
    if until <= applied:
        return None
    crash_point("delta_commit")
    with disk_errors(f"committing {snap.source}.{snap.table} to Delta", snap.path):
        counts = engine.merge(snap, schema, drop_stale(changes, applied), until)
    crash_point("delta_committed")
    return counts


SyncMode = Literal["merge", "bootstrap", "rebuild"]


def sync_table(spark: SparkLike, config: DatabusConfig, source_cfg: SourceConfig, table: str,
               engine: DeltaEngine, progress: Progress = lambda _: None, mode: SyncMode = "merge") -> TableSyncResult:
    """Bring ``table``'s snapshot up to the log's high watermark.

    ``merge``: bootstrap if there is no snapshot (or DDL since the last bootstrap), then merge.
    ``bootstrap``: read the table afresh from the source first, whatever the snapshot holds.
    ``rebuild``: restore the snapshot as its last bootstrap left it (Delta time travel) and replay
    the retained log from there; refused if the log no longer reaches back that far.
    """
    started = time.monotonic()
    log = ChangeLog(config.lake, source_cfg.name)
    snap = DeltaSnapshot(config.lake, source_cfg.name, table)
    lock = snap.lock(f"snapshot {source_cfg.name}.{table}", "wait for the other merge of this table to finish")
    with lock:
        log.require_intact()
        bootstrapped_at, bootstrap_rows = None, 0
        if mode == "rebuild":
            restored = rebuild_from_bootstrap(snap, log, progress)
            bootstrapped_at, bootstrap_rows = restored
        applied = snap.applied_scn() if mode != "bootstrap" else None
        ddl = log.ddl.last_for(table)
        if applied is not None and ddl is not None and ddl.scn > (snap.bootstrap_scn() or Scn.BEGINNING):
            # The table was altered or truncated: its rows changed without row events, or its
            # columns no longer fit the snapshot. Read it afresh.
            progress(f"{table}: re-bootstrapping after DDL at SCN {ddl.scn}: {ddl.statement[:120]}")
            applied = None
        registered = log.schemas.latest(table)
        retyped = snap.type_differences(registered[1]) if applied is not None and registered is not None else []
        if retyped:
            # Never mix types in one column: read the table afresh in the types the log now holds.
            progress(f"{table}: re-bootstrapping, the snapshot holds columns in other types: {'; '.join(retyped)}")
            applied = None
        if applied is None:
            source = open_source(source_cfg, config.lake)
            # SQLite is read in one consistent transaction in this process; servers in parallel Spark tasks.
            snapshot = source.snapshot(table, spark=session_of(spark) if source_cfg.kind != "sqlite" else None)
            progress(f"{table}: bootstrapping from the source at SCN {snapshot.scn}")
            log.schemas.register(snapshot.schema)
            reading = Ticker(progress, f"{table}: bootstrapping", "rows")
            with disk_errors(f"bootstrapping {source_cfg.name}.{table} into Delta", snap.path):
                bootstrap_rows = engine.bootstrap(snap, snapshot.schema,
                                                  reading.counted(snapshot.batches, lambda b: b.num_rows), snapshot.scn)
            applied = bootstrapped_at = snapshot.scn
            progress(f"{table}: bootstrapped {bootstrap_rows} rows at SCN {applied}")
        latest = log.schemas.latest(table)
        until = log.committed_scn()
        events, windows, by_op, counts = 0, 0, {}, MergeCounts()
        to_scn = applied
        if until > applied and latest is not None:
            schema = latest[1]
            with ExitStack() as cleanup:
                changes: pa.RecordBatchReader | DataFrame
                if isinstance(engine, DeltaSparkEngine):
                    read = read_changes(engine.spark, config, source_cfg.name, table, applied, until).cache()
                    cleanup.callback(read.unpersist)
                    changes = to_merge_frame(reduce_latest(read, schema.primary_key), schema)
                    stats = spark_stats(read)
                else:
                    changes, stats = cleanup.enter_context(reduced_in_process(
                        log, schema, applied, until, config.merge.memory_mb * 2**20, config.merge.spill_dir,
                        progress))
                by_op, events, windows = stats.events_by_op, stats.events, stats.windows
                spilled = f", {stats.spilled_bytes / 2**20:,.0f} MiB spilled to disk" if stats.spilled_bytes else ""
                progress(f"{table}: merging {events} events in {windows} windows, SCN {applied}..{until}{spilled}")
                counts = apply_changes(engine, snap, schema, changes, until) or MergeCounts()
            to_scn = until
        return TableSyncResult(
            source=source_cfg.name, table=table, engine=engine.name, bootstrapped_at=bootstrapped_at,
            bootstrap_rows=bootstrap_rows, from_scn=applied,
            to_scn=to_scn, events=events, windows=windows, events_by_op=by_op, counts=counts,
            snapshot_rows=snap.row_count(), log_scn=until, delta_version=snap.version(),
            duration_s=time.monotonic() - started,
            applied_commit_ms=applied_commit_ms(snap, log, to_scn), log_commit_ms=log.commit_ms_through(until),
        )


def spark_stats(changes: DataFrame) -> ChangeStats:
    from pyspark.sql import functions as F

    stats = changes.agg(*[F.count(F.when(F.col("__op") == op, 1)).alias(op) for op in "iud"],
                        F.countDistinct("__window_scn").alias("windows")).collect()[0]
    return ChangeStats({op: stats[op] for op in "iud" if stats[op]}, stats["windows"])


def applied_commit_ms(snap: DeltaSnapshot, log: ChangeLog, applied: Scn) -> int | None:
    """The source commit time the snapshot is current to (ms): its last merged window's, or, when nothing
    was merged since its bootstrap, the bootstrap's (it read every commit before it)."""
    if applied == snap.bootstrap_scn():
        return snap.bootstrapped_ms()
    return log.commit_ms_through(applied)


def sync_source(spark: SparkLike, config: DatabusConfig, source: str, tables: Sequence[str] | None = None,
                progress: Progress = lambda _: None, mode: SyncMode = "merge") -> list[TableSyncResult]:
    source_cfg = config.source(source)
    engine = pick_engine(spark, config)
    names = list(tables) if tables is not None else [t.name for t in source_cfg.tables]
    with task_errors():
        return [sync_table(spark, config, source_cfg, name, engine, progress, mode) for name in names]


def rebuild_from_bootstrap(snap: DeltaSnapshot, log: ChangeLog, progress: Progress) -> tuple[Scn, int]:
    """Overwrite the snapshot with its state right after its last bootstrap; return (SCN, rows)."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    boot = snap.bootstrap_scn()
    if boot is None:
        raise SnapshotMissingError(f"snapshot {snap.source}.{snap.table} has no bootstrap to rebuild from",
                                   "run a bootstrap of the table instead (mode: bootstrap)")
    start = log.manifest().start_scn
    if start > boot:
        raise SnapshotMissingError(
            f"cannot rebuild {snap.source}.{snap.table}: the change log now starts after SCN {start}, but the "
            f"snapshot's last bootstrap was at SCN {boot}, so the changes in between are gone",
            "run a bootstrap of the table instead (mode: bootstrap)")
    current = snap.delta()
    lo, hi = 0, current.version()
    while lo < hi:  # the first version whose bootstrap transaction is the current one
        mid = (lo + hi) // 2
        if snap.delta(version=mid).transaction_version(snap.bootstrap_app_id) == boot.value:
            hi = mid
        else:
            lo = mid + 1
    try:
        data = snap.delta(version=lo).to_pyarrow_table()
    except Exception as exc:
        raise SnapshotMissingError(
            f"version {lo} of {snap.source}.{snap.table} (its last bootstrap) cannot be read: {exc}",
            "run a bootstrap of the table instead (mode: bootstrap); VACUUM removed the old files") from exc
    txns = [Transaction(app_id=snap.app_id, version=boot.value),
            Transaction(app_id=snap.bootstrap_app_id, version=boot.value)]
    write_deltalake(snap.uri, data, mode="overwrite", schema_mode="overwrite", storage_options=snap.storage_options,
                    commit_properties=CommitProperties(app_transactions=txns))
    progress(f"{snap.table}: restored version {lo} ({data.num_rows} rows, bootstrap SCN {boot}); replaying the log")
    return boot, data.num_rows
