"""The spark engine's small work in the driver (``merge.in_driver_mib``): a merge, a history merge and a verification
slice whose bytes are within it run in the run's own process with the code its tasks run, write what the tasks
write, and start no Spark; past it they are Spark jobs again."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import TableSyncResult, engine_for, sync_source
from dagster_databus.sync.verify import RollingVerification
from tests.integration.common.test_verify import plant
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import SourceHarness, make_config

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def outcome(results: list[TableSyncResult]) -> list[tuple[object, ...]]:
    """What a sync reports per table, less its timing."""
    return sorted((r.table, r.from_scn, r.to_scn, r.events, r.windows, dict(r.events_by_op), r.counts, r.snapshot_rows,
                   r.delta_version, (r.history.counts, r.history.versions) if r.history else None)
                  for r in results)


def test_a_small_merge_runs_in_the_driver_and_commits_what_the_tasks_commit(source: SourceHarness, tmp_path: Path,
                                                                           spark) -> None:
    """One captured range merged twice from copies of one lake: by Spark's tasks, and within the budget by the
    driver alone, on a runtime that never starts. Snapshots, history tables and reports are the same, row for row
    and meta column for meta column; then a verification slice is digested there too, and finds planted damage.
    Every source kind: the log's events, not the source, are what the two paths read."""
    source.create_shop()
    source.workload(seed=3).run(60)
    cfg = source.source_config("shop", SHOP)
    cfg["tables"][1]["history"] = True  # orders
    tasks = make_config(tmp_path / "tasks" / "lake", cfg, merge={"file_rows": 20})
    cycle(tasks, spark)  # the bootstrap, in files of 20 rows: the changes below fall into several file groups
    source.workload(seed=4).run(80, rollback_every=7)
    capture.run(tasks, "shop")
    shutil.copytree(tmp_path / "tasks", tmp_path / "driver")
    driver = make_config(tmp_path / "driver" / "lake", cfg, merge={"file_rows": 20, "in_driver_mib": 16})

    by_tasks = sync_source(spark, tasks, "shop")
    idle = SparkRuntime(driver.spark)
    said: list[str] = []
    by_driver = sync_source(idle, driver, "shop", progress=said.append)
    assert not idle.started, "a merge within merge.in_driver_mib started Spark"
    done = [line for line in said if "rewrote" in line]  # each merge's closing line says where it ran
    assert len(done) == 4 and all(line.endswith(", in this process") for line in done), said  # 3 tables, a history
    assert outcome(by_driver) == outcome(by_tasks)
    assert sum(r.counts.updated + r.counts.deleted for r in by_driver) > 0
    for table, key in SHOP:
        ours, theirs = (DeltaSnapshot(c.lake, "shop", table).read(with_meta=True).sort_by([(k, "ascending")
                                                                                            for k in key])
                        for c in (driver, tasks))
        assert ours.equals(theirs), table
    ours, theirs = (HistoryTable(c.lake, "shop", "orders").delta().to_pyarrow_table()
                    .sort_by([("id", "ascending"), ("__start_scn", "ascending")]) for c in (driver, tasks))
    assert ours.num_rows > 60 and ours.equals(theirs)
    assert_snapshots_match(driver)

    # On the first lake, whose capture (a PostgreSQL slot is named for its lake) is the source's, now with the budget.
    within = make_config(tmp_path / "tasks" / "lake", cfg, merge={"file_rows": 20, "in_driver_mib": 16})
    planted = plant(within, "customers", ["id"], "city", "'Atlantis'")
    verification = RollingVerification(within, within.source("shop"), ["customers"], engine_for(idle, within))
    verification.read()
    capture.run(within, "shop")
    sync_source(idle, within, "shop")
    (verified,) = verification.settle()
    verification.close()
    assert (verified.different, verified.repaired) == (3, 3) and set(planted) <= {tuple(d.key)
                                                                                 for d in verified.differences}
    assert not idle.started, "a verification slice within merge.in_driver_mib started Spark"
    assert_snapshots_match(within)


def test_a_merge_that_rewrites_more_than_the_budget_is_a_spark_job(tmp_path: Path, spark) -> None:
    """One changed row of a table whose one data file is over 1 MiB: with ``in_driver_mib: 1`` the merge reads
    the small log range here, finds the file it must rewrite too large, and runs as a Spark job (the runtime
    starts); with the default budget the same kind of change merges in the driver."""
    db = tmp_path / "blobs.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, pad TEXT NOT NULL)")
        conn.executemany("INSERT INTO blobs VALUES (?, ?)", ((i, os.urandom(48).hex()) for i in range(40_000)))
    cfg = {"name": "shop", "kind": "sqlite", "path": str(db), "tables": [{"name": "blobs", "primary_key": ["id"]}]}
    config = make_config(tmp_path / "lake", cfg, merge={"in_driver_mib": 1})
    cycle(config, spark)
    files = DeltaSnapshot(config.lake, "shop", "blobs").delta().get_add_actions(flatten=True)
    assert files.num_rows == 1 and files.column("size_bytes")[0].as_py() > 2**20

    for budget, spark_job in ((1, True), (16, False)):
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE blobs SET pad = ? WHERE id = ?", (f"changed under a budget of {budget} MiB", budget))
        config = make_config(tmp_path / "lake", cfg, merge={"in_driver_mib": budget})
        capture.run(config, "shop")
        runtime = SparkRuntime(config.spark)
        said: list[str] = []
        (result,) = sync_source(runtime, config, "shop", progress=said.append)
        assert runtime.started is spark_job, (budget, said)
        assert any(line.endswith("in Spark" if spark_job else "in this process") for line in said), said
        assert (result.counts.updated, result.data_files.rewritten if result.data_files else None) == (1, 1)
        assert_snapshots_match(config)
