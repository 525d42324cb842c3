"""Bootstrap of a table into a Delta snapshot by the spark engine (key ranges read and written as Parquet by
Spark tasks, the driver commits the files) beside a bare ``SELECT *`` written to Parquet (the floor) and
the local engine; and the driver's memory during the bootstrap at two table sizes, which should not grow
with the rows. SQLite (the embedded source) and MariaDB (a server with binary logging).

Run alone: ``python -m benchmarks.bench_bootstrap [rows] [memory rows]``.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import best_of, jvm_rss_growth, report
from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import TableSyncResult, engine_for, sync_table
from tests.support.mariadb import MariaDBServer

COLUMNS = ["id", "name", "price", "qty", "note"]
MASTER = "local[2]"


def rows(start: int, end: int):
    return ((i, f"item {i}", i * 0.5, i % 97, None if i % 3 else "x") for i in range(start, end))


def bare_to_parquet(fetch: Callable[[], list], out: Path) -> None:
    data = list(zip(*fetch(), strict=True))
    pq.write_table(pa.table(dict(zip(COLUMNS, [list(c) for c in data], strict=True))), out)


def bootstrap(config: DatabusConfig, engine: str = "spark") -> TableSyncResult:
    cfg = config if engine == "spark" else config.model_copy(update={"merge": config.merge.model_copy(
        update={"engine": engine})})
    shutil.rmtree(cfg.lake.path / "snapshot", ignore_errors=True)
    return sync_table(cfg, cfg.sources[0], "items", engine_for(SparkRuntime(cfg.spark), cfg))


def sqlite_case(work: Path, n: int) -> None:
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, note TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?)", rows(0, n))
    config = parse_config({"lake": str(work / "lake"), "spark": {"master": MASTER}, "merge": {"file_rows": 250_000},
                           "sources": [{"name": "b", "kind": "sqlite", "path": str(db),
                                        "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
    capture.install(config, "b")
    bootstrap(config)  # warm

    def bare() -> None:
        with sqlite3.connect(db) as conn:
            bare_to_parquet(lambda: conn.execute("SELECT * FROM items").fetchall(), work / "bare.parquet")

    report("SQLite bootstrap", n, ("ours: spark engine, key ranges in tasks", best_of(lambda: bootstrap(config), 3)),
           ("bare SELECT * -> Parquet", best_of(bare, 3)),
           ("ours: local engine, one read", best_of(lambda: bootstrap(config, "local"), 3)))


def load_mariadb(server: MariaDBServer, n: int) -> None:
    server.execute("CREATE DATABASE IF NOT EXISTS bench", "DROP TABLE IF EXISTS bench.items",
                   "CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), price DOUBLE, qty INT, "
                   "note VARCHAR(20))")
    conn = server.connect("bench")
    with conn.cursor() as cur:
        for start in range(0, n, 50_000):
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)", list(rows(start, min(n, start + 50_000))))
    conn.close()


def mariadb_config(work: Path, server: MariaDBServer) -> DatabusConfig:
    return parse_config({"lake": str(work / "mlake"), "spark": {"master": MASTER}, "merge": {"file_rows": 250_000},
                         "sources": [{"name": "m", "kind": "mysql", "port": server.port, "user": "root",
                                      "database": "bench", "bootstrap_chunk_rows": 125_000,
                                      "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)


def mysql_case(work: Path, server: MariaDBServer, n: int) -> None:
    load_mariadb(server, n)
    config = mariadb_config(work, server)
    capture.install(config, "m")
    bootstrap(config)  # warm

    def bare() -> None:
        c = server.connect("bench")
        with c.cursor() as cur:
            cur.execute("SELECT * FROM items")
            bare_to_parquet(cur.fetchall, work / "mbare.parquet")
        c.close()

    report("MariaDB bootstrap", n, ("ours: spark engine, key ranges in tasks", best_of(lambda: bootstrap(config), 3)),
           ("bare SELECT * -> Parquet", best_of(bare, 3)),
           ("ours: local engine, one connection", best_of(lambda: bootstrap(config, "local"), 3)))


def memory_case(work: Path, server: MariaDBServer, sizes: tuple[int, ...]) -> None:
    """The driver's peak memory growth during a MariaDB bootstrap, beside the table's size."""
    print("\nDriver memory during a MariaDB bootstrap (spark engine, local Spark: its JVM runs the executors too)")
    config = mariadb_config(work, server)
    for n in sizes:
        load_mariadb(server, n)
        capture.install(config, "m")
        python, jvm = jvm_rss_growth(SparkRuntime(config.spark).session, lambda: bootstrap(config))
        size = sum(p.stat().st_size for p in (config.lake.path / "snapshot").rglob("*.parquet"))
        print(f"  {n:>12,} rows ({size / 2**20:,.0f} MiB of Parquet): Python driver +{python / 2**20:,.0f} MiB, "
              f"its JVM +{jvm / 2**20:,.0f} MiB")


def main(n: int = 1_000_000, memory_rows: int = 10_000_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-bootstrap-"))
    server = MariaDBServer(extra_args=["--innodb-buffer-pool-size=512M"])
    try:
        sqlite_case(work, n)
        mysql_case(work, server, n)
        memory_case(work, server, (n, memory_rows) if memory_rows > n else (n,))
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000,
         int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000)
