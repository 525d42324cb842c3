"""SQLite capture (poll, decode, Avro-encode, durable publish) vs a bare SELECT of the same txlog rows: as the
JSON row images capture reads (the view ``_databus_images`` makes them from the stored values), and as stored.

Two tables: one of the affinity types (INTEGER, TEXT, REAL), and one of the declared types whose
values are converted from their stored text (DECIMAL, DATETIME, DATE); the rows in windows of 10,000. Then
100,000 one-row transactions, each a window of its own (as when capture polls as often as the application
commits): what capture pays a window shows there.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from benchmarks.common import SQLITE_CUT, best_of, report
from dagster_databus import capture
from dagster_databus.config import parse_config

_PLAIN = "id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, note TEXT"
_TYPED = "id INTEGER PRIMARY KEY, amount DECIMAL(12,2), placed DATETIME, due DATE, note TEXT"


def _plain(i: int) -> tuple[object, ...]:
    return (i, f"item {i}", i * 0.5, i % 97, None if i % 3 else "x")


def _typed(i: int) -> tuple[object, ...]:
    placed = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i * 37)
    return (i, str(Decimal(i * 7 % 100_000) / 100), placed.isoformat(" "), (placed.date()).isoformat(),
            None if i % 3 else "x")


def measure(label: str, ddl: str, row: Callable[[int], tuple[object, ...]], rows: int, window: int = 10_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"CREATE TABLE items ({ddl})")
    config = parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "sqlite", "path": str(db), "prune_txlog": False, "poll": {"chunk_rows": 20_000},
         "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
    capture.install(config, "b")
    with sqlite3.connect(db) as conn:
        for start in range(0, rows, window):
            conn.execute(SQLITE_CUT)  # windows of ``window`` rows (of 1: each a transaction of its own, to capture)
            conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                             [row(i) for i in range(start, min(rows, start + window))])

    def bare() -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("SELECT scn, tbl, op, row, ts FROM _databus_images ORDER BY scn").fetchall()

    def stored() -> None:  # what the triggers wrote, without the images the view makes of it
        with sqlite3.connect(db) as conn:
            conn.execute("SELECT * FROM _databus_txlog ORDER BY scn").fetchall()

    def ours() -> None:
        capture.run(config, "b")

    def reset() -> None:
        shutil.rmtree(work / "lake", ignore_errors=True)

    peer, floor = best_of(bare), best_of(stored)
    mine = best_of(ours, setup=reset)
    report(label, rows, ("capture into the change log", mine), ("bare SELECT of the row images", peer),
           ("bare SELECT of the txlog as stored", floor))
    shutil.rmtree(work)


def main(rows: int = 200_000) -> None:
    measure("SQLite capture (INTEGER, TEXT, REAL)", _PLAIN, _plain, rows)
    measure("SQLite capture (DECIMAL, DATETIME, DATE)", _TYPED, _typed, rows)
    measure("SQLite capture, one-row transactions (INTEGER, TEXT, REAL; asked: <= 2x the row images' SELECT)",
            _PLAIN, _plain, rows // 2, window=1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
