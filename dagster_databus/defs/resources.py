"""Dagster resources: the loaded config and the Spark runtime the merge engine runs on, started lazily."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from dagster_databus.config import DatabusConfig, load_config
from dagster_databus.spark.runtime import SparkRuntime


class DatabusResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # generic in the value it gives: itself
    """Gives assets the databus config, and the Spark runtime built from it; Spark starts only when a step's
    engine runs a job."""

    config_path: str

    _config: DatabusConfig | None = PrivateAttr(default=None)
    _spark: SparkRuntime | None = PrivateAttr(default=None)

    def config(self) -> DatabusConfig:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    @property
    def spark(self) -> SparkRuntime:
        """The runtime the merge engine runs on (``config.spark``), built once; Spark itself starts when the
        engine first runs a job (the local engine never does)."""
        if self._spark is None:
            self._spark = SparkRuntime(self.config().spark)
        return self._spark

    def start_spark(self) -> None:
        """Start Spark in the background while the step does other work, when the merge engine will use it."""
        if self.config().merge.engine != "local":
            self.spark.start_in_background()
