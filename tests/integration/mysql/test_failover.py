"""Primary/standby failover against two real MariaDB servers: a GTID replica (log_slave_updates)
of a primary that is killed mid-workload. Capture switches to the replica by GTID, or by commit
time minus the fallback interval, and the snapshot ends equal to the replica's table."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.config import load_config
from dagster_databus.consumer.checkpoints import FileCheckpointStore
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError, SourceUnavailableError, StandbyBehindError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import compare_rows, reconcile_table
from tests.support.harness import MysqlHarness, make_config
from tests.support.loadgen import DDL, TABLE, LoadGenerator
from tests.support.mariadb import MariaDBServer

SOURCE = "faults"


@pytest.fixture
def pair() -> Iterator[tuple[MariaDBServer, MariaDBServer]]:
    primary = MariaDBServer(server_id=1)
    replica = MariaDBServer(server_id=2, extra_args=["--log-slave-updates"])
    try:
        replica.replicate_from(primary)
        yield primary, replica
    finally:
        replica.close()
        primary.close()


def _config(lake: Path, harness: MysqlHarness, standby: MariaDBServer | None, method: str = "gtid",
            fallback_s: int = 5) -> Any:
    extra: dict[str, Any] = {"failover": {"retries": 2, "interval_s": 0.2, "position": method,
                                          "fallback_interval_s": fallback_s}}
    if standby is not None:
        extra["standby"] = {"host": "127.0.0.1", "port": standby.port}
    return make_config(lake, harness.source_config(SOURCE, [(TABLE, ["k"])], **extra))


def _setup(pair: tuple[MariaDBServer, MariaDBServer], tmp_path: Path, **kw: Any
           ) -> tuple[Any, MysqlHarness, MysqlHarness, LoadGenerator]:
    primary, replica = pair
    harness = MysqlHarness(primary)
    harness.execute([DDL])
    _wait_for_table(replica, harness.database)  # install checks the standby has the database
    config = _config(tmp_path / "lake", harness, replica, **kw)
    capture.install(config, SOURCE)
    return config, harness, MysqlHarness(replica, harness.database), LoadGenerator(harness, seed=7)


def _wait_for_table(replica: MariaDBServer, database: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not replica.query(f"SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{database}' "
                            f"AND TABLE_NAME = '{TABLE}'"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replica did not create {database}.{TABLE} within {timeout_s}s")
        time.sleep(0.05)


def _rows(harness: MysqlHarness) -> list[dict[str, Any]]:
    return [{"k": k, "v": v, "payload": p} for k, v, p in harness.query(f"SELECT k, v, payload FROM {TABLE}")]


def _assert_snapshot_equals(config: Any, harness: MysqlHarness) -> None:
    result = compare_rows(TABLE, ("k",), _rows(harness), DeltaSnapshot(config.lake, SOURCE, TABLE).read().to_pylist())
    assert result.equal, result


def _windows(config: Any) -> dict[int, tuple[int, ...]]:
    """Window SCN → the op ids its events wrote (every op id is unique to one transaction)."""
    out: dict[int, list[int]] = {}
    for e in ChangeLog(config.lake, SOURCE).read(tables=[TABLE]):
        out.setdefault(e.window_scn.value, []).append(e.event.row["v"])
    return {scn: tuple(sorted(ops)) for scn, ops in out.items()}


class Writer(threading.Thread):
    """Keeps committing transactions until stopped or until the server dies under it."""

    def __init__(self, generator: LoadGenerator) -> None:
        super().__init__(daemon=True)
        self.generator, self.stopped, self.error = generator, threading.Event(), None

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                self.generator.run(1, per_txn=3)
                time.sleep(0.01)
        except Exception as exc:  # the primary was killed: expected
            self.error = exc


@pytest.mark.parametrize("method", ["gtid", "timestamp"])
def test_primary_killed_mid_workload_fails_over_to_the_replica(pair, tmp_path: Path, spark, method: str) -> None:
    primary, replica = pair
    config, _harness, on_replica, generator = _setup(pair, tmp_path, method=method, fallback_s=2)
    writer = Writer(generator)
    writer.start()
    try:
        for _ in range(3):  # capture and merge while the workload runs
            time.sleep(0.8)
            capture.run(config, SOURCE)
            sync_source(spark, config, SOURCE)
        before = ChangeLog(config.lake, SOURCE).checkpoint()
        assert before is not None and before.state["server"] == "primary" and before.state.get("gtid")
        # A replica is normally ahead of a batch capture; make sure of it, then kill the primary mid-workload.
        replica.wait_for_gtid(before.state["gtid"])
        primary.crash()
        writer.join(10)  # its next transaction fails: the workload is cut off, not stopped
    finally:
        writer.stopped.set()
        writer.join(10)
    assert writer.error is not None, "the workload should have been cut off by the kill"
    replica.wait_applied()
    windows_before = _windows(config)

    result = capture.run(config, SOURCE)

    assert result.failover is not None
    assert result.failover["method"] == method
    assert result.failover["to_server"] == f"standby 127.0.0.1:{replica.port}"
    assert result.failover["from_epoch"] == before.epoch and result.epoch != before.epoch
    log = ChangeLog(config.lake, SOURCE)
    manifest = log.manifest()
    assert [e["epoch"] for e in manifest.lineage] == [before.epoch] and manifest.epoch == result.epoch
    checkpoint = log.checkpoint()
    assert checkpoint.state["server"] == "standby" and checkpoint.state["era"] == "1"
    assert checkpoint.scn.binlog_parts()[0] == 1 and checkpoint.scn > before.scn
    after = {scn: ops for scn, ops in _windows(config).items() if scn not in windows_before}
    assert all(scn > before.scn.value for scn in after)
    reread = [scn for scn, ops in after.items() if ops in set(windows_before.values())]
    if method == "gtid":
        assert result.reread_windows == 0 and not reread  # nothing read twice
    else:
        # Re-reads are counted; the count may also include new commits of the last captured second.
        assert 1 <= len(reread) <= result.reread_windows <= len(after)
    ops = Counter(op for window in _windows(config).values() for op in window)
    committed = {r["v"] for r in _rows(on_replica)}
    assert all(ops[v] >= 1 for v in committed), "a transaction committed on the standby was skipped"

    sync_source(spark, config, SOURCE)
    _assert_snapshot_equals(config, on_replica)
    assert reconcile_table(config, config.source(SOURCE), TABLE).equal  # reads the active server: the replica

    # The replica is the primary now: capture goes on from it.
    generator.harness = on_replica
    generator.state = {r["k"]: r["v"] for r in _rows(on_replica)}
    generator.run(20)
    again = capture.run(config, SOURCE)
    assert again.failover is None and again.events > 0
    sync_source(spark, config, SOURCE)
    _assert_snapshot_equals(config, on_replica)


def test_a_primary_lost_in_the_middle_of_a_capture_run_fails_over_in_the_same_run(pair, tmp_path: Path,
                                                                                  spark) -> None:
    primary, replica = pair
    config, _harness, on_replica, generator = _setup(pair, tmp_path)
    config = config.model_copy(update={"sources": (config.sources[0].model_copy(
        update={"poll": config.sources[0].poll.model_copy(update={"chunk_rows": 20})}),)})
    capture.run(config, SOURCE)
    generator.run(30, per_txn=3)
    # 32 MB of another table's rows: more than the sockets buffer, so the run is still streaming
    # from the primary when it dies, and capture must find its place again on the replica.
    primary.execute("CREATE TABLE bulk (id INT PRIMARY KEY, b LONGBLOB)", database=_harness.database)
    for i in range(32):
        primary.execute(("INSERT INTO bulk VALUES (%s, %s)", (i, bytes(1 << 20))), database=_harness.database)
    generator.run(30, per_txn=3)
    replica.wait_for_gtid(str(primary.query("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]), timeout_s=60)
    messages: list[str] = []

    def progress(message: str) -> None:
        messages.append(message)
        if primary.process.poll() is None and "appended" in message:
            primary.crash()  # after the first chunk is durable, while the run still has more to read

    result = capture.run(config, SOURCE, progress=progress)

    assert result.failover is not None and result.failover["method"] == "gtid"
    assert any("checking whether to fail over" in m for m in messages)
    assert [m for m in messages if "appended" in m][1:], "the run went on appending after the switch"
    assert len(_windows(config)) == 60  # each of the 60 transactions, once
    written = Counter(e.event.row["v"] for e in ChangeLog(config.lake, SOURCE).read(tables=[TABLE])
                      if e.event.op.value != "d")
    assert set(written.values()) == {1}
    sync_source(spark, config, SOURCE)
    _assert_snapshot_equals(config, on_replica)


def test_rereads_after_a_timestamp_failover_leave_the_snapshot_unchanged(pair, tmp_path: Path, spark) -> None:
    primary, replica = pair
    config, _harness, on_replica, generator = _setup(pair, tmp_path, method="timestamp", fallback_s=3)
    for _ in range(4):
        generator.run(15, per_txn=3)
        time.sleep(0.6)
    capture.run(config, SOURCE)
    sync_source(spark, config, SOURCE)
    snap = DeltaSnapshot(config.lake, SOURCE, TABLE)
    rows_before, version_before = sorted(snap.read().to_pylist(), key=lambda r: r["k"]), snap.version()
    replica.wait_for_gtid(ChangeLog(config.lake, SOURCE).checkpoint().state["gtid"])
    primary.crash()
    replica.wait_applied()
    windows_before = set(_windows(config).values())

    result = capture.run(config, SOURCE)

    after = [ops for scn, ops in _windows(config).items() if scn > int(result.since)]
    assert result.failover["method"] == "timestamp" and result.failover["search_from_ts"] == (
        result.failover["last_commit_ts"] - 3)
    assert after and all(ops in windows_before for ops in after)  # the replica had nothing new: all re-reads
    assert result.reread_windows == len(after)
    sync_source(spark, config, SOURCE)
    assert snap.version() > version_before  # the re-reads were merged ...
    assert sorted(snap.read().to_pylist(), key=lambda r: r["k"]) == rows_before  # ... and changed nothing
    _assert_snapshot_equals(config, on_replica)


def test_a_consumer_keeps_its_place_across_the_failover(pair, tmp_path: Path, spark) -> None:
    primary, replica = pair
    config, _, on_replica, generator = _setup(pair, tmp_path)
    generator.run(10)
    capture.run(config, SOURCE)
    sync_source(spark, config, SOURCE)
    seen: list[int] = []

    class Collect(DatabusConsumer):
        def on_data_event(self, event: Any) -> None:
            seen.append(event.row["v"])

    checkpoints = FileCheckpointStore(tmp_path / "consumer.json")
    first = DatabusClient(config.lake, SOURCE, Collect(), checkpoints=checkpoints).run()
    assert first.bootstrapped
    replica.wait_for_gtid(ChangeLog(config.lake, SOURCE).checkpoint().state["gtid"])
    primary.crash()
    replica.wait_applied()
    assert capture.run(config, SOURCE).failover is not None
    generator.harness = on_replica
    generator.run(5)
    capture.run(config, SOURCE)
    seen.clear()

    second = DatabusClient(config.lake, SOURCE, Collect(), checkpoints=checkpoints).run()

    # The checkpoint is of the old epoch, which the log switched from: no bootstrap, just the new windows.
    assert not second.bootstrapped and second.windows == 5
    assert sorted(seen) == sorted(v for window in list(_windows(config).values())[-5:] for v in window)


def test_the_changelog_asset_reports_the_switch(pair, tmp_path: Path, spark,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import dagster as dg

    from tests.ui.test_dagster import materialize, metadata

    primary, replica = pair
    harness = MysqlHarness(primary)
    harness.execute([DDL])
    _wait_for_table(replica, harness.database)
    generator = LoadGenerator(harness)
    path = tmp_path / "databus.yaml"
    source = harness.source_config(SOURCE, [(TABLE, ["k"])], standby={"host": "127.0.0.1", "port": replica.port},
                                   failover={"retries": 2, "interval_s": 0.1})
    path.write_text(json.dumps({"lake": "lake", "sources": [source]}))
    with dg.instance_for_test() as instance:
        assert materialize(path, instance).success
        generator.run(10)
        assert metadata(materialize(path, instance), [SOURCE, "changelog"])["server"] == "primary"
        replica.wait_for_gtid(ChangeLog(tmp_path / "lake", SOURCE).checkpoint().state["gtid"])
        primary.crash()
        replica.wait_applied()
        result = materialize(path, instance)
    log = metadata(result, [SOURCE, "changelog"])
    assert log["server"] == "standby" and log["failovers"] == 1 and log["failover_method"] == "gtid"
    assert log["failover_to"] == f"standby 127.0.0.1:{replica.port}" and log["reread_windows"] == 0
    assert log["failover_position"].startswith("binlog.")
    from dagster_databus.cli import main

    assert main(["--config", str(path), "status"]) == 0
    assert (f"reading the standby (failovers: primary 127.0.0.1:{primary.port} -> standby 127.0.0.1:{replica.port} "
            "by gtid)") in capsys.readouterr().out
    _assert_snapshot_equals(load_config(path), MysqlHarness(replica, harness.database))


@pytest.mark.server  # started in the test
def test_verify_names_a_standby_that_does_not_log_what_it_replicates(tmp_path: Path) -> None:
    primary = MariaDBServer(server_id=1)
    standby = MariaDBServer(server_id=2)  # no --log-slave-updates
    try:
        harness = MysqlHarness(primary)
        harness.execute([DDL])
        config = _config(tmp_path / "lake", harness, standby)
        problems = open_source(config.source(SOURCE)).setup.verify()
        assert any(p.startswith(f"standby 127.0.0.1:{standby.port}: database") for p in problems)
        standby.replicate_from(primary)
        _wait_for_table(standby, harness.database)
        problems = open_source(config.source(SOURCE)).setup.verify()
        assert [p for p in problems if "log_slave_updates" in p] == [
            p for p in problems if p.startswith(f"standby 127.0.0.1:{standby.port}: log_slave_updates")]
        assert len([p for p in problems if "log_slave_updates" in p]) == 1
        standby.crash()  # a standby that is down is not a reason to stop capturing from the primary
        assert open_source(config.source(SOURCE)).setup.verify() == []
    finally:
        standby.close()
        primary.close()


@pytest.mark.parametrize("method", ["gtid", "timestamp"])
def test_a_standby_missing_captured_transactions_is_refused(pair, tmp_path: Path, method: str) -> None:
    primary, replica = pair
    config, _harness, _, generator = _setup(pair, tmp_path, method=method)
    generator.run(5)
    capture.run(config, SOURCE)
    replica.wait_for_gtid(ChangeLog(config.lake, SOURCE).checkpoint().state["gtid"])
    replica.execute("STOP SLAVE")  # the standby stops receiving: what follows exists on the primary only
    time.sleep(1.1)  # ... and commits in a later second than anything the standby has
    generator.run(5)
    capture.run(config, SOURCE)
    log = ChangeLog(config.lake, SOURCE)
    checkpoint, manifest = log.checkpoint(), log.manifest()
    primary.crash()

    with pytest.raises(StandbyBehindError) as info:
        capture.run(config, SOURCE)

    assert "capture already read" in info.value.problem and "wait" in info.value.fix and "bootstrap" in info.value.fix
    assert info.value.transient  # the standby may still be applying: a retry policy may run capture again
    assert log.checkpoint() == checkpoint and log.manifest() == manifest  # nothing switched, nothing written


def test_without_a_standby_an_unreachable_server_fails_and_writes_nothing(pair, tmp_path: Path) -> None:
    primary, _ = pair
    harness = MysqlHarness(primary)
    harness.execute([DDL])
    config = _config(tmp_path / "lake", harness, None)
    capture.install(config, SOURCE)
    LoadGenerator(harness).run(3)
    capture.run(config, SOURCE)
    checkpoint = ChangeLog(config.lake, SOURCE).checkpoint()
    primary.crash()
    with pytest.raises(SourceUnavailableError):
        capture.run(config, SOURCE)
    assert ChangeLog(config.lake, SOURCE).checkpoint() == checkpoint


def test_a_checkpoint_on_the_standby_needs_the_standby_configured(pair, tmp_path: Path) -> None:
    primary, replica = pair
    config, harness, _, generator = _setup(pair, tmp_path)
    generator.run(3)
    capture.run(config, SOURCE)
    replica.wait_for_gtid(ChangeLog(config.lake, SOURCE).checkpoint().state["gtid"])
    primary.crash()
    replica.wait_applied()
    assert capture.run(config, SOURCE).failover is not None
    without = _config(config.lake, harness, None)
    with pytest.raises(ConfigError) as info:
        capture.run(without, SOURCE)
    assert info.value.field == f"sources.{SOURCE}.standby"


def test_both_servers_down_fails_with_the_last_error(pair, tmp_path: Path) -> None:
    primary, replica = pair
    config, _harness, _, generator = _setup(pair, tmp_path)
    generator.run(3)
    capture.run(config, SOURCE)
    checkpoint = ChangeLog(config.lake, SOURCE).checkpoint()
    primary.crash()
    replica.crash()
    with pytest.raises(SourceUnavailableError):
        capture.run(config, SOURCE)
    log = ChangeLog(config.lake, SOURCE)
    assert log.checkpoint() == checkpoint and not log.manifest().lineage
