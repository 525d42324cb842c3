"""Bootstrap of a 1M-row table into a Delta snapshot vs a bare SELECT * written to Parquet (the floor),
for SQLite (one consistent read) and MariaDB (key ranges in parallel Spark tasks)."""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import best_of, report
from dagster_databus import pipeline
from dagster_databus.config import parse_config
from dagster_databus.snapshot.delta import DeltaRsEngine
from dagster_databus.snapshot.merge import sync_table
from dagster_databus.spark.session import get_spark
from tests.mariadb import MariaDBServer

COLUMNS = ["id", "name", "price", "qty", "note"]


def rows(n: int):
    return ((i, f"item {i}", i * 0.5, i % 97, None if i % 3 else "x") for i in range(n))


def bare_to_parquet(fetch, out: Path) -> None:
    data = list(zip(*fetch(), strict=True))
    pq.write_table(pa.table(dict(zip(COLUMNS, [list(c) for c in data], strict=True))), out)


def sqlite_case(work: Path, n: int) -> None:
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, note TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?)", rows(n))
    config = parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "sqlite", "path": str(db), "tables": [{"name": "items", "primary_key": ["id"]}]}]},
        base=work)
    pipeline.install(config, "b")
    spark = get_spark(config.spark)

    def ours() -> None:
        shutil.rmtree(work / "lake" / "snapshot", ignore_errors=True)
        sync_table(spark, config, config.sources[0], "items", DeltaRsEngine())

    def bare() -> None:
        with sqlite3.connect(db) as conn:
            bare_to_parquet(lambda: conn.execute("SELECT * FROM items").fetchall(), work / "bare.parquet")

    report("SQLite bootstrap", n, ("ours: consistent read -> Delta", best_of(ours, 2)),
           ("bare SELECT * -> Parquet", best_of(bare, 2)))


def mysql_case(work: Path, n: int) -> None:
    server = MariaDBServer()
    try:
        server.execute("CREATE DATABASE bench", "CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), "
                       "price DOUBLE, qty INT, note VARCHAR(20))")
        conn = server.connect("bench")
        with conn.cursor() as cur:
            batch = []
            for row in rows(n):
                batch.append(row)
                if len(batch) == 10_000:
                    cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)", batch)
                    batch = []
            if batch:
                cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)", batch)
        config = parse_config({"lake": str(work / "mlake"), "sources": [
            {"name": "m", "kind": "mysql", "port": server.port, "user": "root", "database": "bench",
             "bootstrap_chunk_rows": 125_000, "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
        pipeline.install(config, "m")
        spark = get_spark(config.spark)

        def ours() -> None:
            shutil.rmtree(work / "mlake" / "snapshot", ignore_errors=True)
            sync_table(spark, config, config.sources[0], "items", DeltaRsEngine())

        def bare() -> None:
            c = server.connect("bench")
            with c.cursor() as cur:
                cur.execute("SELECT * FROM items")
                bare_to_parquet(cur.fetchall, work / "mbare.parquet")
            c.close()

        report("MariaDB bootstrap (parallel Spark tasks)", n, ("ours: key ranges in Spark -> Delta", best_of(ours, 2)),
               ("bare SELECT * -> Parquet", best_of(bare, 2)))
    finally:
        server.close()


def main(n: int = 1_000_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-bootstrap-"))
    try:
        sqlite_case(work, n)
        mysql_case(work, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
