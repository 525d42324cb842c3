"""Dagster resources: the loaded config and the Spark runtime the merge engine runs on, started lazily."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from dagster_databus.config import DatabusConfig, load_config, parse_config
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import SyncMode, spark_ahead


class DatabusResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # generic in the value it gives: itself
    """Gives assets the databus config, and the Spark runtime built from it; Spark starts only when a step's
    engine runs a job. The config is read where the step runs, from a file (``config_path``: the workspace's
    definitions) or from the document a component's YAML gave (``config_document``, its relative paths taken
    from ``config_base``, the YAML's folder)."""

    config_path: str | None = None
    config_document: str | None = None
    config_base: str | None = None

    _config: DatabusConfig | None = PrivateAttr(default=None)
    _spark: SparkRuntime | None = PrivateAttr(default=None)

    @classmethod
    def for_file(cls, path: Path) -> DatabusResource:
        return cls(config_path=str(path.resolve()))

    @classmethod
    def for_document(cls, document: Mapping[str, Any], base: Path) -> DatabusResource:
        return cls(config_document=json.dumps(document, sort_keys=True), config_base=str(base.resolve()))

    def config(self) -> DatabusConfig:
        if self._config is None:
            if self.config_document is not None:
                self._config = parse_config(json.loads(self.config_document), base=Path(self.config_base or "."))
            else:
                self._config = load_config(self.config_path)
        return self._config

    @property
    def spark(self) -> SparkRuntime:
        """The runtime the merge engine runs on (``config.spark``), built once; Spark itself starts when the
        engine first runs a job (the local engine never does)."""
        if self._spark is None:
            self._spark = SparkRuntime(self.config().spark)
        return self._spark

    def start_spark(self, source: str, tables: Sequence[str], mode: SyncMode) -> None:
        """Start Spark in the background while the step does other work, when the sync will run Spark jobs
        (``sync.merge.spark_ahead``)."""
        if spark_ahead(self.config(), source, tables, mode):
            self.spark.start_in_background()
