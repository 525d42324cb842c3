"""A Delta table's change data feed as a Spark DataFrame, read by Spark tasks without delta-spark.

``readChangeFeed`` needs delta-spark's jars (docs/deployment.md); this reads the same feed through the
``databus_delta_files`` source: for each version, the change files its commit names (``cdc`` actions),
or, for a commit without them, its added files as inserts and removed files as deletes, as the Delta
protocol says a reader must. Columns: the table's, then ``_change_type``, ``_commit_version`` and
``_commit_timestamp``, as delta-rs's ``load_cdf`` and Spark's ``readChangeFeed`` name them.

    feed = read_change_feed(SparkRuntime(config.spark), DeltaSnapshot(lake, "shop", "orders"), 12, 20)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dagster_databus.core.pickle_text import pack
from dagster_databus.dataplane.commit import location
from dagster_databus.dataplane.reads import FileRead
from dagster_databus.errors import SnapshotMissingError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from dagster_databus.dataplane.delta import DeltaFolder
    from dagster_databus.spark.runtime import SparkRuntime

FEED_COLUMNS = (pa.field("_change_type", pa.string()), pa.field("_commit_version", pa.int64()),
                pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")))


def change_feed_files(folder: DeltaFolder, start: int, end: int) -> list[FileRead]:
    """The files holding versions ``start``..``end`` of the feed, each with its version and commit time."""
    reads = []
    for version in range(start, end + 1):
        body = folder.lake.objects.read(f"{folder.key}/_delta_log/{version:020d}.json")
        if body is None:
            raise SnapshotMissingError(f"version {version} of {folder.uri} has no commit in its Delta log",
                                       "read versions the table has (its log keeps them as long as "
                                       "delta.logRetentionDuration says)")
        actions: list[dict[str, Any]] = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        millis = next((a["commitInfo"].get("timestamp", 0) for a in actions if "commitInfo" in a), 0)
        stamp = {"_commit_version": str(version),
                 "_commit_timestamp": datetime.fromtimestamp(millis / 1000, UTC).isoformat()}
        changes = [a["cdc"]["path"] for a in actions if "cdc" in a]
        where = location(folder)
        if changes:
            reads += [FileRead(where, path, stamp) for path in changes]
            continue
        for kind, change in (("add", "insert"), ("remove", "delete")):
            reads += [FileRead(where, a[kind]["path"], {**stamp, "_change_type": change})
                      for a in actions if kind in a and a[kind].get("dataChange", True)]
    return reads


def read_change_feed(spark: SparkRuntime, folder: DeltaFolder, start: int, end: int | None = None) -> DataFrame:
    """Versions ``start``..``end`` (default: the newest) of ``folder``'s change data feed, one task per file (on
    ``spark``: ``SparkRuntime(config.spark)``, or ``SparkRuntime.of(session)`` for a session of one's own)."""
    table = folder.delta()
    end = table.version() if end is None else end
    schema = pa.schema([*pa.schema(table.schema().to_arrow()), *FEED_COLUMNS])
    return spark.frame("databus_delta_files", files=pack(change_feed_files(folder, start, end)), schema=pack(schema))
