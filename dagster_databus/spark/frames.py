"""Spark frames the engines build from the change log's changes (``spark.logread.read_changes``): reduced to the
newest per key with a window function (``reduce_latest``), in a snapshot's columns (``to_merge_frame``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_databus.core.schema import TableSchema
    from dagster_databus.spark.runtime import SparkRuntime


def reduce_latest(spark: SparkRuntime, changes: DataFrame, primary_key: Sequence[str]) -> DataFrame:
    """One row per key: the event with the highest (SCN, position in window)."""
    F, SparkWindow = spark.functions(), spark.window()
    order = SparkWindow.partitionBy(*[F.col(f"`{k}`") for k in primary_key]).orderBy(
        F.col("__scn").desc(), F.col("__seq").desc())
    return changes.withColumn("__rank", F.row_number().over(order)).where("__rank = 1").drop("__rank")


def to_merge_frame(spark: SparkRuntime, reduced: DataFrame, schema: TableSchema) -> DataFrame:
    """Reduced change rows in the snapshot's columns, still a distributed Spark DataFrame."""
    F = spark.functions()
    return reduced.select(*[F.col(f"`{c}`") for c in schema.column_names], "__scn", "__op",
                          F.timestamp_millis("__commit_ts_ms").alias("__commit_ts"))
