"""Capture and merge on an object-store lake beside the same on a local lake, in one run.

The store is the tests' S3-compatible server (moto) on a loopback port: what it shows is the cost
of the object-store protocol (a request per object, conditional puts, listings), not of a network
or of S3 itself. Same data, same code; only ``lake:`` differs.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

from benchmarks.common import SQLITE_CUT, best_of, report
from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.engines.local import write_snapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import engine_for, sync_table
from tests.support.s3server import S3Server

SCHEMA = TableSchema("b", "items", (Column("id", ColumnType("long")), Column("name", ColumnType("string")),
                                    Column("price", ColumnType("double"))), ("id",))


def _configs(work: Path, server: S3Server, source: dict) -> list[tuple[str, DatabusConfig]]:
    os.environ["BENCH_S3_SECRET"] = server.options["AWS_SECRET_ACCESS_KEY"]
    options = {**server.options, "AWS_SECRET_ACCESS_KEY": "${BENCH_S3_SECRET}"}
    return [("local lake", parse_config({"lake": str(work / "lake"), "sources": [source]}, base=work)),
            ("S3 lake (moto, loopback)", parse_config({"lake": f"s3://{server.bucket()}/lake",
                                                       "storage_options": options, "sources": [source]}, base=work))]


def _clear(config: DatabusConfig) -> None:
    if config.lake.path is not None:
        shutil.rmtree(config.lake.path, ignore_errors=True)
        return
    for info in config.lake.objects.list(""):
        config.lake.objects.delete(info.key)


def capture_by_lake(server: S3Server, rows: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    source = {"name": "b", "kind": "sqlite", "path": str(db), "prune_txlog": False, "poll": {"chunk_rows": 20_000},
              "tables": [{"name": "items", "primary_key": ["id"]}]}
    configs = _configs(work, server, source)
    capture.install(configs[0][1], "b")
    with sqlite3.connect(db) as conn:
        for start in range(0, rows, 10_000):
            conn.execute(SQLITE_CUT)  # windows of 10k rows
            conn.executemany("INSERT INTO items VALUES (?, ?, ?)",
                             [(i, f"item {i}", i * 0.5) for i in range(start, min(rows, start + 10_000))])
    timings = [(label, best_of(lambda c=config: capture.run(c, "b"), setup=lambda c=config: _clear(c)))
               for label, config in configs]
    report("SQLite capture by lake", rows, *[(f"capture, {label}", t) for label, t in timings[1:]], timings[0])
    shutil.rmtree(work)


def merge(server: S3Server, rows: int, changed_pct: float) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    source = {"name": "b", "kind": "sqlite", "path": str(work / "unused.db"),
              "tables": [{"name": "items", "primary_key": ["id"]}]}
    base = pa.table({"id": pa.array(range(rows), pa.int64()), "name": [f"n{i}" for i in range(rows)],
                     "price": [float(i) for i in range(rows)]})
    changed = int(rows * changed_pct / 100)
    events = [ChangeEvent(Scn(n + 1), n, "items", Op.UPDATE, (k,), {"id": k, "name": f"u{n}", "price": -1.0}, 0)
              for n, k in enumerate(range(0, rows, rows // changed))]
    configs = _configs(work, server, source)  # sets the secret's variable, which Spark's processes inherit
    spark = SparkRuntime(configs[0][1].spark).start()
    timings = []
    for label, config in configs:
        with ChangeLog(config.lake, "b").writer() as writer:
            writer.register_schemas([SCHEMA])
            writer.append([Window(scn=events[-1].scn, events=tuple(events))], "e")
        snap = DeltaSnapshot(config.lake, "b", "items")

        def fresh(snap: DeltaSnapshot = snap) -> None:
            if snap.lake.path is not None:
                shutil.rmtree(snap.path, ignore_errors=True)
            else:
                for info in snap.lake.objects.list("snapshot/"):
                    snap.lake.objects.delete(info.key)
            write_snapshot(snap, SCHEMA, iter(base.to_batches(max_chunksize=200_000)), Scn(0))

        timings.append((label, best_of(lambda c=config: sync_table(c, c.sources[0], "items", engine_for(spark, c)),
                                       setup=fresh)))
    report(f"merge {changed_pct:g}% into {rows:,} rows by lake", rows,
           *[(f"merge, {label}", t) for label, t in timings[1:]], timings[0])
    shutil.rmtree(work)


def main(rows: int = 200_000) -> None:
    server = S3Server()
    try:
        capture_by_lake(server, rows)
        merge(server, 1_000_000, 1.0)
    finally:
        server.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
