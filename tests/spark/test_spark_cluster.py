"""The spark engine on the test session's standalone cluster (a master and two one-core workers): the work
is spread over both workers' processes, a bootstrap's files are clustered by key, and losing workers
mid-merge never leaves a partial commit."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.spark.faults import FAULT_PROPERTY
from dagster_databus.storage.lake import Lake
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.fixtures import ON_EACH_LAKE
from tests.support.harness import MysqlHarness, SqliteHarness, make_config
from tests.support.sparkcluster import SparkCluster


def files_on_disk_and_in_log(snap: DeltaSnapshot) -> tuple[set[str], set[str], set[str]]:
    """(data files in the table's folder, files its current version names, files any version ever named)."""
    import json

    objects = snap.lake.objects
    keys = [o.key.removeprefix(snap.key + "/") for o in objects.list(snap.key + "/")]
    data = {k for k in keys if k.endswith(".parquet") and "/" not in k}
    ever: set[str] = set()
    for key in keys:
        if key.startswith("_delta_log/") and key.endswith(".json"):
            for line in (objects.read(f"{snap.key}/{key}") or b"").splitlines():
                action = json.loads(line)
                if "add" in action:
                    ever.add(action["add"]["path"])
    current = {uri.rpartition("/")[2] for uri in snap.delta().file_uris()}
    return data, current, ever


@ON_EACH_LAKE
def test_a_mariadb_bootstrap_is_read_by_tasks_on_both_workers_into_key_clustered_files(
        mariadb, spark, spark_cluster: SparkCluster, lake: Path | Lake) -> None:
    source = MysqlHarness(mariadb)
    source.execute(["CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(12,2))"])
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"item {i}", f"{i}.25")) for i in range(1, 3001)])
    config = make_config(lake, source.source_config("shop", [("items", ["id"])], bootstrap_chunk_rows=500))
    result = cycle(config, spark)[0]
    assert result.bootstrap_rows == 3000 and result.engine == "spark"
    snap = DeltaSnapshot(config.lake, "shop", "items")
    files = pa.table(snap.delta().get_add_actions(flatten=True)).sort_by("min.id").to_pylist()
    # One file per key range, the ranges in key order and disjoint: later merges touch few of them.
    assert len(files) == 6
    assert all(a["max.id"] < b["min.id"] for a, b in itertools.pairwise(files))
    assert sum(f["num_records"] for f in files) == 3000
    assert_snapshots_match(config)


def test_tasks_run_in_both_workers_python_processes(spark, spark_cluster: SparkCluster) -> None:
    import os

    import pyarrow as pa

    def pids(batches):
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"pid": [os.getpid()] * batch.num_rows, "ppid": [os.getppid()] *
                                              batch.num_rows})

    seen = spark.session.range(0, 40_000, numPartitions=8).mapInArrow(pids, "pid long, ppid long").distinct().collect()
    assert len({row.ppid for row in seen}) == 2, "tasks ran under two executors' Python daemons"


def lost_workers_setup(tmp_path: Path, spark):
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER)"])
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i)) for i in range(1, 4001)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"file_rows": 400})
    cycle(config, spark)
    source.execute(["UPDATE items SET qty = qty + 1 WHERE id % 7 = 0", "DELETE FROM items WHERE id % 11 = 0",
                    *(f"INSERT INTO items VALUES ({i}, 'new', 0)" for i in range(4001, 4101))])
    capture.run(config, "shop")
    return config, DeltaSnapshot(config.lake, "shop", "items")


def restore(cluster: SparkCluster, wanted: int = 2) -> None:
    for index, process in enumerate(cluster.workers):
        if process is not None and process.poll() is not None:
            cluster.workers[index] = None
    while cluster.alive_workers() < wanted:
        cluster.start_worker()


@pytest.mark.fault
@pytest.mark.parametrize("lost", ["one", "all"])
def test_losing_workers_mid_merge_never_leaves_a_partial_commit(tmp_path: Path, spark, spark_cluster: SparkCluster,
                                                                lost: str) -> None:
    """A worker SIGKILLed with its executor after a task wrote its files: with one worker left, Spark runs the
    lost work again there and the merge commits once; with none left, the run is given up (as an
    orchestrator's timeout would), the table stays at its last commit, and a rerun finishes. Either way no
    file of the lost attempts is left behind."""
    config, snap = lost_workers_setup(tmp_path, spark)
    version, before = snap.version(), snap.read(with_meta=True).sort_by("id")
    marker = tmp_path / "worker-killed"
    context = spark.session.sparkContext
    failed: list[BaseException] = []

    def merge() -> None:
        context.setLocalProperty(FAULT_PROPERTY, f"merge_files_written:{marker}")
        try:
            sync_source(spark, config, "shop")
        except BaseException as exc:
            failed.append(exc)
        finally:
            context.setLocalProperty(FAULT_PROPERTY, None)

    run = threading.Thread(target=merge)
    run.start()
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and run.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "no task reached the fault point"
        if lost == "all":
            for index in range(len(spark_cluster.workers)):
                spark_cluster.kill_worker(index)
            time.sleep(2)
            assert snap.version() == version and snap.read(with_meta=True).sort_by("id") == before
            context.cancelAllJobs()
        run.join(180)
        assert not run.is_alive()
    finally:
        restore(spark_cluster)
    if lost == "all":
        assert failed, "the run was given up"
        assert snap.version() == version and snap.read(with_meta=True).sort_by("id") == before
        sync_source(spark, config, "shop")
    else:
        assert not failed, failed
    assert snap.version() == version + 1, "the merge committed once"
    assert_snapshots_match(config)
    on_disk, current, ever = files_on_disk_and_in_log(snap)
    assert on_disk <= ever, f"files no commit names were left: {sorted(on_disk - ever)}"
    assert current <= on_disk


@pytest.mark.fault
@pytest.mark.parametrize(("point", "most_reads"), [("bootstrap_files_written", 2), ("bootstrap_range_recorded", 1)])
def test_a_worker_lost_mid_bootstrap_costs_only_its_unrecorded_range(tmp_path: Path, spark,
                                                                    spark_cluster: SparkCluster, point: str,
                                                                    most_reads: int) -> None:
    """A task reads several ranges (ten ranges, two slots: two tasks of five). Its worker SIGKILLed after a
    range's files are written but not recorded: Spark's retry reads that range again. Killed just after the
    record: the retry skips the recorded range and reads only the rest. Either way one commit, the snapshot
    equals the source, and no file of the lost attempt is left in the folder."""
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER)"])
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i)) for i in range(1, 4001)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"file_rows": 400})
    capture.install(config, "shop")
    marker = tmp_path / "worker-killed"
    context = spark.session.sparkContext
    lines: list[str] = []
    context.setLocalProperty(FAULT_PROPERTY, f"{point}:{marker}")
    try:
        [result] = sync_source(spark, config, "shop", progress=lines.append)
    finally:
        context.setLocalProperty(FAULT_PROPERTY, None)
        restore(spark_cluster)
    assert marker.exists(), "no task reached the fault point"
    assert "items: bootstrapping in 10 key range(s), read by 2 Spark task(s)" in lines, lines
    assert result.bootstrap_rows == 4000 and result.key_ranges is not None
    assert result.key_ranges.ranges == 10 and result.key_ranges.most_reads == most_reads
    snap = DeltaSnapshot(config.lake, "shop", "items")
    data, current, _ = files_on_disk_and_in_log(snap)
    assert snap.version() == 0 and data == current and len(current) == 10
    assert_snapshots_match(config)
