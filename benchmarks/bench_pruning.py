"""File pruning by the spark engine: a 10M-row table, 20 merges of 10,000 changes each, all on the newest 5%
of keys (as recent rows change most). Each merge rewrites only the files that hold a changed key: printed
are files rewritten of all, and bytes rewritten beside the changed rows' own bytes, for three file sizes
(``merge.file_rows``): what copy-on-write trades (docs/performance.md, "File size").

Run alone: ``python -m benchmarks.bench_pruning [rows] [merges]``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_merge import config_for, write_log, write_snapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import engine_for, sync_table

CHANGES = 10_000


def run(rows: int, merges: int, file_rows: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-pruning-"))
    try:
        config = config_for(work, "local[2]", file_rows=file_rows)
        spark = SparkRuntime(config.spark).start()
        write_snapshot(config, rows, file_rows)
        engine = engine_for(spark, config)
        rng = np.random.default_rng(5)
        newest = np.arange(rows - rows // 20, rows, dtype=np.int64)
        totals = {"files_rewritten": 0, "files_before": 0, "bytes_rewritten": 0, "seconds": 0.0}
        changed_bytes = 0  # the changed rows' share of the files they are in, at those files' bytes per row
        for _ in range(merges):
            keys = np.sort(rng.choice(newest, CHANGES, replace=False))
            scn = ChangeLog(config.lake, "b").committed_scn().value + 1
            write_log(config, keys, first_scn=scn, times=1)
            started = time.perf_counter()
            result = sync_table(config, config.sources[0], "items", engine)
            totals["seconds"] += time.perf_counter() - started
            files = result.data_files
            assert files is not None, "the spark engine counts the files it touches"
            totals["files_rewritten"] += files.rewritten
            totals["files_before"] += files.before
            totals["bytes_rewritten"] += files.bytes_rewritten
            changed_bytes += files.bytes_rewritten * CHANGES // max(files.rows_rewritten, 1)
        print(f"  {file_rows:>10,} rows per file: {totals['files_rewritten'] / merges:5.1f} of "
              f"{totals['files_before'] / merges:5.1f} files rewritten per merge, "
              f"{totals['bytes_rewritten'] / merges / 2**20:7.2f} MiB rewritten for "
              f"{changed_bytes / merges / 2**20:5.2f} MiB of changed rows "
              f"({totals['bytes_rewritten'] / max(changed_bytes, 1):6.1f}x), "
              f"{totals['seconds'] / merges:5.2f}s per merge")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(rows: int = 10_000_000, merges: int = 20) -> None:
    print(f"\nFile pruning: {merges} merges of {CHANGES:,} changes on the newest 5% of {rows:,} rows")
    for file_rows in (1_000_000, 250_000, 62_500):
        run(rows, merges, file_rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000, int(sys.argv[2]) if len(sys.argv) > 2 else 20)
