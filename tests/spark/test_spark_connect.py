"""The spark engine over Spark Connect (``spark.remote``): every run a thin client of one long-running server
(``conftest.spark_connect_server``, whose Python has only the dependencies: the package is shipped). Bootstraps
and merges give the local engine's snapshots, progress and typed task errors reach the client, and a Connect
session lives beside the process's classic one."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from dagster_databus import capture
from dagster_databus.config import SparkConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ChangeLogCorruptError, ConfigError, SparkEnvironmentError, SparkUnavailableError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.connect_server import ConnectServer, free_port
from dagster_databus.spark.errors import task_errors
from dagster_databus.spark.runtime import SparkRuntime, open_session
from dagster_databus.sync.merge import engine_for, sync_source, sync_table
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, SqliteHarness, make_config

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def snapshot_rows(config, table: str, key: list[str]) -> list[dict]:
    data = DeltaSnapshot(config.lake, "shop", table).read(with_meta=True)
    names = [c for c in data.column_names if c != "__commit_ts"]  # a bootstrap stamps its own read time
    return sorted(data.select(names).to_pylist(), key=lambda r: [r[k] for k in key])


def test_a_sqlite_source_merged_over_connect_equals_the_source_and_the_local_engine(
        tmp_path: Path, connect_spark) -> None:
    """Capture, a bootstrap and merges of inserts, updates and deletes, by Spark tasks on the Connect server:
    after every round the snapshots equal the source and, row for row with SCNs and operations, the ones the
    local engine merged from the same source."""
    source = SqliteHarness(tmp_path / "shop.db")
    source.create_shop()
    spec = source.source_config("shop", SHOP, poll={"chunk_rows": 40}, prune_txlog=False)
    by_connect = make_config(tmp_path / "connect-lake", spec, merge={"engine": "spark", "file_rows": 60})
    in_process = make_config(tmp_path / "local-lake", spec, merge={"engine": "local"})
    workload = source.workload(seed=5)
    workload.run(40)
    for round_ in range(3):
        results = cycle(by_connect, connect_spark)
        cycle(in_process, None)
        assert {r.engine for r in results} == {"spark"}
        if round_ == 0:
            assert all(r.bootstrapped_at is not None for r in results)
        else:
            assert sum(r.events for r in results) > 0 and any(r.counts.deleted for r in results)
        for table, key in SHOP:
            assert snapshot_rows(by_connect, table, key) == snapshot_rows(in_process, table, key), \
                f"round {round_}, {table}"
        assert_snapshots_match(by_connect)
        workload.run(60, rollback_every=7)


def test_a_mariadb_bootstrap_and_merge_over_connect(mariadb, tmp_path: Path, connect_spark) -> None:
    """The server's tasks read MariaDB's key ranges on their own connections into key-clustered files; a
    merge of the binary log's changes then rewrites only the files that hold changed keys."""
    source = MysqlHarness(mariadb)
    source.execute(["CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(12,2))"])
    source.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"item {i}", f"{i}.25")) for i in range(1, 3001)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])],
                                                                 bootstrap_chunk_rows=500))
    result = cycle(config, connect_spark)[0]
    assert result.bootstrap_rows == 3000 and result.engine == "spark"
    snap = DeltaSnapshot(config.lake, "shop", "items")
    files = pa.table(snap.delta().get_add_actions(flatten=True)).sort_by("min.id").to_pylist()
    assert len(files) == 6 and all(a["max.id"] < b["min.id"] for a, b in itertools.pairwise(files))
    assert_snapshots_match(config)

    source.execute(["UPDATE items SET price = price + 1 WHERE id BETWEEN 10 AND 20",
                    "DELETE FROM items WHERE id IN (30, 31)", "INSERT INTO items VALUES (3001, 'new', 1.00)"])
    merged = cycle(config, connect_spark)[0]
    assert (merged.counts.inserted, merged.counts.updated, merged.counts.deleted) == (1, 11, 2)
    # The first range's file holds the changed keys; the last takes the new key (it has room for it).
    assert merged.data_files is not None and merged.data_files.rewritten <= 2 and merged.data_files.before == 6
    assert_snapshots_match(config)


def test_progress_of_spark_tasks_reaches_the_callback(connect_spark) -> None:
    lines: list[str] = []

    def slow(batches):
        import time

        for batch in batches:
            time.sleep(0.6)
            yield batch

    frame = connect_spark.session.range(0, 8, numPartitions=4).mapInArrow(slow, "id long")
    with connect_spark.job_progress(lines.append, "slow job", every_s=0.1):
        assert any(t.startswith("databus-") for t in connect_spark.session.getTags()), \
            "the block's operations are tagged"
        assert frame.toArrow().num_rows == 8
    assert lines, "no progress was reported"
    assert all(line.startswith("slow job: ") and line.endswith(" of 4 Spark tasks done") for line in lines), lines
    assert not connect_spark.session.getTags()


def test_a_typed_error_raised_in_a_task_arrives_as_its_own_type(tmp_path: Path, connect_spark) -> None:
    """A segment damaged inside (its size and header intact, so the driver's checks pass) fails the task that
    decodes it, on the server; the client gets ``ChangeLogCorruptError`` with its fix."""
    source = SqliteHarness(tmp_path / "src.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO items VALUES (1, 'a')"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    cycle(config, connect_spark)
    source.execute([("INSERT INTO items VALUES (?, ?)", (i, "x" * 50)) for i in range(2, 200)])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    segment = log.manifest().segments[-1]
    path = Path(config.lake.path) / "log" / "shop" / "segments" / segment.file
    data = bytearray(path.read_bytes())
    data[-40:] = bytes(b ^ 0xFF for b in data[-40:])  # the last block and its sync marker
    path.write_bytes(bytes(data))
    log.require_intact()
    with pytest.raises(ChangeLogCorruptError, match=r"(?s)cannot be decoded.*restore the segment"):
        sync_source(connect_spark, config, "shop")


def test_runs_attach_to_one_server_session_and_a_closed_one_is_replaced(tmp_path: Path, spark_connect_server,
                                                                       monkeypatch) -> None:
    """Two runs (clients) with the same spark.remote share one server session, so the second finds the first's
    state (and Python workers); once the server has closed it, the next run starts another, and the runs
    after that attach to the new one. A URL that names its own session_id gets exactly that session."""
    from dagster_databus.spark.connect import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    config = SparkConfig(remote=spark_connect_server.url)
    first, second = open_session(config), open_session(config)
    try:
        assert first.session_id == second.session_id
        first.conf.set("databus.test.marker", "seen")
        assert second.conf.get("databus.test.marker") == "seen"
    finally:
        second.client.close()
        first.stop()  # releases it: the server refuses its id from now on
    third = open_session(config)
    fourth = open_session(config)
    try:
        assert third.session_id != first.session_id and third.range(3).count() == 3
        assert fourth.session_id == third.session_id
        assert third.session_id in json.loads((tmp_path / "cache" / "spark-connect-sessions.json").read_text()).values()
    finally:
        fourth.client.close()
        third.stop()
    own_id = str(uuid.uuid4())
    own = open_session(SparkConfig(remote=f"{spark_connect_server.url}/;session_id={own_id}"))
    try:
        assert own.session_id == own_id and own.range(2).count() == 2
    finally:
        own.stop()


def test_a_server_without_the_package_is_named_with_the_fix(tmp_path: Path, spark_connect_server) -> None:
    """A session that does not ship the package to a server whose Python lacks it: the Spark error becomes
    ``SparkEnvironmentError``, whose fix names spark.ship_package."""
    session = open_session(SparkConfig(remote=spark_connect_server.url))
    try:
        source = SqliteHarness(tmp_path / "src.db")
        source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY)", "INSERT INTO items VALUES (1)"])
        config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
        capture.install(config, "shop")
        with pytest.raises(SparkEnvironmentError, match=r"(?s)cannot import 'dagster_databus'.*ship_package"):
            sync_table(config, config.sources[0], "items", engine_for(SparkRuntime.of(session), config))
    finally:
        session.stop()


def test_a_connect_session_lives_beside_the_classic_one(spark, connect_spark) -> None:
    """One process, two kinds of session: a classic runtime gets the process's classic session (on the
    standalone cluster), the Connect one is passed explicitly, and each runs its own jobs (with its own kind of
    functions)."""
    assert SparkRuntime().session is spark.session and not spark.connect and connect_spark.connect
    assert connect_spark.parallelism() == 2  # the server's local[2]
    assert spark.parallelism() == spark.session.sparkContext.defaultParallelism

    for runtime in (spark, connect_spark):
        F = runtime.functions()
        assert runtime.session.range(10).select(F.sum(F.col("id")).alias("n")).first()["n"] == 45
    with task_errors():  # a classic job still runs after Connect ones
        assert spark.session.range(100).count() == 100


def test_config_refuses_master_with_remote_and_an_unreachable_server_fails_at_once(tmp_path: Path) -> None:
    source = {"name": "shop", "kind": "sqlite", "path": str(tmp_path / "x.db"),
              "tables": [{"name": "t", "primary_key": ["id"]}]}
    with pytest.raises(ConfigError, match=r"(?s)both master .* and remote .* remove one of them"):
        make_config(tmp_path / "lake", source, spark={"master": "local[2]", "remote": "sc://127.0.0.1:15002"})
    with pytest.raises(ConfigError, match=r"not a Spark Connect URL"):
        make_config(tmp_path / "lake", source, spark={"remote": "http://127.0.0.1:15002"})
    with pytest.raises(ConfigError, match=r"ship_package applies only with spark.remote"):
        make_config(tmp_path / "lake", source, spark={"ship_package": True})
    nobody = f"sc://127.0.0.1:{free_port()}"
    with pytest.raises(SparkUnavailableError, match=r"(?s)cannot be reached.*start it"):
        open_session(SparkConfig(remote=nobody))


def test_a_server_that_cannot_start_says_why(tmp_path: Path, spark_connect_server) -> None:
    taken = ConnectServer(port=spark_connect_server.port)
    with pytest.raises(SparkUnavailableError, match=r"port .* is taken"):
        taken.start()


def test_verification_over_connect_digests_in_the_servers_tasks_and_repairs(tmp_path: Path, connect_spark) -> None:
    """The rolling verification's snapshot side as Spark Connect runs it: the slices' digests computed by the
    server's tasks, a planted value found and repaired."""
    from deltalake import DeltaTable

    from tests.integration.common.test_verify import verified_run

    source = SqliteHarness(tmp_path / "shop.db")
    source.create_shop()
    source.workload(seed=6).run(40)
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP, prune_txlog=False),
                         merge={"engine": "spark", "file_rows": 30})
    verified_run(config, connect_spark)
    snap = DeltaSnapshot(config.lake, "shop", "orders")
    first = min(snap.read().column("id").to_pylist())
    DeltaTable(snap.uri).update(predicate=f"id = {first}", updates={"status": "'lost'"})
    results = {v.table: v for v in verified_run(config, connect_spark)}
    assert (results["orders"].different, results["orders"].repaired, results["orders"].failed) == (1, 1, False)
    assert [(d.key, d.columns) for d in results["orders"].differences] == [((first,), ("status",))]
    assert all(not v.different and not v.failed for t, v in results.items() if t != "orders")
    assert_snapshots_match(config)
