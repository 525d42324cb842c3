"""End to end: freshness, the time from a source commit to its row in the snapshot (p50/p99), at a steady write
rate with capture and merge run back to back (the schedule at its minimum), with each engine a deployment picks:
the spark engine on in-process local Spark, the in-process ``local`` engine, and the spark engine as a client of a
Spark Connect server started for the run; then Dagster's per-run overhead vs calling the same code."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, load_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.defs.factory import build_definitions
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.spark.connect_server import ConnectServer
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import sync_source


def _setup(work: Path, extra: dict[str, Any]) -> tuple[Path, DatabusConfig, Path]:
    """A source database with one table, its config (``extra`` merged in), capture installed."""
    work.mkdir(parents=True, exist_ok=True)
    db = work / "src.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, committed_at REAL NOT NULL)")
    path = work / "databus.json"
    path.write_text(json.dumps({"lake": "lake", **extra, "sources": [
        {"name": "e", "kind": "sqlite", "path": "src.db", "tables": [{"name": "events", "primary_key": ["id"]}]}]}))
    config = load_config(path)
    capture.install(config, "e")
    return db, config, path


def freshness(label: str, work: Path, extra: dict[str, Any], rate_per_s: float, seconds: float
              ) -> tuple[Path, DatabusConfig, SparkRuntime]:
    """Commit-to-snapshot latency with the engine ``extra`` configures, printed; its config and runtime."""
    db, config, path = _setup(work, extra)
    spark = SparkRuntime(config.spark)  # started by the first sync that runs a Spark job
    sync_source(spark, config, "e")  # bootstrap the (empty) snapshot
    with sqlite3.connect(db) as conn:  # then one real merge: Spark's first job pays its warm-up here
        conn.execute("INSERT INTO events VALUES (0, 0)")
    capture.run(config, "e")
    sync_source(spark, config, "e")
    committed: dict[int, float] = {}
    stop = threading.Event()

    def writer() -> None:
        conn = sqlite3.connect(db, isolation_level=None, timeout=30)
        n = 0
        while not stop.is_set():
            n += 1
            conn.execute("INSERT INTO events VALUES (?, ?)", (n, time.time()))
            committed[n] = time.time()
            time.sleep(1 / rate_per_s)
        conn.close()

    seen: dict[int, float] = {}
    thread = threading.Thread(target=writer)
    thread.start()
    started = time.monotonic()
    cycles = 0
    durations = []
    while time.monotonic() - started < seconds:
        began = time.monotonic()
        capture.run(config, "e")
        sync_source(spark, config, "e")
        now = time.time()
        durations.append(time.monotonic() - began)
        cycles += 1
        for row in DeltaSnapshot(config.lake, "e", "events").read().to_pylist():
            seen.setdefault(row["id"], now)
    stop.set()
    thread.join()
    latencies = sorted(seen[i] - committed[i] for i in seen if i in committed)
    p50 = statistics.median(latencies)
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
    print(f"\nFreshness, {label}: {rate_per_s:g} commits/s for {seconds:g}s ({len(latencies):,} rows, {cycles} "
          "capture+merge cycles back to back)")
    print(f"  commit-to-snapshot latency p50 {p50:6.2f}s  p99 {p99:6.2f}s  "
          f"(cycle time {seconds / cycles:5.2f}s: the floor for a poll loop)")
    print(f"  cycle time median {statistics.median(durations):5.2f}s, slowest {max(durations):5.2f}s")
    return path, config, spark


def main(rate_per_s: float = 50.0, seconds: float = 60.0, engine: str | None = None) -> None:
    """Freshness with each engine, each in a process of its own (one Spark kind a process), then in this one
    Dagster's overhead, on local Spark."""
    if engine is None:
        for other in ("local", "connect"):
            subprocess.run([sys.executable, "-m", "benchmarks.bench_e2e", str(rate_per_s), str(seconds), other],
                           check=True)
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    try:
        if engine == "local":
            freshness("the local engine (no Spark)", work, {"merge": {"engine": "local"}}, rate_per_s, seconds)
            return
        if engine == "connect":
            with ConnectServer(master="local[2]") as server:
                _, _, client = freshness("the spark engine over Spark Connect (local[2] behind it)", work,
                                         {"spark": {"remote": server.url}}, rate_per_s, seconds)
                # Before the server stops: pyspark's exit handler asks the server to clear its cache, and retries
                # for minutes when it is gone.
                client.stop()
            return
        path, config, spark = freshness("the spark engine on in-process local Spark", work, {}, rate_per_s, seconds)

        defs = build_definitions(config, DatabusResource.for_file(path))
        # The same assets as the direct calls below, without the asset checks.
        job = defs.resolve_job_def("e_sync").get_subset(
            asset_selection={dg.AssetKey(["e", "capture"]), dg.AssetKey(["e", "changelog"]),
                             dg.AssetKey(["e", "events"])}, asset_check_selection=set())

        def direct() -> None:
            capture.install(config, "e")
            capture.run(config, "e")
            sync_source(spark, config, "e")

        quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}  # `make bench` prints figures only
        with dg.instance_for_test() as instance:
            job.execute_in_process(instance=instance, run_config=quiet)  # warm
            runs = []
            for _ in range(3):
                t = time.perf_counter()
                job.execute_in_process(instance=instance, run_config=quiet)
                runs.append(time.perf_counter() - t)
        plain = []
        for _ in range(3):
            t = time.perf_counter()
            direct()
            plain.append(time.perf_counter() - t)
        dagster_s, direct_s = min(runs), min(plain)
        print(f"  one sync run through Dagster (in process, no checks) {dagster_s:6.2f}s vs the same code called "
              f"directly {direct_s:6.2f}s: Dagster adds {dagster_s - direct_s:5.2f}s ({dagster_s / direct_s:4.1f}x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(*(float(a) for a in sys.argv[1:3]), *sys.argv[3:4])
