"""Dagster resources: the loaded config and a lazily started Spark session."""

from __future__ import annotations

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
