"""SQLite capture (poll, decode, Avro-encode, durable publish) vs a bare SELECT of the same txlog rows."""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

from benchmarks.common import best_of, report
from dagster_databus import pipeline
from dagster_databus.config import parse_config


def main(rows: int = 200_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, note TEXT)")
    config = parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "sqlite", "path": str(db), "prune_txlog": False, "poll": {"chunk_rows": 20_000},
         "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
    pipeline.install(config, "b")
    with sqlite3.connect(db) as conn:
        for start in range(0, rows, 10_000):
            conn.execute("UPDATE _databus_epoch SET epoch = epoch + 1")  # windows of 10k rows
            conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                             [(i, f"item {i}", i * 0.5, i % 97, None if i % 3 else "x")
                              for i in range(start, min(rows, start + 10_000))])

    def bare() -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("SELECT scn, epoch, tbl, op, pk, row, ts FROM _databus_txlog ORDER BY scn").fetchall()

    def ours() -> None:
        pipeline.capture(config, "b")

    def reset() -> None:
        shutil.rmtree(work / "lake", ignore_errors=True)

    peer = best_of(bare)
    mine = best_of(ours, setup=reset)
    report("SQLite capture", rows, ("capture into the change log", mine), ("bare SELECT of the txlog rows", peer))
    shutil.rmtree(work)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
