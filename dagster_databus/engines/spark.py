"""The spark engine, assembled from the Spark jobs of ``spark/``: Spark tasks read, reduce and write the data
files; the driver commits them.

Bootstrap (``spark.range_reads``): the source's table is cut into primary-key ranges; Spark's tasks read a few each
(``spark.jobs.range_tasks``), each range on its own connection, and write its rows as Parquet straight into the
snapshot's folder, clustered by key; a killed bootstrap resumes with the ranges it lacks. Merge (``spark.merge``,
``spark.rewrite``): tasks read the change log segment by segment, route every change to the group of files that
may hold its key, and rewrite only the files that do (``dataplane.merging``). History tables (``spark.history``)
and logical tables (``spark.logical``) are built by the same two kinds of job (``spark.jobs``); a verification
slice's digests (``spark.verify``) are computed by a task per file. Work within ``merge.in_driver_mib`` (a
scheduled run's merges, a small slice) runs the same code in the driver, with no Spark job. Either way only file
descriptions reach the driver, which commits them in one delta-rs transaction with the transaction ids
(``dataplane.commit``); the delta-spark jars are never needed.
"""

from __future__ import annotations

from dagster_databus.spark.history import HistoryTables
from dagster_databus.spark.logical import LogicalTables
from dagster_databus.spark.merge import SnapshotMerging
from dagster_databus.spark.range_reads import RangeReads
from dagster_databus.spark.verify import SliceVerifying


class SparkEngine(RangeReads, SnapshotMerging, HistoryTables, LogicalTables, SliceVerifying):
    """``engines.contract.MergeEngine`` on a ``SparkRuntime``, which it starts when it first runs a job."""
