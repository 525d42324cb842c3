"""The engines that bootstrap and merge snapshots (``dataplane.engine.MergeEngine``): ``merge.engine`` picks
one. ``local`` runs in this process (``engines.local``); ``spark`` and ``delta-spark`` are Spark's
(``spark.engine``, ``spark.delta_spark``), imported only when chosen, so the local engine never loads pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_databus.config import DatabusConfig
    from dagster_databus.dataplane.engine import MergeEngine, SparkProvider


def open_engine(config: DatabusConfig, spark: SparkProvider) -> MergeEngine:
    """The engine ``config.merge.engine`` names; ``spark`` is called only if the engine runs Spark."""
    choice = config.merge.engine
    if choice == "local":
        from dagster_databus.snapshot.engines.local import LocalEngine

        return LocalEngine(config)
    if choice == "auto":
        from dagster_databus.spark.session import delta_spark_available, may_commit_with_delta_spark

        choice = "delta-spark" if may_commit_with_delta_spark(config.spark) and delta_spark_available(spark()) \
            else "spark"
    if choice == "delta-spark":
        from dagster_databus.spark.delta_spark import DeltaSparkEngine

        return DeltaSparkEngine(config, spark)
    from dagster_databus.spark.engine import SparkEngine

    return SparkEngine(config, spark)
