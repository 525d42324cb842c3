"""The lake's Delta tables (snapshots, histories, logical tables) as Spark DataFrames, with no delta-spark jars:
one version's data files, one task per file, read through the storage layer as the product's own jobs read
them (``databus_delta_files``). The change data feed is ``spark.changefeed.read_change_feed``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from dagster_databus.core.pickle_text import pack
from dagster_databus.dataplane.commit import location
from dagster_databus.dataplane.reads import FileRead
from dagster_databus.spark.jobs import paths

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_databus.dataplane.delta import DeltaFolder
    from dagster_databus.spark.runtime import SparkRuntime


def read_table(spark: SparkRuntime, folder: DeltaFolder, version: int | None = None) -> DataFrame:
    """Every row of ``folder``'s table at ``version`` (default: the newest), metadata columns included (a
    snapshot's soft-deleted rows too: filter ``__op != 'd'``), on ``spark`` (``SparkRuntime(config.spark)``, or
    ``SparkRuntime.of(session)`` for a session of one's own)."""
    table = folder.delta(version)
    where = location(folder)
    files = [FileRead(where, path) for path in paths(table)]
    return spark.frame("databus_delta_files", files=pack(files), schema=pack(pa.schema(table.schema().to_arrow())))
