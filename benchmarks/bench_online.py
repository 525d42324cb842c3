"""A table read online: capture's lag while the spark engine bootstraps a 1,000,000-row MariaDB table under
500 writes/s, beside its lag under the same writes with no bootstrap running; and the bootstrap's time, with
and without those writes, beside the local engine's one-transaction read of the same table: the read itself
(the snapshot's throughput) and until the snapshot is current (the read, then the merge of what was
written meanwhile).

Capture runs back to back in a process of its own, as a deployment runs it (a poll run beside a bootstrap
run); its lag is, at the end of each round, how far the newest commit it appended lies behind the wall
clock. Run alone: ``python -m benchmarks.bench_online [rows]``.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_bootstrap import bootstrap, load_mariadb, mariadb_config
from dagster_databus import capture
from dagster_databus.config import DatabusConfig, load_config
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import engine_for, sync_table
from tests.support.mariadb import MariaDBServer

WRITES_PER_S = 500


def _writes(server: MariaDBServer, rows: int, stop: threading.Event) -> None:
    conn = server.connect("bench")
    rng, n, started = random.Random(1), 0, time.monotonic()
    with conn.cursor() as cur:
        while not stop.is_set():
            key = rng.randrange(rows)
            cur.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (key,))  # autocommit: one transaction each
            n += 1
            ahead = started + n / WRITES_PER_S - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    conn.close()


def _capture_lags(config_file: str, stop: Any, lags: Any) -> None:
    """In its own process: capture back to back, each round's lag onto ``lags`` (a queue)."""
    config = load_config(Path(config_file))
    while not stop.is_set():
        result = capture.run(config, "m")
        if result.newest_commit_ms is not None:
            lags.put(time.time() - result.newest_commit_ms / 1000)


def _under_writes(server: MariaDBServer, config_file: Path, rows: int, seconds: float | None,
                  work: Callable[[], Any] | None = None) -> tuple[list[float], Any]:
    """Capture lags with the writes flowing, for ``seconds`` or while ``work()`` runs (what it returns)."""
    stop = threading.Event()
    spawn = multiprocessing.get_context("spawn")
    halt, queue = spawn.Event(), spawn.Queue()
    writer = threading.Thread(target=_writes, args=(server, rows, stop))
    capture = spawn.Process(target=_capture_lags, args=(str(config_file), halt, queue))
    writer.start()
    capture.start()
    time.sleep(4)  # the writes and capture settle (the process imports first)
    while not queue.empty():
        queue.get()
    outcome = work() if work is not None else time.sleep(seconds or 0)
    stop.set()
    halt.set()
    writer.join()
    lags = []
    while capture.is_alive() or not queue.empty():
        try:
            lags.append(queue.get(timeout=1))
        except Exception:  # queue.Empty: the process is finishing its last round
            continue
    capture.join()
    return lags, outcome


def _phases(config: DatabusConfig, engine: str = "spark") -> tuple[float, float]:
    """A bootstrap's (read, until current) times: the read ends when the engine reports the rows written."""
    marks: list[float] = []
    started = time.monotonic()

    def progress(message: str) -> None:
        if ": bootstrapped " in message:
            marks.append(time.monotonic() - started)

    cfg = config if engine == "spark" else config.model_copy(update={"merge": config.merge.model_copy(
        update={"engine": engine})})
    shutil.rmtree(cfg.lake.path / "snapshot", ignore_errors=True)
    sync_table(cfg, cfg.sources[0], "items", engine_for(SparkRuntime(cfg.spark), cfg), progress)
    return marks[0], time.monotonic() - started


def _describe(lags: list[float]) -> str:
    ordered = sorted(lags)
    p95 = ordered[int(0.95 * (len(ordered) - 1))] if ordered else float("nan")
    return f"median {statistics.median(lags) if lags else float('nan'):5.2f}s, p95 {p95:5.2f}s ({len(lags)} rounds)"


def main(rows: int = 1_000_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-online-"))
    server = MariaDBServer(extra_args=["--innodb-buffer-pool-size=512M"])
    try:
        load_mariadb(server, rows)
        config = mariadb_config(work, server)
        config_file = work / "databus.yaml"
        config_file.write_text(json.dumps({
            "lake": str(config.lake.path), "sources": [{"name": "m", "kind": "mysql", "port": server.port,
                                                        "user": "root", "database": "bench",
                                                        "tables": [{"name": "items", "primary_key": ["id"]}]}]}))
        capture.install(config, "m")
        bootstrap(config)  # warm Spark
        quiet_one = min((_phases(config, "local") for _ in range(2)), key=lambda p: p[1])
        quiet_ranges = min((_phases(config) for _ in range(2)), key=lambda p: p[1])
        quiet, _ = _under_writes(server, config_file, rows, 20.0)
        _, busy_one = _under_writes(server, config_file, rows, None, lambda: _phases(config, "local"))
        during, busy_ranges = _under_writes(server, config_file, rows, None, lambda: _phases(config))
        print(f"\nOnline bootstrap of {rows:,} MariaDB rows (Spark, the server, the writer and capture share the "
              "machine); read / until current, and the ranges' throughput as a multiple of one transaction's")
        for label, ranges, one in (("no writes:   ", quiet_ranges, quiet_one),
                                   (f"{WRITES_PER_S} writes/s:", busy_ranges, busy_one)):
            print(f"  {label} spark engine, key ranges {ranges[0]:6.2f}s / {ranges[1]:6.2f}s   one transaction "
                  f"(local engine) {one[0]:6.2f}s / {one[1]:6.2f}s   ranges: read {one[0] / ranges[0]:4.2f}x, "
                  f"until current {one[1] / ranges[1]:4.2f}x")
        print(f"  capture lag during the bootstrap         {_describe(during)}")
        print(f"  capture lag, same writes, no bootstrap   {_describe(quiet)}")
        if during and quiet:
            print(f"  lag during / lag without (medians)       "
                  f"{statistics.median(during) / statistics.median(quiet):4.2f}x")
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
