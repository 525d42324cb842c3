"""Benchmarks of two revisions side by side, in one run: ``python -m benchmarks.compare_revisions BASE
[--rounds N] [bench_capture bench_merge:1000000,10 ...]``.

BASE (a commit, tag or branch) is checked out into a temporary git worktree; each benchmark module then
runs as its own process from that tree and from this one, in turn (base, this, base, this, ...), so the
machine's drift falls on both alike. Every line the two print in the same shape (the same words, other
numbers) is shown once, with each figure as base → this and their ratio (median over the rounds). A change
that moves code without changing what it does should leave every ratio within the rounds' own spread,
which is printed beside it. The default benchmarks are those whose code paths a refactor of the package
touches: SQLite and MySQL capture, the log, consumers, the merge, the bootstrap."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.common import REPO

# A benchmark as module[:arg,arg...]: its command-line arguments after the colon.
DEFAULT = ("bench_capture", "bench_mysql", "bench_log_write", "bench_consumer", "bench_merge:1000000,10",
           "bench_bootstrap:1000000,2000000")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _run(tree: Path, bench: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    module, _, args = bench.partition(":")
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *filter(None, args.split(","))], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{bench} failed in {tree} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return [line for line in done.stdout.splitlines() if _NUMBER.search(line)]


def _figures(lines: list[str]) -> dict[str, list[float]]:
    """Each line's shape (its numbers as #, counted when a shape repeats) and its numbers."""
    out: dict[str, list[float]] = {}
    seen: dict[str, int] = defaultdict(int)
    for line in lines:
        shape = _NUMBER.sub("#", line.strip())
        seen[shape] += 1
        key = shape if seen[shape] == 1 else f"{shape} [{seen[shape]}]"
        out[key] = [float(n.replace(",", "")) for n in _NUMBER.findall(line)]
    return out


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _spread(values: list[float]) -> float:
    """The rounds' own spread: (max - min) / median, as a fraction."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def compare(base: str, benches: tuple[str, ...], rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="databus-base-") as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), base], cwd=REPO, check=True,
                       capture_output=True)
        try:
            for bench in benches:
                runs: dict[str, list[dict[str, list[float]]]] = {"base": [], "this": []}
                for _ in range(rounds):
                    runs["base"].append(_figures(_run(tree, bench)))
                    runs["this"].append(_figures(_run(REPO, bench)))
                _print(bench, base, runs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False,
                           capture_output=True)


def _print(bench: str, base: str, runs: dict[str, list[dict[str, list[float]]]]) -> None:
    print(f"\n{bench}: {base} → this tree, median of {len(runs['base'])} rounds each "
          "(ratio this/base; ± the larger spread of the two)")
    for shape in runs["this"][0]:
        if not all(shape in r and len(r[shape]) == len(runs["this"][0][shape]) for r in runs["base"] + runs["this"]):
            continue
        cells = []
        for i in range(len(runs["this"][0][shape])):
            before = [r[shape][i] for r in runs["base"]]
            after = [r[shape][i] for r in runs["this"]]
            b, a = statistics.median(before), statistics.median(after)
            if b == a:
                cells.append(_number(a))
                continue
            ratio = f"{a / b:.2f}x" if b else "n/a"
            cells.append(f"{_number(b)} → {_number(a)} ({ratio} ±{max(_spread(before), _spread(after)):.0%})")
        label = " ".join(shape.split())
        print(f"  {label[:56]:<56} {'; '.join(cells)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the revision to compare with (a commit, tag or branch)")
    parser.add_argument("benches", nargs="*", default=list(DEFAULT), help=f"benchmark modules (default: {DEFAULT})")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each benchmark in each tree (default 2)")
    args = parser.parse_args()
    compare(args.base, tuple(args.benches), args.rounds)


if __name__ == "__main__":
    main()
