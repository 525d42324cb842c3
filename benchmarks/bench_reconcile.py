"""The reconciled check on a big table: its time and peak memory beside the floors a user would compare
it with, measured in the same run.

- SQLite (the source streams its rows through the check): the whole check vs a bare ``SELECT COUNT(*)``
  and a bare scan of the Delta snapshot (every column, a batch at a time).
- MariaDB (the database computes the fingerprint in one aggregate query): the source's side vs a bare
  ``SELECT COUNT(*)`` of the same table.

Run alone with ``python -m benchmarks.bench_reconcile [rows] [sqlite] [mysql]`` (default 10,000,000, both).
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from deltalake import DeltaTable

from benchmarks.common import peak_rss_growth
from dagster_databus import capture
from dagster_databus.config import parse_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.sources import open_source
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.mariadb import MariaDBServer

TABLE = "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(40), price DOUBLE, qty INTEGER, note VARCHAR(20))"


def timed(fn) -> tuple[float, int, object]:  # type: ignore[no-untyped-def]
    """(seconds, peak memory growth in bytes, result) of one call."""
    box: dict[str, object] = {}

    def call() -> None:
        started = time.perf_counter()
        box["result"] = fn()
        box["seconds"] = time.perf_counter() - started

    growth = peak_rss_growth(call)
    return box["seconds"], growth, box["result"]  # type: ignore[return-value]


def line(name: str, seconds: float, growth: int, rows: int, floor: float | None = None) -> None:
    ratio = f"   {seconds / floor:6.2f}x the first floor" if floor else ""
    print(f"  {name:<44}{seconds:8.2f}s  peak +{growth / 2**20:7,.0f} MiB {rows / seconds:>12,.0f} rows/s{ratio}")


def sqlite_check(rows: int, work: Path) -> None:
    db = work / "source.db"
    with sqlite3.connect(db) as conn:
        conn.execute(TABLE)
        conn.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                     "INSERT INTO items SELECT i, 'item ' || i, i * 0.5, i % 97, CASE WHEN i % 3 THEN NULL "
                     "ELSE 'x' END FROM n", (rows,))
    config = parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "sqlite", "path": str(db), "tables": [{"name": "items", "primary_key": ["id"]}]}]},
        base=work)
    capture.install(config, "b")
    sync_source(SparkRuntime(config.spark), config, "b")  # bootstrap into Delta
    snapshot = DeltaSnapshot(config.lake, "b", "items").path

    def count() -> int:
        with sqlite3.connect(db) as conn:
            return conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]

    def scan() -> int:
        return sum(b.num_rows for b in DeltaTable(str(snapshot)).to_pyarrow_dataset().to_batches())

    count_s, count_mem, _ = timed(count)
    scan_s, scan_mem, _ = timed(scan)
    ours_s, ours_mem, result = timed(lambda: reconcile_table(config, config.source("b"), "items"))
    assert result.equal and result.source_rows == rows, result  # type: ignore[attr-defined]
    print(f"\nReconciled check, SQLite source streamed through the check ({rows:,} rows)")
    line("bare SELECT COUNT(*) (first floor)", count_s, count_mem, rows)
    line("bare scan of the Delta snapshot", scan_s, scan_mem, rows)
    line("reconciled: both sides, count + hash", ours_s, ours_mem, rows, count_s + scan_s)
    print("  (the ratio is against the two floors together: a count of the source plus a scan of Delta)")


def mysql_check(rows: int, work: Path) -> None:
    server = MariaDBServer()
    try:
        server.execute("CREATE DATABASE bench", f"CREATE TABLE bench.{TABLE.split('TABLE ')[1]}",
                       f"INSERT INTO bench.items SELECT seq, CONCAT('item ', seq), seq * 0.5, seq % 97, "
                       f"IF(seq % 3, NULL, 'x') FROM seq_1_to_{rows}", database="mysql")
        config = parse_config({"lake": str(work / "mlake"), "sources": [
            {"name": "m", "kind": "mysql", "port": server.port, "user": "root", "database": "bench",
             "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
        source = open_source(config.source("m"), config.lake)

        def count() -> int:
            return server.query("SELECT COUNT(*) FROM bench.items")[0][0]

        def touch() -> int:  # every column of every row read and turned into text, nothing hashed
            return server.query("SELECT SUM(LENGTH(CONCAT_WS(',', id, name, price, qty, note))) FROM bench.items")[0][0]

        count_s, count_mem, _ = timed(count)
        touch_s, touch_mem, _ = timed(touch)
        ours_s, ours_mem, result = timed(lambda: source.reads.fingerprint("items").fingerprint)  # waits for the query
        assert result.rows == rows  # type: ignore[attr-defined]
        print(f"\nReconciled check, MariaDB source side: an aggregate query in the database ({rows:,} rows)")
        line("bare SELECT COUNT(*) (first floor)", count_s, count_mem, rows)
        line("bare scan of every column as text", touch_s, touch_mem, rows)
        line("fingerprint query (counts + MD5 sums)", ours_s, ours_mem, rows, count_s)
        print(f"  (the fingerprint query takes {ours_s / touch_s:.2f}x the bare scan of every column)")
    finally:
        server.close()


def main(rows: int = 10_000_000, kinds: tuple[str, ...] = ("sqlite", "mysql")) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    try:
        if "sqlite" in kinds:
            sqlite_check(rows, work)
        if "mysql" in kinds:
            mysql_check(rows, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000, tuple(sys.argv[2:]) or ("sqlite", "mysql"))
