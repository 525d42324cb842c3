"""What SQLite capture costs the application: its writes with the capture triggers installed vs the same
writes without them (the floor), 100,000 rows in 1,000-row transactions, WAL journal.

Two tables: the affinity types (INTEGER, TEXT, REAL: the trigger tags REALs as exact text) and the
declared types (DECIMAL, DATETIME, DATE). A second row per change is the least any trigger-based
capture writes; ``one more row`` measures that floor with a trigger that writes a constant row.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.bench_capture import _PLAIN, _TYPED, _plain, _typed
from benchmarks.common import best_of
from dagster_databus import capture
from dagster_databus.config import parse_config

TX_ROWS = 1_000


def _database(work: Path, ddl: str, triggers: str) -> Path:
    db = work / f"{triggers}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"CREATE TABLE items ({ddl})")
        if triggers == "floor":
            conn.execute("CREATE TABLE side (id INTEGER PRIMARY KEY, v TEXT)")
            for event in ("INSERT", "UPDATE", "DELETE"):
                conn.execute(f"CREATE TRIGGER side_{event.lower()} AFTER {event} ON items "
                             "BEGIN INSERT INTO side (v) VALUES ('x'); END")
    if triggers == "databus":
        config = parse_config({"lake": str(work / "lake"), "sources": [
            {"name": "b", "kind": "sqlite", "path": str(db), "tables": [{"name": "items", "primary_key": ["id"]}]}]},
            base=work)
        capture.install(config, "b")
    return db


def _writes(db: Path, row: Callable[[int], tuple[object, ...]], rows: int) -> dict[str, Callable[[], None]]:
    marks = ", ".join("?" * len(row(0)))
    conn = sqlite3.connect(db, isolation_level=None)

    def batches(statement: str, args: Callable[[int], tuple[object, ...]]) -> None:
        for start in range(0, rows, TX_ROWS):
            conn.execute("BEGIN")
            conn.executemany(statement, [args(i) for i in range(start, min(rows, start + TX_ROWS))])
            conn.execute("COMMIT")

    return {
        "insert": lambda: batches(f"INSERT INTO items VALUES ({marks})", row),
        "update": lambda: batches("UPDATE items SET note = ? WHERE id = ?", lambda i: (f"n{i}", i)),
        "delete": lambda: batches("DELETE FROM items WHERE id = ?", lambda i: (i,)),
    }


def measure(label: str, ddl: str, row: Callable[[int], tuple[object, ...]], rows: int) -> None:
    # In memory (/dev/shm where there is one): the figure is what the triggers cost in CPU, not the disk's
    # fsync jitter, which here varied plain writes by 50% run to run. On disk, plain writes cost more and
    # the ratio is lower.
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="bench-triggers-", dir=shm if shm.is_dir() else None))
    times: dict[str, dict[str, float]] = {}
    for triggers in ("none", "floor", "databus"):
        per_op: dict[str, list[float]] = {"insert": [], "update": [], "delete": []}
        for _ in range(5):  # each op the best of three fresh runs (a delete needs the rows an insert wrote)
            shutil.rmtree(work / "lake", ignore_errors=True)
            writes = _writes(_database(work, ddl, triggers), row, rows)
            for op, write in writes.items():
                per_op[op].append(best_of(write, repeat=1))
        times[triggers] = {op: min(t) for op, t in per_op.items()}
    print(f"\n{label} ({rows:,} rows in {TX_ROWS:,}-row transactions, WAL)")
    for op in ("insert", "update", "delete"):
        plain = times["none"][op]
        print(f"  {op:<7} plain {plain:6.3f}s   one more row {times['floor'][op]:6.3f}s "
              f"({times['floor'][op] / plain:4.2f}x)   databus triggers {times['databus'][op]:6.3f}s "
              f"({times['databus'][op] / plain:4.2f}x plain writes)")
    shutil.rmtree(work)


def main(rows: int = 100_000) -> None:
    measure("SQLite writes under capture (INTEGER, TEXT, REAL)", _PLAIN, _plain, rows)
    measure("SQLite writes under capture (DECIMAL, DATETIME, DATE)", _TYPED, _typed, rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
