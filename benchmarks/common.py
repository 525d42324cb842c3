"""What the benchmarks share: best-of-N wall time and a ratio line, memory growth, the demo's config and
timed commands."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# What a SQLite poll does first: the changes written so far become one window.
SQLITE_CUT = (REPO / "sql" / "sqlite" / "cut.sql").read_text()
# The demo's sync as a user launches it: every asset and check of the definitions, in a cold process.
MATERIALIZE = [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m",
               "dagster_databus.definitions", "--select", "*"]
# Dagster's own cost of such a run, the floor under ours: one asset that does nothing, same command.
NOOP_DEFS = '''import dagster as dg


@dg.asset
def noop() -> None:
    """Nothing: what is left is the process, Dagster's import, its instance and the run's events."""


defs = dg.Definitions(assets=[noop])
'''


def noop_materialize(folder: Path) -> list[str]:
    """The command that runs ``NOOP_DEFS`` (written into ``folder``) as ``MATERIALIZE`` runs ours."""
    (folder / "noop_defs.py").write_text(NOOP_DEFS)
    return [MATERIALIZE[0], "asset", "materialize", "-f", str(folder / "noop_defs.py"), "--select", "*"]


def best_of(fn: Callable[[], object], repeat: int = 3, setup: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(repeat):
        if setup:
            setup()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def report(title: str, rows: int, ours: tuple[str, float], *peers: tuple[str, float]) -> None:
    name, seconds = ours
    print(f"\n{title} ({rows:,} rows)")
    print(f"  {name:<38}{seconds:8.3f}s {rows / seconds:>12,.0f} rows/s")
    for peer, peer_seconds in peers:
        print(f"  {peer:<38}{peer_seconds:8.3f}s {rows / peer_seconds:>12,.0f} rows/s   "
              f"ours takes {seconds / peer_seconds:5.2f}x its time")


def _rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_growth(fn: Callable[[], object], interval_s: float = 0.005, pid: int | str = "self") -> int:
    """How far a process's resident memory (this one's, by default) rose above where it stood when ``fn``
    started (bytes)."""
    base = peak = _rss_bytes(pid)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_bytes(pid))
            done.wait(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return max(peak, _rss_bytes(pid)) - base


def jvm_rss_growth(spark: Any, fn: Callable[[], object]) -> tuple[int, int]:
    """(this process's peak RSS growth, the peak RSS growth of its Spark driver JVM) while ``fn`` runs."""
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    python = 0

    def measured() -> None:
        nonlocal python
        python = peak_rss_growth(fn)

    return python, peak_rss_growth(measured, pid=jvm)


def demo_config(folder: Path) -> Path:
    """The demo's config (config/demo.yaml) in ``folder``, its database and lake in that folder too."""
    config = folder / "databus.yaml"
    config.write_text((REPO / "config" / "demo.yaml").read_text()
                      .replace("../.demo/lake", "lake").replace("../.demo/shop.db", "shop.db"))
    return config


def runs_text(times: list[float]) -> str:
    """Every timed run of a side, for the line that prints its best: "(runs: 5.5, 5.6, 5.5)"."""
    return f"(runs: {', '.join(f'{t:.1f}' for t in times)})"


def timed_command(cmd: list[str], env: Mapping[str, str]) -> float:
    """Run ``cmd`` in the repository (wall seconds); exit with its output if it fails. Python writes and reads its
    bytecode, as an installed package's is (pip compiles it): a shell with PYTHONDONTWRITEBYTECODE would have each
    run compile the package's modules again (a tenth of a second here), a cost no deployment pays."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return time.perf_counter() - started
