"""Timing helpers for the benchmarks: best-of-N wall time and a ratio line."""

from __future__ import annotations

import time
from collections.abc import Callable


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
