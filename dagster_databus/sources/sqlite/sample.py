"""A sample SQLite database for ``databus warm``: one table of every column type the log's kernels handle, enough
rows to take every kernel path (past every small-batch threshold), and a change to all of them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dagster_databus.sources.base import Sample

_TABLE = ("CREATE TABLE warm (id INTEGER PRIMARY KEY, n INTEGER, r REAL, s TEXT, b BLOB, d DECIMAL(12, 2), "
          "day DATE, at TIMESTAMP, flag BOOLEAN, note VARCHAR(20))")


def make_sample(folder: Path, rows: int) -> Sample:
    """``warm.db`` in ``folder``, table ``warm`` empty; ``fill`` inserts ``rows`` rows, ``change`` updates them."""
    path = folder / "warm.db"
    with sqlite3.connect(path) as conn:
        conn.execute(_TABLE)

    def fill() -> None:
        with sqlite3.connect(path) as conn:
            conn.executemany("INSERT INTO warm VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                (i, i * 7, i / 3, f"text {i}", bytes([i % 256]) * 3, f"{i}.25", "2024-02-29",
                 "2024-02-29 12:34:56.789", i % 2, None if i % 3 else "x") for i in range(rows)])

    def change() -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE warm SET n = n + 1, s = s || '!'")

    return Sample({"name": "warm", "kind": "sqlite", "path": path.name,
                   "tables": [{"name": "warm", "primary_key": ["id"]}]}, fill, change)
