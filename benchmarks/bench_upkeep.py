"""Upkeep under many small merges: a snapshot merged N times (a few updates and new keys each, as a
five-minute poll brings them), with upkeep on its schedule (every ``EVERY`` merges) and without; the file
count and a full read of the snapshot beside the read of the same rows freshly written as a new table in
the same layout (key order, files of ``merge.file_rows`` rows).

Run alone: ``python -m benchmarks.bench_upkeep [merges]`` (the issue's figure is at 1,000 merges).
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from benchmarks.common import best_of
from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.upkeep import upkeep_source

ROWS = 200_000
EVERY = 50  # merges between upkeep runs: a daily schedule over five-minute polls is 288


def _setup(work: Path, engine: str) -> tuple[DatabusConfig, Path]:
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER)")
        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", ((i, f"n{i}", i / 8, i % 13) for i in range(ROWS)))
    config = parse_config({"lake": str(work / "lake"), "merge": {"engine": engine, "file_rows": 50_000},
                           "sources": [{"name": "b", "kind": "sqlite", "path": str(db), "upkeep": {"retain_hours": 0},
                                        "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
    return config, db


def _run(merges: int, upkeep: bool, engine: str) -> tuple[int, int, float, float, float]:
    """(files, files of the fresh table, full read s, the same rows freshly written read s, seconds in upkeep)."""
    work = Path(tempfile.mkdtemp(prefix="bench-upkeep-"))
    try:
        config, db = _setup(work, engine)
        spark = SparkRuntime(config.spark)  # the local engine never starts it
        capture.install(config, "b")
        sync_source(spark, config, "b")
        rng, next_id, upkept = random.Random(5), ROWS, 0.0
        conn = sqlite3.connect(db, isolation_level=None)
        for n in range(1, merges + 1):
            conn.execute("BEGIN")
            conn.executemany("UPDATE items SET qty = qty + 1 WHERE id = ?", ((rng.randrange(ROWS),) for _ in range(20)))
            conn.executemany("INSERT INTO items VALUES (?, 'new', 1.0, 0)", ((next_id + k,) for k in range(5)))
            conn.execute("COMMIT")
            next_id += 5
            capture.run(config, "b")
            sync_source(spark, config, "b")
            if upkeep and n % EVERY == 0:
                started = time.perf_counter()
                upkeep_source(config, "b", spark)
                upkept += time.perf_counter() - started
        conn.close()
        snap = DeltaSnapshot(config.lake, "b", "items")
        files = len(snap.delta().file_uris())
        read = best_of(lambda: DeltaTable(snap.uri).to_pyarrow_table(), 7)
        # The same rows written afresh as the engine lays a new table out, in key order: the local engine (delta-rs)
        # in one file, the spark engine in files of merge.file_rows rows.
        rows: pa.Table = DeltaTable(snap.uri).to_pyarrow_table().sort_by("id")
        fresh = work / "fresh"
        step = rows.num_rows if engine == "local" else config.merge.file_rows
        for start in range(0, rows.num_rows, step):  # one file per write
            write_deltalake(str(fresh), rows.slice(start, step), mode="append")
        read_fresh = best_of(lambda: DeltaTable(str(fresh)).to_pyarrow_table(), 7)
        fresh_files = len(DeltaTable(str(fresh)).file_uris())
        return files, fresh_files, read, read_fresh, upkept
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(merges: int = 1_000, engines: tuple[str, ...] = ("spark", "local")) -> None:
    for engine in engines:
        print(f"\nA {ROWS:,}-row snapshot after {merges:,} small merges (20 updates, 5 new keys each; {engine} engine)",
              flush=True)
        for upkeep in (True, False):
            files, fresh_files, read, fresh, upkept = _run(merges, upkeep, engine)
            label = f"upkeep every {EVERY} merges" if upkeep else "no upkeep"
            spent = f", upkeep {upkept:.1f}s in all" if upkeep else ""
            print(f"  {label:<26} {files:5d} files   full read {read:6.3f}s   the same rows freshly written "
                  f"({fresh_files} files) {fresh:6.3f}s   {read / fresh:5.2f}x{spent}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000, tuple(sys.argv[2:]) or ("spark", "local"))
