"""History merge beside snapshot merge: the same window of changes folded into a history table (SCD type 2)
and merged into its snapshot (SCD type 1), by the same engine; the issue asks history <= 2x snapshot.

Each round writes updates of random keys, deletes and new keys to the source, captures them, then times
the snapshot merge and the history merge of that one window. Run alone:
``python -m benchmarks.bench_history [rows] [engines...]``.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dagster_databus import capture
from dagster_databus.config import parse_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable, history_schema, tracked_columns
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import engine_for, sync_source

ROUNDS = 3
UPDATES, DELETES, INSERTS = 20_000, 2_000, 5_000


def _run(rows: int, engine_name: str) -> list[tuple[float, float, int]]:
    """Per round: (snapshot merge s, history merge s, events)."""
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    try:
        db = work / "src.db"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER)")
            conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                             ((i, f"n{i}", i / 8, i % 13) for i in range(rows)))
        config = parse_config({"lake": str(work / "lake"), "merge": {"engine": engine_name, "file_rows": 50_000},
                               "sources": [{"name": "b", "kind": "sqlite", "path": str(db),
                                            "tables": [{"name": "items", "primary_key": ["id"], "history": True}]}]},
                              base=work)
        spark = SparkRuntime(config.spark)  # the local engine never starts it
        capture.install(config, "b")
        sync_source(spark, config, "b")  # bootstraps the snapshot and starts the history from it
        engine = engine_for(spark, config)
        log = ChangeLog(config.lake, "b")
        snap, hist = DeltaSnapshot(config.lake, "b", "items"), HistoryTable(config.lake, "b", "items")
        schema = log.schemas.latest("items")[1]  # type: ignore[index]
        target = history_schema(schema)
        tracked = tracked_columns("b", "items", schema, None, ())
        rng, next_id, out = random.Random(9), rows, []
        conn = sqlite3.connect(db, isolation_level=None)
        for _ in range(ROUNDS):
            conn.execute("BEGIN")
            conn.executemany("UPDATE items SET qty = qty + 1, price = price * 2 WHERE id = ?",
                             ((rng.randrange(rows),) for _ in range(UPDATES)))
            conn.executemany("DELETE FROM items WHERE id = ?", ((rng.randrange(rows),) for _ in range(DELETES)))
            conn.executemany("INSERT INTO items VALUES (?, 'new', 1.0, 0)", ((next_id + k,) for k in range(INSERTS)))
            conn.execute("COMMIT")
            next_id += INSERTS
            capture.run(config, "b")
            until = log.committed_scn()
            started = time.perf_counter()
            merged = engine.merge(snap, log, schema, snap.applied_scn(), until, lambda _: None)  # type: ignore[arg-type]
            snapshot_s = time.perf_counter() - started
            started = time.perf_counter()
            engine.merge_history(hist, log, schema, target, tracked, hist.applied_scn(), until,  # type: ignore[arg-type]
                                 lambda _: None)
            history_s = time.perf_counter() - started
            out.append((snapshot_s, history_s, merged.stats.events if merged else 0))
        conn.close()
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(rows: int = 200_000, engines: tuple[str, ...] = ("spark", "local")) -> None:
    print(f"\nHistory merge vs snapshot merge of the same window ({rows:,}-row table; per window {UPDATES:,} updates, "
          f"{DELETES:,} deletes, {INSERTS:,} inserts; {ROUNDS} windows, median)")
    for engine in engines:
        rounds = _run(rows, engine)
        snapshot_s = statistics.median(r[0] for r in rounds)
        history_s = statistics.median(r[1] for r in rounds)
        print(f"  {engine:<7} snapshot merge {snapshot_s:6.2f}s   history merge {history_s:6.2f}s   "
              f"{history_s / snapshot_s:5.2f}x   ({rounds[0][2]:,} events per window)", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000, tuple(sys.argv[2:]) or ("spark", "local"))
