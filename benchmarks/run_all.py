"""``make bench`` (``python -m benchmarks.run_all``): every benchmark, each printing its figure beside a
peer or floor measured in the same run. Run one alone with ``python -m benchmarks.bench_merge [rows] [pct]``."""

from __future__ import annotations

from benchmarks import bench_capture, bench_consumer, bench_log_write, bench_merge, bench_mysql

if __name__ == "__main__":
    bench_capture.main()
    bench_log_write.main()
    bench_mysql.main()
    bench_consumer.main()
    bench_merge.main(1_000_000, 1.0)
    bench_merge.main(1_000_000, 10.0)
