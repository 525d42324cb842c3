"""``make bench``: every benchmark, each printing its figure beside a peer or floor from the same run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_capture, bench_log_write, bench_merge

if __name__ == "__main__":
    bench_capture.main()
    bench_log_write.main()
    bench_merge.main(1_000_000, 1.0)
    bench_merge.main(1_000_000, 10.0)
