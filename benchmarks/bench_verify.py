"""Rolling verification's cost in a scheduled run (``sync.verify``, the default ``verify:`` config): a table of
``rows`` rows with 1% of them changed before each run, every run as the sync step runs it (install, the slice
read, capture, merge, the slice settled). Per run: the share of the run's time spent verifying (the sum of
``Verified.seconds``, and the wall time of ``read`` + ``settle`` measured around them) beside the goal of at most
10%, where that time goes (read vs settle), and the rows verified; then how many runs a full rotation of the
table takes at that pace (and ``state.last_full_runs`` if a pass completed within the measured runs). Both merge
engines (``local``, and ``spark`` on a local ``SparkRuntime``), a SQLite source and a MariaDB one.

The first run bootstraps (nothing to verify), the second warms up (the first slice is sized without a measured
pace); the runs after them are reported.

Run alone: ``python -m benchmarks.bench_verify [--rows N] [--runs N] [--engines local,spark] [--kinds sqlite,mysql]``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, SparkConfig, parse_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import engine_for, sync_source
from dagster_databus.sync.verify import RollingVerification, Verified, VerifyState, slice_rows
from tests.support.mariadb import MariaDBServer

GOAL = 0.10  # at most this share of a scheduled run verifying
CHANGED = 100  # one row in this many changed before each run (1%)
TABLE = "items (id INTEGER PRIMARY KEY, name VARCHAR(40), price DOUBLE, qty INTEGER, note VARCHAR(20))"


@dataclass
class Run:
    whole: float  # the run, install to settle
    verified: float  # sum of Verified.seconds
    read: float  # wall time of RollingVerification.read()
    settle: float  # and of settle()
    rows: int  # rows verified
    different: int  # keys that differed (none should: nothing damages the snapshot here)
    last_full_runs: int | None
    skipped: str | None

    @property
    def share(self) -> float:
        return self.verified / self.whole

    @property
    def wall_share(self) -> float:
        return (self.read + self.settle) / self.whole


class Source:
    """The table at the source, and its 1% change before each run."""

    def __init__(self, kind: str, rows: int, work: Path) -> None:
        self.kind, self.rows, self.server = kind, rows, None
        if kind == "sqlite":
            self.db = work / "source.db"
            with sqlite3.connect(self.db) as conn:
                conn.execute(f"CREATE TABLE {TABLE}")
                conn.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                             "INSERT INTO items SELECT i, 'item ' || i, i * 0.5, i % 97, CASE WHEN i % 3 THEN NULL "
                             "ELSE 'x' END FROM n", (rows,))
            self.spec = {"kind": "sqlite", "path": str(self.db)}
        else:
            self.server = MariaDBServer()
            self.server.execute("CREATE DATABASE bench", f"CREATE TABLE bench.{TABLE}",
                                f"INSERT INTO bench.items SELECT seq, CONCAT('item ', seq), seq * 0.5, seq % 97, "
                                f"IF(seq % 3, NULL, 'x') FROM seq_1_to_{rows}", database="mysql")
            self.spec = {"kind": "mysql", "port": self.server.port, "user": "root", "database": "bench"}

    def change(self, n: int) -> None:
        """1% of the rows updated (every ``CHANGED``-th key, a different set each run), in one transaction."""
        sql = f"UPDATE items SET qty = qty + 1, price = price + 1 WHERE id % {CHANGED} = {n % CHANGED}"
        if self.server is not None:
            self.server.execute(sql, database="bench")
            return
        with sqlite3.connect(self.db) as conn:
            conn.execute(sql)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def scheduled_run(config: DatabusConfig, spark: SparkRuntime) -> Run:
    """One run as ``tests/integration/common/test_verify.py::verified_run`` (and the sync step) does it, its parts
    timed."""
    cfg = config.source("b")
    started = time.perf_counter()
    capture.install(config, "b")
    verification = RollingVerification(config, cfg, [t.name for t in cfg.tables], engine_for(spark, config))
    read_s, _ = timed(verification.read)
    capture.run(config, "b")
    sync_source(spark, config, "b")
    settle_s, results = timed(verification.settle)
    whole = time.perf_counter() - started
    verified: list[Verified] = results  # type: ignore[assignment]
    v = verified[0] if verified else None
    return Run(whole, sum(r.seconds for r in verified), read_s, settle_s, v.rows if v else 0,
               v.different if v else 0, v.state.last_full_runs if v else None, v.skipped if v else "no result")


def scenario(kind: str, engine: str, rows: int, runs: int, spark: SparkRuntime, work: Path,
             verify: str = "repair") -> list[Run]:
    source = Source(kind, rows, work)
    try:
        config = parse_config({"lake": str(work / "lake"), "merge": {"engine": engine}, "sources": [
            {"name": "b", **source.spec, "verify": verify, "tables": [{"name": "items", "primary_key": ["id"]}]}]},
            base=work)
        bootstrap_s = scheduled_run(config, spark).whole
        assert DeltaSnapshot(config.lake, "b", "items").row_count() == rows
        measured = []
        for n in range(runs + 1):  # the first after the bootstrap warms up
            source.change(n)
            measured.append(scheduled_run(config, spark))
        print(f"\nRolling verification, {kind} source, merge.engine: {engine} ({rows:,} rows, {rows // CHANGED:,} "
              f"changed per run, verify: {verify}, else the default config; bootstrap run {bootstrap_s:.1f}s)")
        print(f"  {'run':<10}{'whole':>8}{'verify':>8}{'read':>8}{'settle':>8}{'share':>8}{'wall share':>12}"
              f"{'rows verified':>15}")
        for n, r in enumerate(measured):
            label = "warm-up" if n == 0 else str(n)
            print(f"  {label:<10}{r.whole:7.2f}s{r.verified:7.2f}s{r.read:7.2f}s{r.settle:7.2f}s{r.share:8.1%}"
                  f"{r.wall_share:12.1%}{r.rows:>15,}" + (f"   skipped: {r.skipped}" if r.skipped else "")
                  + (f"   {r.different:,} keys differed" if r.different else ""))
        return measured[1:]
    finally:
        source.close()


def summary(kind: str, engine: str, rows: int, runs: list[Run], off: list[Run]) -> str:
    """One line: the medians, and the run's time with verification against the same runs with ``verify: off``."""
    share = statistics.median(r.share for r in runs)
    without = statistics.median(r.whole for r in off)
    wall = statistics.median(r.wall_share for r in runs)
    after = statistics.median(r.whole for r in runs)
    before = statistics.median(r.whole - r.read - r.settle for r in runs)
    read = statistics.median(r.read for r in runs)
    settle = statistics.median(r.settle for r in runs)
    per_run = statistics.median(r.rows for r in runs)
    rotation = math.ceil(rows / per_run) if per_run else 0
    full = next((r.last_full_runs for r in reversed(runs) if r.last_full_runs), None)
    verdict = "within" if max(share, wall, (after - without) / after) <= GOAL else "OVER"
    added = (after - without) / after
    return (f"  {kind + ', ' + engine:<16}{without:7.2f}s{before:7.2f}s{after:7.2f}s{read:7.2f}s{settle:7.2f}s"
            f"{share:8.1%}{wall:12.1%}{added:8.1%}{'<= ' + format(GOAL, '.0%'):>8}  {verdict:<7}"
            f"{per_run:>12,.0f}{rotation:>10,}{'-' if full is None else format(full, ','):>12}")


def main(rows: int = 1_000_000, runs: int = 5, engines: tuple[str, ...] = ("local", "spark"),
         kinds: tuple[str, ...] = ("sqlite", "mysql")) -> None:
    spark = SparkRuntime(SparkConfig())  # the default: local[2]
    if "spark" in engines:
        spark.start()
    lines = []
    try:
        for kind in kinds:
            for engine in engines:
                work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
                try:
                    (work / "off").mkdir()
                    off = scenario(kind, engine, rows, runs, spark, work / "off", verify="off")
                    lines.append(summary(kind, engine, rows, scenario(kind, engine, rows, runs, spark, work), off))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        spark.stop()
    defaults = parse_config({"lake": "unused", "sources": [{"name": "b", "kind": "sqlite", "path": "unused.db",
                                                            "tables": [{"name": "items", "primary_key": ["id"]}]}]},
                            base=Path()).source("b")
    print(f"\nRolling verification, side by side ({rows:,} rows, 1% changed per run, median of {runs} runs after the "
          f"warm-up; the default config covers a table in every_runs={defaults.verify.every_runs} runs: "
          f"{slice_rows(VerifyState(), rows, defaults):,} rows a run before a pace is measured)")
    print(f"  {'source, engine':<16}{'off':>8}{'before':>8}{'after':>8}{'read':>8}{'settle':>8}{'share':>8}"
          f"{'wall share':>12}{'added':>8}{'goal':>8}  {'':<7}{'rows/run':>12}"
          f"{'rotation':>10}{'last full':>12}")
    print("\n".join(lines))
    print("  (off: the same runs with verify: off; before: the run less read() and settle(); after: the whole run;"
          "\n   share: Verified.seconds / the whole run; wall share: read() + settle() timed around them / the whole"
          "\n   run; added: (after - off) / after, what verifying adds to a run, the background digests included,"
          "\n   noisy by a few points; rotation: runs a full pass takes"
          "\n   at the measured rows per run; last full: state.last_full_runs, '-' where no pass ended in the runs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="runs measured after the bootstrap and a warm-up")
    parser.add_argument("--engines", default="local,spark")
    parser.add_argument("--kinds", default="sqlite,mysql")
    args = parser.parse_args()
    started = time.monotonic()
    main(args.rows, args.runs, tuple(args.engines.split(",")), tuple(args.kinds.split(",")))
    print(f"  ({time.monotonic() - started:.0f}s)")
