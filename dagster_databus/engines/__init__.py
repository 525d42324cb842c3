"""The engines that bootstrap and merge snapshots, in one package: the interface (``contract.MergeEngine``; what
it returns is ``dataplane.results``), the local engine (``local``, ``local_logical``: this process, no pyspark),
and Spark's (``spark``: assembled from the Spark jobs of the ``spark`` package, ``delta_spark``). ``merge.engine``
picks one (``open_engine``); Spark's are imported only when chosen, so the local engine never loads pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster_databus.config import DatabusConfig
    from dagster_databus.engines.contract import MergeEngine
    from dagster_databus.spark.runtime import SparkRuntime


def open_engine(config: DatabusConfig, spark: SparkRuntime) -> MergeEngine:
    """The engine ``config.merge.engine`` names; ``spark`` starts only if the engine runs a Spark job (``auto``
    asks a session that may hold delta-spark's classes whether it does)."""
    choice = config.merge.engine
    if choice == "local":
        from dagster_databus.engines.local import LocalEngine

        return LocalEngine(config)
    if choice == "auto":
        from dagster_databus.spark.delta_jars import may_commit_with_delta_spark

        choice = "delta-spark" if may_commit_with_delta_spark(config.spark) and spark.delta_spark_available() \
            else "spark"
    if choice == "delta-spark":
        from dagster_databus.engines.delta_spark import DeltaSparkEngine

        return DeltaSparkEngine(config, spark)
    from dagster_databus.engines.spark import SparkEngine

    return SparkEngine(config, spark)
