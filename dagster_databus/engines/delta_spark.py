"""The delta-spark engine: Spark's own Delta MERGE, where delta-spark's classes load in the session.

The source's key ranges are read by Spark tasks (``spark.tables``) and written by Spark's Delta writer; the
change log is read by Spark tasks (``spark.logsource``), reduced with a window function and MERGEd, all
distributed. Everything else (refresh, evolution, compaction, history and logical tables) keeps the spark
engine's layout and is the spark engine's (``engines.spark``). The jars come from Maven or a folder
(``spark.delta_jars``); without them this engine is refused with that fix.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dagster_databus.core.pickle_text import pack
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import SOFT_DELETE, MergeCounts, merge_clauses
from dagster_databus.dataplane.reduce import ChangeStats
from dagster_databus.dataplane.results import Bootstrapped, Merged, range_rows, soft_deletes
from dagster_databus.engines.spark import SparkEngine
from dagster_databus.errors import ConfigError
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.frames import reduce_latest, to_merge_frame
from dagster_databus.spark.logread import read_changes

if TYPE_CHECKING:
    from dagster_databus.core.progress import Progress
    from dagster_databus.core.schema import TableSchema
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.base import Source


class DeltaSparkEngine(SparkEngine):
    name = "delta-spark"

    def _require_delta_spark(self) -> None:
        if not self.spark.delta_spark_available():
            raise ConfigError("merge.engine", "delta-spark's classes do not load in the Spark session",
                              "put delta-spark_2.13-4.4.*.jar and delta-storage-4.4.*.jar in a folder named by "
                              "spark.delta_jars (or DATABUS_DELTA_JARS), run on a cluster that has them, or use "
                              "merge.engine: spark")

    def bootstrap(self, snap: DeltaSnapshot, source: Source, table: str, progress: Progress) -> Bootstrapped:
        from pyspark import StorageLevel

        self._require_delta_spark()
        spark = self.spark
        F = spark.functions()
        read = source.reads.ranges(table, range_rows(self.config, source))
        rows = (spark.frame("databus_table", read=pack(read),
                            tasks=pack(self.range_tasks(range(len(read.ranges)))))
                .withColumn("__op", F.lit("r"))
                .withColumn("__commit_ts", F.timestamp_millis(F.lit(int(time.time() * 1000)))))
        rows = rows.select(*[F.col(f"`{n}`") for n in read.schema.arrow(with_meta=True).names])
        with task_errors(), spark.job_progress(progress, f"{table}: bootstrapping"):
            if read.scn is None:  # each range read at its own position: the snapshot's SCN is the lowest
                rows = rows.persist(StorageLevel.DISK_ONLY)
                low = rows.agg(F.min("__scn")).collect()[0][0]
                scn = Scn(low) if low is not None else Scn(source.stream.high_water_mark().value)
            else:
                scn = read.scn
            count = rows.count()
            (rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
             .option("txnAppId", snap.app_id).option("txnVersion", scn.value).save(snap.spark_uri))
            rows.unpersist()
        # delta-spark takes one transaction id per write: record the bootstrap SCN in a second, empty one.
        (rows.limit(0).write.format("delta").mode("append")
         .option("txnAppId", snap.bootstrap_app_id).option("txnVersion", scn.value).save(snap.spark_uri))
        return Bootstrapped(scn, read.schema, count)

    def merge(self, snap: DeltaSnapshot, log: ChangeLog, schema: TableSchema, since: Scn, until: Scn,
              progress: Progress) -> Merged | None:
        applied = snap.bootstrapped()[1]
        if until <= applied:
            return None
        self._require_delta_spark()
        spark = self.spark
        F, SparkDeltaTable = spark.functions(), spark.delta_table()
        session: Any = spark.session
        with task_errors(), spark.job_progress(progress, f"{schema.table}: merging"):
            read = read_changes(spark, self.config, snap.source, schema.table, max(since, applied), until).cache()
            stats = read.agg(*[F.count(F.when(F.col("__op") == op, 1)).alias(op) for op in "iud"],
                             F.countDistinct("__window_scn").alias("windows")).collect()[0]
            source = to_merge_frame(spark, reduce_latest(spark, read, schema.primary_key), schema)
            source = source.where(F.col("__scn") > applied.value)
            predicate, assignments, newer, is_delete = merge_clauses(schema.primary_key, source.columns)
            backtick = {k.replace('"', "`"): v.replace('"', "`") for k, v in assignments.items()}
            session.conf.set("spark.databricks.delta.write.txnAppId", snap.app_id)
            session.conf.set("spark.databricks.delta.write.txnVersion", str(until.value))
            soft = soft_deletes(self.config, snap)
            deleting = f"{is_delete} AND {newer}".replace('"', "`")
            try:
                merge = SparkDeltaTable.forPath(session, snap.spark_uri).alias("t").merge(
                    source.alias("s"), predicate.replace('"', "`"))
                merge = merge.whenMatchedUpdate(deleting, set={k.replace('"', "`"): v.replace('"', "`")
                                                               for k, v in SOFT_DELETE.items()}) if soft else \
                    merge.whenMatchedDelete(deleting)
                (merge.whenMatchedUpdate(f"NOT ({is_delete}) AND {newer}".replace('"', "`"), set=backtick)
                 .whenNotMatchedInsert(f"NOT ({is_delete})".replace('"', "`"), values=backtick)
                 .execute())
            finally:
                session.conf.unset("spark.databricks.delta.write.txnAppId")
                session.conf.unset("spark.databricks.delta.write.txnVersion")
                read.unpersist()
        metrics = SparkDeltaTable.forPath(session, snap.spark_uri).history(1).collect()[0]["operationMetrics"]
        counts = MergeCounts(inserted=int(metrics.get("numTargetRowsInserted", 0)),
                             updated=int(metrics.get("numTargetRowsUpdated", 0)),
                             deleted=int(metrics.get("numTargetRowsDeleted", 0)))
        return Merged(counts, ChangeStats({op: stats[op] for op in "iud" if stats[op]}, stats["windows"]))
