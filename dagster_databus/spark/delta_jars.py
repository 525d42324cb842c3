"""Where delta-spark's jars come from (``spark.delta_jars``, ``DATABUS_DELTA_JARS``), and whether a config could
put them on a session's classpath. Whether they load in a running session is the runtime's to say
(``SparkRuntime.delta_spark_available``)."""

from __future__ import annotations

import os
from pathlib import Path

from dagster_databus.config import SparkConfig

DELTA_JARS_ENV = "DATABUS_DELTA_JARS"


def delta_jar_dir(config: SparkConfig) -> Path | None:
    """The folder of delta-spark's jars a classic session puts on its classpath, if there is one."""
    folder = config.delta_jars or (Path(os.environ[DELTA_JARS_ENV]) if os.environ.get(DELTA_JARS_ENV) else None)
    return folder if folder and any(folder.glob("delta-spark*.jar")) else None


def may_commit_with_delta_spark(config: SparkConfig) -> bool:
    """Whether delta-spark could be on the session's classpath; when not, merges need no Spark session."""
    if config.remote:
        return True  # the server's classpath is its own: the runtime asks it
    if delta_jar_dir(config) is not None:
        return True
    return any("delta" in value.lower() for key, value in config.conf.items()
               if key.startswith("spark.jars") or key in ("spark.sql.extensions", "spark.driver.extraClassPath"))
