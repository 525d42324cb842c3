"""The lake's storage layer on a local folder and on a real S3-compatible server, by the same tests:
whole-object writes, listing, and create-if-absent, the primitive a commit without locks rests on."""

from __future__ import annotations

import json
import multiprocessing
import queue
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.consumer.checkpoints import ConsumerCheckpoint, LakeCheckpointStore
from dagster_databus.consumer.client import DatabusClient
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConcurrentRunError, LakeLocationError, PullError
from dagster_databus.storage.location import parse_lake
from dagster_databus.storage.objects import LakeObjects, open_objects
from tests.integration.common.test_types import Collector
from tests.support.harness import SqliteHarness, make_config
from tests.support.s3server import S3Server


def bucket_uri(server: S3Server, prefix: str = "lake/prod") -> str:
    return f"s3://{server.bucket()}/{prefix}"


@pytest.fixture(params=["local", "s3"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> LakeObjects:
    if request.param == "local":
        return open_objects(parse_lake(str(tmp_path / "lake")))
    server = request.getfixturevalue("s3")
    return open_objects(parse_lake(bucket_uri(server), options=server.referenced_options))


def test_objects_are_written_whole_listed_in_order_and_deleted(objects: LakeObjects) -> None:
    assert objects.read("log/shop/manifest.json") is None and objects.list("log/") == []
    objects.write("log/shop/segments/000002.avro", b"two")
    objects.write("log/shop/segments/000001.avro", b"one!")
    objects.write("log/other/x", b"x")
    objects.write("log/shop/segments/000001.avro", b"one")  # replaced whole
    assert objects.read("log/shop/segments/000001.avro") == b"one"
    assert [(o.key, o.size) for o in objects.list("log/shop/")] == [
        ("log/shop/segments/000001.avro", 3), ("log/shop/segments/000002.avro", 3)]
    assert [o.key for o in objects.list("log/shop/segments/000002")] == ["log/shop/segments/000002.avro"]
    objects.delete("log/shop/segments/000001.avro")
    objects.delete("log/shop/segments/000001.avro")  # already gone: no error
    assert [o.key for o in objects.list("log/")] == ["log/other/x", "log/shop/segments/000002.avro"]


def test_create_writes_only_a_free_name(objects: LakeObjects) -> None:
    assert objects.create("log/shop/_manifest/00000000000000000001.json", b"first")
    assert not objects.create("log/shop/_manifest/00000000000000000001.json", b"second")
    assert objects.read("log/shop/_manifest/00000000000000000001.json") == b"first"
    assert [o.key for o in objects.list("log/shop/_manifest/")] == ["log/shop/_manifest/00000000000000000001.json"]


ROUNDS, WRITERS = 3, 4


def _race(location: tuple[str, dict[str, str]], me: int, start: multiprocessing.synchronize.Barrier,
          won: multiprocessing.Queue) -> None:
    """One writer, racing the others for a fresh name each round: all start a round together (the barrier)."""
    objects = open_objects(parse_lake(location[0], options=location[1]))
    for round_ in range(ROUNDS):
        start.wait(60)
        if objects.create(f"log/shop/_manifest/{round_:020d}.json", f"writer {me}".encode()):
            won.put((round_, me))


def test_of_writers_racing_for_one_name_exactly_one_wins(tmp_path: Path, s3: S3Server) -> None:
    # The writers are started once per location and race round after round: a process start costs more than
    # a race, and every round is a race of all four for a name none has written.
    for location in ((str(tmp_path / "lake"), {}), (bucket_uri(s3), s3.referenced_options)):
        context = multiprocessing.get_context("spawn")
        start, won = context.Barrier(WRITERS), context.Queue()
        writers = [context.Process(target=_race, args=(location, me, start, won)) for me in range(WRITERS)]
        for w in writers:
            w.start()
        for w in writers:
            w.join(120)
        assert [w.exitcode for w in writers] == [0] * WRITERS, location[0]
        winners: dict[int, list[int]] = {}
        while True:  # the writers have exited: what they put is in the queue's pipe
            try:
                round_, me = won.get(timeout=2)
            except queue.Empty:
                break
            winners.setdefault(round_, []).append(me)
        assert sorted(winners) == list(range(ROUNDS)) and all(len(w) == 1 for w in winners.values()), (
            location[0], winners)
        objects = open_objects(parse_lake(location[0], options=location[1]))
        for round_, (me,) in winners.items():
            assert objects.read(f"log/shop/_manifest/{round_:020d}.json") == f"writer {me}".encode()


def test_lake_locations_and_their_options(tmp_path: Path) -> None:
    assert parse_lake("lake", base=tmp_path).path == tmp_path / "lake"
    assert parse_lake(f"file://{tmp_path}/lake").path == tmp_path / "lake"
    s3 = parse_lake("s3a://bucket/a/b/")
    assert (s3.scheme, s3.bucket, s3.prefix, s3.uri, s3.child("log", "x")) == (
        "s3", "bucket", "a/b", "s3://bucket/a/b", "s3://bucket/a/b/log/x")
    azure = parse_lake("abfss://container@account.dfs.core.windows.net/lake")
    assert (azure.scheme, azure.bucket, azure.prefix) == ("az", "container", "lake")
    # The account stays in the URI that delta-rs, delta-spark and the store client are given.
    assert azure.child("log", "x") == "abfss://container@account.dfs.core.windows.net/lake/log/x"
    assert parse_lake("az://container/lake").uri == "az://container/lake"
    assert parse_lake("gs://b").uri == "gs://b"
    with pytest.raises(LakeLocationError, match="scheme 'ftp'"):
        parse_lake("ftp://host/lake")
    with pytest.raises(LakeLocationError, match="no bucket"):
        parse_lake("s3:///prefix")


def test_secrets_come_only_from_the_environment_and_are_never_shown() -> None:
    with pytest.raises(LakeLocationError, match=r"AWS_SECRET_ACCESS_KEY holds a secret .* \$\{VARIABLE\}"):
        parse_lake("s3://b/p", options={"AWS_SECRET_ACCESS_KEY": "hunter2"})
    with pytest.raises(LakeLocationError, match="LAKE_SECRET, which are not set"):
        parse_lake("s3://b/p", options={"AWS_SECRET_ACCESS_KEY": "${LAKE_SECRET}"}, environ={})
    location = parse_lake("s3://b/p", options={"AWS_SECRET_ACCESS_KEY": "${LAKE_SECRET}", "AWS_REGION": "eu-west-1"},
                          environ={"LAKE_SECRET": "hunter2"})
    assert location.options["AWS_SECRET_ACCESS_KEY"] == "hunter2"
    assert "hunter2" not in location.described() + repr(location)
    assert location.described() == "s3://b/p (storage options: AWS_REGION, AWS_SECRET_ACCESS_KEY)"


def test_delta_rs_reads_and_merges_snapshots_in_the_same_store(s3: S3Server) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    location = parse_lake(bucket_uri(s3), options=s3.referenced_options)
    uri = location.child("snapshot", "shop", "orders")
    write_deltalake(uri, pa.table({"id": [1, 2], "v": ["a", "b"]}), storage_options=dict(location.options))
    table = DeltaTable(uri, storage_options=dict(location.options))
    (table.merge(pa.table({"id": [2, 3], "v": ["B", "c"]}), "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    rows = DeltaTable(uri, storage_options=dict(location.options)).to_pyarrow_table().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "v": "a"}, {"id": 2, "v": "B"}, {"id": 3, "v": "c"}]
    assert any(o.key.startswith("snapshot/shop/orders/_delta_log/") for o in open_objects(location).list("snapshot/"))


def test_consumer_checkpoints_in_the_lake_fence_a_second_instance(objects: LakeObjects) -> None:
    first = LakeCheckpointStore.for_consumer(objects, "shop", "billing")
    second = LakeCheckpointStore.for_consumer(objects, "shop", "billing")
    assert first.load() is None and second.load() is None
    first.save(ConsumerCheckpoint(Scn(5)))
    with pytest.raises(ConcurrentRunError, match="another instance of the same consumer"):
        second.save(ConsumerCheckpoint(Scn(6)))
    assert second.load() == ConsumerCheckpoint(Scn(5))  # restarted: it resumes from the newer checkpoint
    for scn in range(6, 12):
        second.save(ConsumerCheckpoint(Scn(scn), "e1", {"orders": 3}))
    assert LakeCheckpointStore.for_consumer(objects, "shop", "billing").load() == ConsumerCheckpoint(
        Scn(11), "e1", {"orders": 3})
    assert len(objects.list("consumers/shop/billing/checkpoint/")) == LakeCheckpointStore.KEEP


def test_a_consumer_bootstraps_and_resumes_from_a_lake_wholly_in_the_object_store(
        tmp_path: Path, s3: S3Server, spark) -> None:
    """Log, snapshots and the consumer's checkpoint in the bucket: a consumer process on another
    machine needs nothing but the lake."""
    from dagster_databus.sync.merge import sync_source
    from tests.support.s3server import s3_lake

    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)",
                    *[("INSERT INTO items VALUES (?, ?)", (i, "seed")) for i in range(3)]])
    config = make_config(s3_lake(s3), source.source_config("shop", [("items", ["id"])]))
    capture.install(config, "shop")
    source.execute([("INSERT INTO items VALUES (?, ?)", (i, "a")) for i in range(3, 6)])
    capture.run(config, "shop")
    sync_source(spark, config, "shop")  # snapshot of 0..5
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("b", 1)),
                    ("INSERT INTO items VALUES (?, ?)", (6, "b"))])
    capture.run(config, "shop")
    assert config.lake.path is None and not (tmp_path / "lake").exists()

    def consume() -> Collector:
        seen = Collector()
        # As a consumer on another machine is given the lake: its spec, the secret resolved there.
        DatabusClient(config.lake.spec(), "shop", seen,
                      checkpoints=LakeCheckpointStore.for_consumer(config.lake.objects, "shop", "audit")).run()
        return seen

    first = consume()  # the snapshot, then the log after it
    state = {}
    for event in first.events:
        state[event.key] = event.row["name"]
    assert state == {(0,): "seed", (1,): "b", (2,): "seed", (3,): "a", (4,): "a", (5,): "a", (6,): "b"}
    source.execute([("INSERT INTO items VALUES (?, ?)", (i, "c")) for i in range(7, 9)])
    capture.run(config, "shop")
    assert [tuple(e.key) for e in consume().events] == [(7,), (8,)]  # nothing twice, nothing skipped
    assert [o.key for o in config.lake.objects.list("consumers/shop/audit/checkpoint/")]


def test_an_unwritable_object_store_lake_is_named_before_the_source_is_touched(tmp_path: Path, s3: S3Server) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"])
    raw = {"lake": "s3://no-such-bucket/lake", "storage_options": s3.referenced_options,
           "sources": [source.source_config("shop", [("items", ["id"])])]}
    from dagster_databus.config import parse_config
    from dagster_databus.errors import LakeNotWritableError

    config = parse_config(raw, base=tmp_path)
    report = capture.validate(config)
    assert report.problems["lake"] and "s3://no-such-bucket/lake" in report.problems["lake"][0]
    assert "storage_options" in report.problems["lake"][0]
    with pytest.raises(LakeNotWritableError, match=r"s3://no-such-bucket/lake .*cannot be written"):
        capture.install(config, "shop")
    import sqlite3

    with sqlite3.connect(tmp_path / "source.db") as conn:  # nothing was installed in the source
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '_databus%'").fetchall()


def test_pull_cursors_in_the_lake_fence_a_second_consumer_with_the_same_client_id(
        objects: LakeObjects, tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    capture.install(config, "shop")
    for i in range(4):  # four windows
        source.execute([("INSERT INTO items VALUES (?, ?)", (i, "a"))])
        capture.run(config, "shop")
    meta = MetaManager(config.lake, "shop", objects)
    meta.subscribe("billing")
    first = PullConsumer(config.lake, "shop", "billing", objects)
    batch = first.get_without_ack(batch_size=1)
    first.ack(batch.id)
    second = PullConsumer(config.lake, "shop", "billing", objects)  # a second process, same client id
    again = second.get_without_ack(batch_size=1)
    assert again.start == batch.end and again.id > batch.id  # it starts from the stored cursor
    with pytest.raises(PullError, match="another consumer with the same client id is running"):
        first.get_without_ack(batch_size=1)  # the first one is fenced, not silently overwriting
    second.ack(again.id)
    assert meta.cursor("billing") == again.end
    assert [s.client_id for s in meta.subscriptions()] == ["billing"]
    assert len(objects.list("consumers/shop/billing/meta/")) <= MetaManager.KEEP


def test_pull_cursors_written_by_an_earlier_version_are_read_and_moved_on(tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    capture.install(config, "shop")
    source.execute([("INSERT INTO items VALUES (?, ?)", (1, "a"))])
    capture.run(config, "shop")
    legacy = tmp_path / "lake" / "consumers" / "shop" / "old.json"  # one file per client, replaced in place
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"client_id": "old", "tables": None, "filter": None, "cursor": "0",
                                  "last_batch_id": 7}))
    meta = MetaManager(config.lake, "shop")
    assert meta.cursors() == {"old": Scn(0)}
    consumer = PullConsumer(config.lake, "shop", "old")
    batch = consumer.get_without_ack(batch_size=10)
    assert batch.id == 8 and [e.key for e in batch.events] == [(1,)]
    consumer.ack(batch.id)
    assert not legacy.exists() and meta.cursor("old") == batch.end


def test_logical_consumer_checkpoints_in_the_lake_fence_a_second_instance(objects: LakeObjects) -> None:
    from dagster_databus.consumer.logical import LogicalCheckpoint, PartPosition, lake_logical_checkpoints

    def vector(scn: int) -> LogicalCheckpoint:
        return LogicalCheckpoint("users", {"eu": PartPosition("eu", "users", ConsumerCheckpoint(Scn(scn), "e1")),
                                           "us": PartPosition("us", "users", ConsumerCheckpoint(Scn(2 * scn)))})

    first = lake_logical_checkpoints(objects.location, "users", "mirror")
    second = lake_logical_checkpoints(objects.location, "users", "mirror")
    assert first.load() is None and second.load() is None
    first.save(vector(5))
    with pytest.raises(ConcurrentRunError, match="another instance of the same consumer"):
        second.save(vector(6))
    assert second.load() == vector(5)
    second.save(vector(7))
    assert lake_logical_checkpoints(objects.location, "users", "mirror").load() == vector(7)
    assert lake_logical_checkpoints(objects.location, "users", "other").load() is None
