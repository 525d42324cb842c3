"""Sharded sources merged into one logical table, against three real MariaDB servers (one per
shard, so each shard has its own binlog positions): colliding keys across shards, interleaved
commits, per-part SCNs, replays, collisions of a data shard column, mismatched part schemas."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from deltalake import DeltaTable

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, LogicalTableConfig, load_config, parse_config
from dagster_databus.dataplane.logical import LogicalSnapshot
from dagster_databus.defs.factory import build_definitions
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.errors import SchemaDriftError, ShardCollisionError, SnapshotMissingError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sync.logical.compare import compare_parts
from dagster_databus.sync.logical.sync import sync_logical
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import compare_rows
from tests.support.harness import MysqlHarness
from tests.support.mariadb import MariaDBServer

USERS = "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(40), balance DOUBLE)"
LABELS = ("eu", "us", "ap")


@pytest.fixture(scope="module")
def servers() -> Iterator[list[MariaDBServer]]:
    """One server per shard. The third has rotated its binlog a few times, so its SCNs are far
    above the others': SCNs of different shards are unrelated numbers."""
    started: list[MariaDBServer] = []
    try:
        for _ in LABELS:
            started.append(MariaDBServer())
        for _ in range(3):
            started[2].execute("FLUSH BINARY LOGS")
        yield started
    finally:
        for server in started:
            server.close()


@dataclass
class Shards:
    harnesses: list[MysqlHarness]
    config: DatabusConfig
    labels: list[str]
    shard_column: str = "shard"

    @property
    def sources(self) -> list[str]:
        return [f"s{i + 1}" for i in range(len(self.harnesses))]

    def write(self, shard: int, *statements: tuple[str, Sequence[Any]] | str) -> None:
        self.harnesses[shard].execute(list(statements))

    def capture(self) -> None:
        for source in self.sources:
            capture.install(self.config, source)
            capture.run(self.config, source)

    def merge_physical(self, spark: Any) -> None:
        for source in self.sources:
            sync_source(spark, self.config, source)

    def expected(self) -> list[dict[str, Any]]:
        """Every shard's rows read from its database, with the shard label when the column is added."""
        rows = []
        for source_cfg, label in zip(self.config.sources, self.labels, strict=True):
            for row in read_rows(open_source(source_cfg), "users"):
                rows.append({self.shard_column: label, **row})
        return rows

    @property
    def logical(self) -> LogicalSnapshot:
        return LogicalSnapshot(self.config.lake, "users")

    def assert_equal(self) -> None:
        result = compare_rows("users", [self.shard_column, "id"], self.expected(), self.logical.read().to_pylist())
        assert result.equal, result
        assert self.logical.row_count() == len(self.expected())

    def assert_parts_at_their_logs(self, exact: bool = True) -> None:
        """Each part's applied SCN is its own log's committed SCN. After a part is loaded from a snapshot
        that was read from the source at a position the log has no event beyond (``exact=False``), it
        is that snapshot's SCN, which is above the log's."""
        for source, label in zip(self.sources, self.labels, strict=True):
            applied, committed = self.logical.applied_scn(label), ChangeLog(self.config.lake, source).committed_scn()
            assert applied == committed if exact else applied >= committed, label


@pytest.fixture(params=["spark", "local"])
def engine(request: pytest.FixtureRequest) -> str:
    """The merge engine a test's logical (and physical) tables are written by."""
    return request.param


def make_shards(servers: list[MariaDBServer], tmp_path: Path, ddl: Sequence[str] = (USERS, USERS, USERS),
                shard_column: str | None = None, labels: Sequence[str | None] = LABELS, engine: str = "spark",
                **source_extra: Any) -> Shards:
    harnesses = [MysqlHarness(server) for server in servers]
    for harness, statement in zip(harnesses, ddl, strict=True):
        harness.execute([statement])
    sources = [h.source_config(f"s{i + 1}", [("users", ["id"])], **source_extra) for i, h in enumerate(harnesses)]
    parts = [{"source": f"s{i + 1}", "table": "users", **({"shard": label} if label else {})}
             for i, label in enumerate(labels)]
    logical: dict[str, Any] = {"name": "users", "parts": parts}
    if shard_column is not None:
        logical["shard_column"] = shard_column
    config = parse_config({"lake": str(tmp_path / "lake"), "sources": sources, "logical_tables": [logical],
                           "merge": {"engine": engine}}, base=tmp_path)
    return Shards(harnesses, config, [p.label for p in config.logical_table("users").parts],
                  shard_column or "shard")


def seed(shards: Shards, ids: range = range(1, 13)) -> None:
    """The same ids on every shard, with values that differ from shard to shard."""
    for i, label in enumerate(shards.labels):
        shards.write(i, *[("INSERT INTO users VALUES (?, ?, ?)", (n, f"{label}-{n}", float(n * (i + 1))))
                          for n in ids])


def interleaved_round(shards: Shards, round_no: int) -> None:
    """Commits alternate shard by shard: inserts of one id everywhere, updates of one id everywhere,
    deletes, key changes, and a delete plus re-insert of one key in one transaction."""
    n = len(shards.labels)
    for i in range(n):
        shards.write(i, ("INSERT INTO users VALUES (?, ?, ?)", (50 + round_no, f"new-{i}-{round_no}", float(i))))
    for i in range(n):
        shards.write(i, ("UPDATE users SET balance = balance + ?, name = ? WHERE id = 1",
                         (i + 1, f"upd-{i}-{round_no}")))
    for i in range(n):
        shards.write(i, ("DELETE FROM users WHERE id = ?", (2 + i + 3 * round_no,)))
    for i in range(n):
        if i != 1:  # a key change on some shards only
            shards.write(i, ("UPDATE users SET id = id + 100 WHERE id = ?", (3 + 3 * round_no,)))
    for i in range(n):
        shards.write(i, "DELETE FROM users WHERE id = 12",
                     ("INSERT INTO users VALUES (?, ?, ?)", (12, f"again-{i}-{round_no}", -1.0)),
                     ("UPDATE users SET balance = ? WHERE id = ?", (float(round_no), 50 + round_no)))


def test_interleaved_shards_with_colliding_keys_merge_into_one_logical_table(servers, tmp_path: Path, engine: str,
                                                                            lazy_spark) -> None:
    shards = make_shards(servers, tmp_path, engine=engine)
    seed(shards)
    shards.capture()
    shards.merge_physical(lazy_spark)  # bootstraps each physical snapshot
    interleaved_round(shards, 0)
    shards.capture()  # the physical merges lag behind: the logical table reads the logs itself

    first = sync_logical(shards.config, "users")
    assert first.load_reason == "the logical table does not exist yet" and first.commits == 2
    assert {p.loaded_rows for p in first.parts} == {12}
    assert all(p.events > 0 for p in first.parts)
    shards.assert_equal()
    shards.assert_parts_at_their_logs()
    data = shards.logical.read(with_meta=True)
    assert data.schema.names[:2] == ["shard", "id"] and "__part" in data.schema.names
    assert all(r["__part"] == r["shard"] for r in data.to_pylist())
    # Every shard holds id 1, with its own values.
    assert sorted(r["shard"] for r in data.to_pylist() if r["id"] == 1) == sorted(shards.labels)

    version, rows = shards.logical.version(), shards.logical.read(with_meta=True).sort_by("__scn")
    replay = sync_logical(shards.config, "users")
    assert replay.commits == 0 and replay.events == 0 and replay.load_reason is None
    assert shards.logical.version() == version
    assert shards.logical.read(with_meta=True).sort_by("__scn").equals(rows)

    interleaved_round(shards, 1)
    shards.capture()
    second = sync_logical(shards.config, "users")
    assert second.load_reason is None and second.commits == 1
    assert all(p.events > 0 and p.to_scn > p.from_scn for p in second.parts)
    assert second.counts.inserted > 0 and second.counts.updated > 0 and second.counts.deleted > 0
    shards.assert_equal()
    shards.assert_parts_at_their_logs()
    assert shards.logical.version() == version + 1

    # Only the second shard writes: only its part moves.
    shards.write(1, ("UPDATE users SET name = ? WHERE id = 1", ("only-us",)))
    shards.capture()
    third = sync_logical(shards.config, "users")
    moved = {p.label for p in third.parts if p.to_scn != p.from_scn}
    assert moved == {shards.labels[1]} and third.events == 1 and third.counts.updated == 1
    shards.assert_equal()
    shards.assert_parts_at_their_logs()


def test_a_part_added_later_or_a_snapshot_read_again_reloads_the_table(servers, tmp_path: Path, spark) -> None:
    shards = make_shards(servers, tmp_path)
    seed(shards, range(1, 6))
    shards.capture()
    shards.merge_physical(spark)
    parts = shards.config.logical_table("users").parts
    two = shards.config.model_copy(update={"logical_tables": (LogicalTableConfig(name="users", parts=parts[:2]),)})
    sync_logical(two, "users")
    assert {r["shard"] for r in shards.logical.read().to_pylist()} == {"eu", "us"}

    added = sync_logical(shards.config, "users")
    assert added.load_reason is not None and "parts" in added.load_reason
    shards.assert_equal()

    # The second shard is read afresh from its database (as after DDL or `databus bootstrap`).
    shards.write(1, "DELETE FROM users WHERE id = 5")
    sync_source(spark, shards.config, "s2", mode="bootstrap")
    reread = sync_logical(shards.config, "users")
    assert reread.load_reason is not None and "s2.users was bootstrapped again" in reread.load_reason
    shards.capture()
    sync_logical(shards.config, "users")
    shards.assert_equal()
    shards.assert_parts_at_their_logs()


def test_retention_holds_for_logical_parts_and_a_log_pruned_past_one_reloads(servers, tmp_path: Path, spark) -> None:
    shards = make_shards(servers, tmp_path, retention={"max_bytes": 1})
    seed(shards, range(1, 6))
    shards.capture()
    shards.merge_physical(spark)
    sync_logical(shards.config, "users")
    for n in (1, 2):  # two segments, so retention may drop the first
        shards.write(0, ("UPDATE users SET name = ? WHERE id = ?", (f"pruned-{n}", n)))
        shards.capture()
    shards.merge_physical(spark)
    label = shards.labels[0]
    behind = shards.logical.applied_scn(label)
    # Retention keeps what the logical table has not merged yet: it catches up, no reload.
    capture.enforce_retention(shards.config, "s1")
    assert ChangeLog(shards.config.lake, "s1").manifest().start_scn <= behind
    assert sync_logical(shards.config, "users").load_reason is None
    shards.assert_equal()
    # A logical table taken out of the config does not hold retention; added back, it reloads.
    shards.write(0, ("UPDATE users SET name = ? WHERE id = ?", ("pruned-3", 3)))
    shards.capture()
    shards.write(0, ("UPDATE users SET name = ? WHERE id = ?", ("pruned-4", 4)))
    shards.capture()
    shards.merge_physical(spark)
    without = shards.config.model_copy(update={"logical_tables": ()})
    assert capture.enforce_retention(without, "s1").removed_segments >= 1
    result = sync_logical(shards.config, "users")
    assert result.load_reason is not None and "change log of source 's1' now starts after" in result.load_reason
    shards.assert_equal()
    shards.assert_parts_at_their_logs()


def test_a_schema_change_rolled_out_shard_by_shard(servers, tmp_path: Path, spark) -> None:
    shards = make_shards(servers, tmp_path)
    seed(shards, range(1, 6))
    shards.capture()
    shards.merge_physical(spark)
    sync_logical(shards.config, "users")
    version = shards.logical.version()

    alter = "ALTER TABLE users ADD COLUMN email VARCHAR(80)"
    shards.write(1, alter)
    shards.write(1, ("INSERT INTO users VALUES (?, ?, ?, ?)", (20, "with-email", 1.0, "a@b.c")))
    shards.capture()
    with pytest.raises(SnapshotMissingError, match=r"s2\.users was altered at SCN") as err:
        sync_logical(shards.config, "users")
    assert "materialize the s2/users asset first" in err.value.fix

    shards.merge_physical(spark)  # s2's snapshot is read again, with the new column
    with pytest.raises(SchemaDriftError, match=r"part us \(s2\.users\): extra column email"):
        sync_logical(shards.config, "users")
    assert shards.logical.version() == version

    shards.write(0, alter)
    shards.write(2, alter)
    shards.write(2, ("UPDATE users SET email = ? WHERE id = 1", ("ap@x.y",)))
    shards.capture()
    shards.merge_physical(spark)
    result = sync_logical(shards.config, "users")
    assert result.load_reason is not None and "bootstrapped again" in result.load_reason
    assert "email" in shards.logical.read().column_names
    shards.assert_equal()
    shards.assert_parts_at_their_logs(exact=False)  # the ALTERs wrote no row events after the re-reads
    shards.write(0, ("UPDATE users SET email = ? WHERE id = 2", ("eu@x.y",)))
    shards.capture()
    assert sync_logical(shards.config, "users").part("eu").events == 1
    shards.assert_equal()


def test_a_data_shard_column_is_used_and_a_key_on_two_shards_is_refused(servers, tmp_path: Path, lazy_spark,
                                                                        engine: str) -> None:
    ddl = "CREATE TABLE users (id BIGINT PRIMARY KEY, region VARCHAR(10), name VARCHAR(40))"
    shards = make_shards(servers, tmp_path, ddl=(ddl, ddl, ddl), shard_column="region", engine=engine)
    for i, region in enumerate(("eu", "us", "ap")):
        shards.write(i, *[("INSERT INTO users VALUES (?, ?, ?)", (n, region, f"{region}-{n}")) for n in (1, 2, 3)])
    shards.capture()
    shards.merge_physical(lazy_spark)
    sync_logical(shards.config, "users")
    shards.assert_equal()
    assert "shard" not in shards.logical.read().column_names

    # A row moves to another region value on its own shard: the old logical key goes with it.
    shards.write(0, "UPDATE users SET region = 'mid' WHERE id = 2")
    shards.capture()
    sync_logical(shards.config, "users")
    shards.assert_equal()

    # The us shard now claims ('eu', 1), which the eu shard holds.
    version = shards.logical.version()
    applied = {label: shards.logical.applied_scn(label) for label in shards.labels}
    shards.write(1, "UPDATE users SET region = 'eu' WHERE id = 1")
    shards.capture()
    with pytest.raises(ShardCollisionError) as err:
        sync_logical(shards.config, "users")
    message = str(err.value)
    assert "key (region='eu', id=1) arrives from part us but is held from part eu" in message
    assert "shard_column" in err.value.fix
    assert shards.logical.version() == version
    assert {label: shards.logical.applied_scn(label) for label in shards.labels} == applied

    # Fixed at the source, the sync goes through.
    shards.write(1, "UPDATE users SET region = 'us' WHERE id = 1")
    shards.capture()
    sync_logical(shards.config, "users")
    shards.assert_equal()

    # Two shards insert the same logical key in one batch.
    shards.write(1, ("INSERT INTO users VALUES (?, ?, ?)", (9, "zz", "from us")))
    shards.write(2, ("INSERT INTO users VALUES (?, ?, ?)", (9, "zz", "from ap")))
    shards.capture()
    with pytest.raises(ShardCollisionError, match=r"key \(region='zz', id=9\) arrives from parts ap, us"):
        sync_logical(shards.config, "users")


def test_a_data_shard_column_that_collides_at_the_first_load_writes_nothing(servers, tmp_path: Path,
                                                                            lazy_spark, engine: str) -> None:
    ddl = "CREATE TABLE users (id BIGINT PRIMARY KEY, region VARCHAR(10), name VARCHAR(40))"
    shards = make_shards(servers, tmp_path, ddl=(ddl, ddl, ddl), shard_column="region", engine=engine)
    for i in range(3):
        shards.write(i, ("INSERT INTO users VALUES (?, ?, ?)", (1, "eu" if i < 2 else "ap", f"n{i}")))
    shards.capture()
    shards.merge_physical(lazy_spark)
    with pytest.raises(ShardCollisionError, match=r"key \(region='eu', id=1\) arrives from parts eu, us"):
        sync_logical(shards.config, "users")
    assert not shards.logical.exists()


def test_parts_with_different_columns_are_refused_with_the_differences(servers, tmp_path: Path, spark) -> None:
    ddl = (USERS, "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(40), balance VARCHAR(20))",
           "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(40), balance DOUBLE, email VARCHAR(80))")
    shards = make_shards(servers, tmp_path, ddl=ddl)
    shards.capture()
    shards.merge_physical(spark)
    with pytest.raises(SchemaDriftError) as err:
        sync_logical(shards.config, "users")
    message = str(err.value)
    assert "part us (s2.users): balance is string, not double" in message
    assert "part ap (s3.users): extra column email" in message
    assert "apply the same DDL to every shard" in err.value.fix
    assert not shards.logical.exists()


def test_a_part_without_a_physical_snapshot_names_the_asset_to_materialize(servers, tmp_path: Path,
                                                                           spark) -> None:
    shards = make_shards(servers, tmp_path)
    seed(shards, range(1, 3))
    shards.capture()
    sync_source(spark, shards.config, "s1")
    sync_source(spark, shards.config, "s2")
    with pytest.raises(SnapshotMissingError) as err:
        sync_logical(shards.config, "users")
    assert "part ap needs the snapshot of s3.users" in str(err.value)
    assert "materialize the s3/users asset first" in err.value.fix
    assert not shards.logical.exists()


def test_the_logical_asset_materializes_with_per_part_metadata(servers, tmp_path: Path, spark,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    shards = make_shards(servers, tmp_path, labels=(None, None, None))
    assert shards.labels == ["s1.users", "s2.users", "s3.users"]
    seed(shards, range(1, 6))
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({
        "lake": "lake", "sources": [h.source_config(f"s{i + 1}", [("users", ["id"])])
                                    for i, h in enumerate(shards.harnesses)],
        "logical_tables": [{"name": "users", "parts": [{"source": s, "table": "users"} for s in shards.sources]}],
    }))
    defs = build_definitions(load_config(path), DatabusResource.for_file(path))
    assets = defs.resolve_assets_def(dg.AssetKey(["logical", "users"]))
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["logical", "users"])).parent_keys == {dg.AssetKey([s, "users"])
                                                                       for s in shards.sources}
    assert assets.group_names_by_key[dg.AssetKey(["logical", "users"])] == "logical"
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        assert job.execute_in_process(instance=instance).success
        interleaved_round(shards, 0)
        second = job.execute_in_process(instance=instance)
    events = [e for e in second.get_asset_materialization_events()
              if e.asset_key == dg.AssetKey(["logical", "users"])]
    assert len(events) == 1
    meta = {k: v.value for k, v in events[0].materialization.metadata.items()}
    for source, label in zip(shards.sources, shards.labels, strict=True):
        assert meta[f"applied_scn/{label}"] == str(ChangeLog(shards.config.lake, source).committed_scn())
        assert meta[f"events/{label}"] > 0
    assert meta["events"] == sum(meta[f"events/{label}"] for label in shards.labels)
    assert meta["rows_inserted"] > 0 and meta["rows_updated"] > 0 and meta["rows_deleted"] > 0
    assert meta["dagster/row_count"] == len(shards.expected())
    assert meta["delta_version"] == shards.logical.version() and meta["loaded"] == "-"
    shards.assert_equal()
    [check] = [e for e in second.get_asset_check_evaluations() if e.asset_key == dg.AssetKey(["logical", "users"])]
    assert check.check_name == "parts_match_snapshots" and check.passed
    assert all(p.equal for p in compare_parts(shards.config, "users"))
    # A row lost from the logical table alone (its SCNs unchanged) is found and named.
    victim = next(r["id"] for r in shards.logical.read(with_meta=True).to_pylist() if r["__part"] == shards.labels[1])
    DeltaTable(str(shards.logical.path)).delete(f"id = {victim} AND __part = '{shards.labels[1]}'")
    differing = [p for p in compare_parts(shards.config, "users") if not p.equal]
    assert [p.label for p in differing] == [shards.labels[1]]
    assert differing[0].comparison.missing == 1 and f"missing ({victim},)" in differing[0].comparison.examples
    from dagster_databus.cli import main

    assert main(["--config", str(path), "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("logical users")
    assert [line.split() for line in lines[start + 1:start + 4]] == [
        [label, meta[f"applied_scn/{label}"], "0"] for label in shards.labels]


def test_a_logical_consumer_bootstraps_from_the_logical_table_then_follows_each_shard(
        servers, tmp_path: Path, spark) -> None:
    from dagster_databus.consumer.client import DatabusConsumer
    from dagster_databus.consumer.logical import FileLogicalCheckpointStore, LogicalTableClient

    shards = make_shards(servers, tmp_path)
    seed(shards)
    shards.capture()
    shards.merge_physical(spark)
    sync_logical(shards.config, "users")
    interleaved_round(shards, 0)  # captured, but not yet in the logical table: comes from the logs
    shards.capture()
    copy: dict[tuple[Any, ...], dict[str, Any]] = {}

    class Mirror(DatabusConsumer):
        def on_data_event(self, event: Any) -> None:
            if event.op.value == "d":
                copy.pop(event.key, None)
            else:
                copy[event.key] = dict(event.row)

    checkpoints = FileLogicalCheckpointStore(tmp_path / "users.ckpt")
    first = LogicalTableClient.from_config(shards.config, "users", Mirror(), checkpoints=checkpoints,
                                           bootstrap=True).run()

    assert first.bootstrapped and first.bootstrap_rows == 3 * 12
    expected = {(r["shard"], r["id"]): r for r in shards.expected()}
    assert copy == expected
    interleaved_round(shards, 1)
    shards.capture()
    second = LogicalTableClient.from_config(shards.config, "users", Mirror(), checkpoints=checkpoints,
                                            bootstrap=True).run()
    assert not second.bootstrapped and second.windows > 0
    assert copy == {(r["shard"], r["id"]): r for r in shards.expected()}
