"""Dagster resources: the loaded config and a lazily started Spark session."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import PrivateAttr

from dagster_databus.config import DatabusConfig, load_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class DatabusResource(dg.ConfigurableResource):
    """Gives assets the databus config; starts Spark only when a step asks for it."""

    config_path: str

    _config: DatabusConfig | None = PrivateAttr(default=None)

    def config(self) -> DatabusConfig:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    def spark(self) -> SparkSession:
        from dagster_databus.spark.session import get_spark

        return get_spark(self.config().spark)

    def start_spark(self) -> None:
        """Start the Spark session (and learn its parallelism) in a background thread while the step does
        other work, when the merge engine will use it; the engine's first call waits for it. A failure is
        left for that call to raise, with its fix."""
        if self.config().merge.engine == "local":
            return

        def start() -> None:
            from dagster_databus.spark.session import default_parallelism

            with contextlib.suppress(Exception):
                default_parallelism(self.spark())

        threading.Thread(target=start, name="databus-spark-start", daemon=True).start()
