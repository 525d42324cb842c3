"""The spark engine's merge on a real standalone cluster (started from the pyspark wheel, as the tests start
it) with one one-core worker and with two: the same 10M-row / 10% merge, each in a fresh driver process.

Run alone: ``python -m benchmarks.bench_scaleout [rows] [pct]``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.sparkcluster import SparkCluster


def timed_on(workers: int, rows: int, pct: float) -> dict:
    cluster = SparkCluster(workers=workers, cores=1, memory="1g")
    try:
        code = ("import json, benchmarks.bench_merge as b; "
                f"print('RESULT', json.dumps(b.main({rows}, {pct}, {cluster.url!r}, repeat=3)))")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600,
                             env={**__import__("os").environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        if run.returncode:
            raise SystemExit(f"the merge on {workers} worker(s) failed:\n{run.stderr[-3000:]}")
        print("\n".join(line for line in run.stdout.splitlines() if not line.startswith("RESULT")))
        return json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT"))[7:])
    finally:
        cluster.close()


def main(rows: int = 10_000_000, pct: float = 10.0) -> None:
    one = timed_on(1, rows, pct)
    two = timed_on(2, rows, pct)
    print(f"\nScale-out of the spark engine's merge ({rows:,} rows, {pct:g}% changed), standalone cluster")
    print(f"  one one-core worker   {one['ours']:8.2f}s")
    print(f"  two one-core workers  {two['ours']:8.2f}s   {one['ours'] / two['ours']:.2f}x faster")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000, float(sys.argv[2]) if len(sys.argv) > 2 else 10.0)
