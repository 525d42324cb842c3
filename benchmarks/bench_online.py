"""A table read online: capture's lag while the spark engine bootstraps a 1,000,000-row MariaDB table under
500 writes/s, beside its lag under the same writes with no bootstrap running; and the bootstrap's time
under those writes beside the local engine's one-transaction read of the same table (no writes).

Capture runs back to back in its own thread; its lag is, at the end of each round, how far the newest
commit it appended lies behind the wall clock. Run alone: ``python -m benchmarks.bench_online [rows]``.
"""

from __future__ import annotations

import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.bench_bootstrap import bootstrap, load_mariadb, mariadb_config
from dagster_databus import pipeline
from dagster_databus.config import DatabusConfig
from tests.mariadb import MariaDBServer

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


def _capture_lags(config: DatabusConfig, stop: threading.Event, lags: list[float]) -> None:
    while not stop.is_set():
        result = pipeline.capture(config, "m")
        if result.newest_commit_ms is not None:
            lags.append(time.time() - result.newest_commit_ms / 1000)


def _under_writes(server: MariaDBServer, config: DatabusConfig, rows: int, seconds: float | None,
                  work: object = None) -> tuple[list[float], float]:
    """Capture lags with the writes flowing, for ``seconds`` or while ``work()`` runs (its time returned)."""
    stop, lags = threading.Event(), []
    threads = [threading.Thread(target=_writes, args=(server, rows, stop)),
               threading.Thread(target=_capture_lags, args=(config, stop, lags))]
    for t in threads:
        t.start()
    time.sleep(2)  # the writes and capture settle
    lags.clear()
    started = time.monotonic()
    if work is not None:
        work()  # type: ignore[operator]
    else:
        time.sleep(seconds or 0)
    took = time.monotonic() - started
    stop.set()
    for t in threads:
        t.join()
    return lags, took


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
        pipeline.install(config, "m")
        bootstrap(config)  # warm Spark
        one_read = min(_timed(lambda: bootstrap(config, "local")) for _ in range(2))
        ranges = min(_timed(lambda: bootstrap(config)) for _ in range(2))
        quiet, _ = _under_writes(server, config, rows, 20.0)
        _, one_read_busy = _under_writes(server, config, rows, None, lambda: bootstrap(config, "local"))
        during, online = _under_writes(server, config, rows, None, lambda: bootstrap(config))
        print(f"\nOnline bootstrap of {rows:,} MariaDB rows (Spark, the server, the writer and capture share the "
              "machine)")
        print(f"  no writes:    spark engine, key ranges {ranges:7.2f}s   one transaction (local engine) "
              f"{one_read:7.2f}s   ranges: {one_read / ranges:4.2f}x its throughput")
        print(f"  {WRITES_PER_S} writes/s: spark engine, key ranges {online:7.2f}s   one transaction (local engine) "
              f"{one_read_busy:7.2f}s   ranges: {one_read_busy / online:4.2f}x its throughput")
        print(f"  capture lag during the bootstrap         {_describe(during)}")
        print(f"  capture lag, same writes, no bootstrap   {_describe(quiet)}")
        if during and quiet:
            print(f"  lag during / lag without (medians)       "
                  f"{statistics.median(during) / statistics.median(quiet):4.2f}x")
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


def _timed(fn: object) -> float:
    started = time.monotonic()
    fn()  # type: ignore[operator]
    return time.monotonic() - started


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
