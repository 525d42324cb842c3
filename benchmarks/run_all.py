"""``make bench`` (``python -m benchmarks.run_all``): every benchmark, each printing its figure beside a
peer or floor measured in the same run. Run one alone with ``python -m benchmarks.bench_merge [rows] [pct]``."""

from __future__ import annotations

from benchmarks import (
    bench_bootstrap,
    bench_capture,
    bench_cold_start,
    bench_connect,
    bench_consumer,
    bench_dagster,
    bench_e2e,
    bench_failover,
    bench_lake,
    bench_log_write,
    bench_manifest,
    bench_merge,
    bench_mysql,
    bench_online,
    bench_postgres,
    bench_pruning,
    bench_reconcile,
    bench_reduce,
    bench_scaleout,
    bench_triggers,
    bench_upkeep,
    bench_verify,
)

if __name__ == "__main__":
    bench_triggers.main()
    bench_capture.main()
    bench_mysql.main()
    bench_postgres.main()
    bench_log_write.main()
    bench_manifest.main()
    bench_consumer.main()
    for rows in (1_000_000, 10_000_000):
        for pct in (1.0, 10.0):
            bench_merge.main(rows, pct)
    bench_reduce.main()
    bench_scaleout.main()
    bench_pruning.main()
    bench_bootstrap.main()
    bench_online.main()
    bench_e2e.main()
    bench_dagster.main()
    bench_cold_start.main()
    bench_connect.main()
    bench_failover.main()
    bench_lake.main()
    bench_reconcile.main()
    bench_upkeep.main()
    bench_verify.main()
