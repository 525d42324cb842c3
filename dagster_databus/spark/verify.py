"""The snapshot's side of a rolling verification's slice in Spark tasks: one task per data file that may hold the
slice computes its rows' canonical digests (``dataplane.slices.SliceRows``), and only (key text, digest) pairs
reach the driver, which joins them with the source's read (``sync.verify``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_databus.dataplane.slices import DIGESTS, DIGESTS_SPARK, unsigned
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.jobs import SparkJobs

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_databus.core.progress import Progress
    from dagster_databus.dataplane.slices import SliceRows


class SliceVerifying(SparkJobs):
    def slice_digests(self, rows: SliceRows, progress: Progress) -> pa.Table:
        """One task per file, the digests collected as Arrow; files within ``merge.in_driver_mib`` are read here,
        as the local engine reads them, for less than a Spark job costs."""
        files = len(rows.paths)
        if not files:
            return DIGESTS.empty_table()
        if rows.bytes <= self.config.merge.in_driver_bytes:
            return rows.digests_of(rows.paths)
        with task_errors(), self.spark.job_progress(progress, f"{rows.schema.table}: verifying a slice"):
            got = self.spark.session.range(0, files, 1, files).mapInArrow(rows, DIGESTS_SPARK).toArrow()
        return unsigned(got)
