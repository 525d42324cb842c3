"""Consumer positions under careless and hostile input: a checkpoint records what it covers (source, log,
tables, partition filter, group member) and is refused for a subscription it does not cover; a start
position must be an SCN the log has reached; pull cursors follow the same rules.

SQLite sources, snapshots by the local merge engine: no Spark starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.cli import main as cli
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.consumer.checkpoints import (
    CheckpointStore,
    ConsumerCheckpoint,
    FileCheckpointStore,
    LakeCheckpointStore,
    MemoryCheckpointStore,
)
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.consumer.coverage import Coverage
from dagster_databus.consumer.filters import PartitionFilter, format_ids, parse_ids
from dagster_databus.consumer.logical import FileLogicalCheckpointStore, LogicalTableClient
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.core.events import ChangeEvent
from dagster_databus.core.scn import Scn
from dagster_databus.errors import (
    CheckpointFormatError,
    ConsumerPositionError,
    PullError,
    SnapshotMissingError,
    SubscriptionMismatchError,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.harness import SqliteHarness, config_document, make_config

TABLES = [("a", ["id"]), ("b", ["id"])]


class Shop:
    """A SQLite source of two tables, its change log, snapshots and a config file naming them."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.db = SqliteHarness(tmp_path / "shop.db")
        self.db.execute(["CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT)",
                         "CREATE TABLE b (id INTEGER PRIMARY KEY, v TEXT)"])
        self.source = self.db.source_config("shop", TABLES)
        self.config: DatabusConfig = make_config(tmp_path / "lake", self.source, merge={"engine": "local"})
        self.path = tmp_path / "databus.json"
        self.path.write_text(json.dumps(config_document(self.config, [self.source])))
        self.next_id = 0
        capture.install(self.config, "shop")

    def change(self, windows: int = 3) -> None:
        """``windows`` captured windows, each inserting a row into both tables and updating an earlier one."""
        for _ in range(windows):
            i = self.next_id
            self.next_id += 1
            self.db.execute([("INSERT INTO a VALUES (?, ?)", (i, "new")), ("INSERT INTO b VALUES (?, ?)", (i, "new")),
                             ("UPDATE a SET v = 'changed' WHERE id = ?", (i // 2,))])
            capture.run(self.config, "shop")

    def snapshot(self) -> None:
        sync_source(None, self.config, "shop")  # the local engine

    @property
    def log(self) -> ChangeLog:
        return ChangeLog(self.config.lake, "shop")

    def events(self, since: Scn, tables: list[str] | None = None,
               accept: PartitionFilter | None = None) -> list[tuple[str, int, int]]:
        """(table, scn, seq) of the logged events after ``since``, in log order."""
        return [(e.event.table, e.event.scn.value, e.event.seq) for e in self.log.read(since, tables=tables)
                if accept is None or accept.accepts(list(e.event.key))]

    def tail(self, *args: str) -> int:
        return cli(["--config", str(self.path), "tail", "--source", "shop", *args])


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    shop = Shop(tmp_path)
    shop.change()
    shop.snapshot()
    shop.change()  # after the snapshots: in the log only
    return shop


class Recorder(DatabusConsumer):
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.bootstrapped = False

    def on_start_bootstrap(self, scn: Scn) -> None:
        self.bootstrapped = True

    def on_data_event(self, event: ChangeEvent) -> None:
        self.events.append((event.table, event.scn.value, event.seq))


def run(shop: Shop, store: CheckpointStore[ConsumerCheckpoint], **options: Any) -> Recorder:
    recorder = Recorder()
    DatabusClient(shop.config.lake, "shop", recorder, checkpoints=store, **options).run()
    return recorder


def stores(shop: Shop) -> dict[str, CheckpointStore[ConsumerCheckpoint]]:
    return {"file": FileCheckpointStore(shop.tmp_path / "c.ckpt"),
            "lake": LakeCheckpointStore.for_consumer(shop.config.lake.objects, "shop", "indexer")}


def printed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# -- a checkpoint reused for another subscription -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["file", "lake"])
def test_a_checkpoint_kept_for_some_tables_is_refused_for_more(shop: Shop, kind: str) -> None:
    store = stores(shop)[kind]
    first = run(shop, store, tables=["a"])
    assert first.bootstrapped and {t for t, _, _ in first.events} == {"a"}
    held = store.load()
    assert held is not None and held.covers == Coverage("shop", ("a",))
    shop.change()
    for wider in (["a", "b"], ["b"], None):  # None: every table
        with pytest.raises(SubscriptionMismatchError) as refused:
            run(shop, stores(shop)[kind], tables=wider)
        message = str(refused.value)
        assert "b was never delivered" in message or "every table is asked for" in message
        assert f"SCN {held.scn}" in message and "Fix:" in message and "own checkpoint" in message
    assert stores(shop)[kind].load() == held, "a refused run leaves the checkpoint as it was"
    # The checkpoint's own subscription still resumes, with exactly what came after it.
    again = run(shop, stores(shop)[kind], tables=["a"])
    assert again.events == shop.events(held.scn, ["a"]) and not again.bootstrapped


@pytest.mark.parametrize("where", ["--checkpoint", "--consumer"])
def test_tail_refuses_a_checkpoint_kept_for_fewer_tables(shop: Shop, where: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    at = str(shop.tmp_path / "tail.ckpt") if where == "--checkpoint" else "audit"
    assert shop.tail("--tables", "a", where, at) == 0
    first = printed(capsys)
    assert first and {e["table"] for e in first} == {"a"}
    shop.change()
    assert shop.tail("--tables", "a", "b", where, at) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.startswith("error: the checkpoint ") and "table b was never delivered" in captured.err
    assert "Fix: give this subscription its own checkpoint" in captured.err and "--from-scn" in captured.err
    assert shop.tail("--tables", "a", where, at) == 0  # its own subscription resumes where it was
    later = printed(capsys)
    assert later and {e["table"] for e in later} == {"a"}
    assert min(int(e["scn"]) for e in later) > max(int(e["scn"]) for e in first)


def test_fewer_tables_resume_and_are_recorded_so_widening_again_is_refused(shop: Shop) -> None:
    store = FileCheckpointStore(shop.tmp_path / "c.ckpt")
    run(shop, store, tables=["a", "b"])
    held = store.load()
    assert held is not None
    shop.change()
    narrowed = run(shop, store, tables=["a"])
    assert narrowed.events == shop.events(held.scn, ["a"]) and not narrowed.bootstrapped
    assert json.loads((shop.tmp_path / "c.ckpt").read_text())["covers"]["tables"] == ["a"]
    shop.change()
    with pytest.raises(SubscriptionMismatchError, match="table b was never delivered"):
        run(shop, store, tables=["a", "b"])  # b's changes since the narrowing were skipped


def test_the_same_subscription_resumes_exactly_in_any_table_order(shop: Shop) -> None:
    store = FileCheckpointStore(shop.tmp_path / "c.ckpt")
    first = run(shop, store, tables=["a", "b"], partition_filter="mod:2:[0,1]")
    held = store.load()
    assert first.bootstrapped and held is not None and held.scn == shop.log.committed_scn()
    assert held.covers == Coverage("shop", ("a", "b"), "mod:2:[0,1]") and held.log_id == shop.log.manifest().log_id
    assert held.epoch == shop.log.manifest().epoch
    assert run(shop, store, tables=["a", "b"], partition_filter="mod:2:[0-1]").events == []  # nothing new
    shop.change()
    again = run(shop, store, tables=["b", "a"], partition_filter="mod:2:[1,0]")
    assert sorted(again.events) == sorted(shop.events(held.scn)) and again.events and not again.bootstrapped


def test_a_checkpoint_kept_with_a_partition_filter_is_refused_for_more_partitions(shop: Shop) -> None:
    store = MemoryCheckpointStore()
    run(shop, store, partition_filter="mod:4:[0,1]")
    for wider in ("mod:4:[0-2]", "mod:2:[0]", "range:10:[0-100]", None):
        with pytest.raises(SubscriptionMismatchError, match="filter mod:4:\\[0,1\\]"):
            run(shop, store, partition_filter=wider)
    held = store.load()
    assert held is not None
    shop.change()
    finer = run(shop, store, partition_filter="mod:8:[0,5]")  # 0 % 4 and 5 % 4 are in [0,1]: within it
    assert finer.events and sorted(finer.events) == sorted(
        shop.events(held.scn, accept=PartitionFilter.parse("mod:8:[0,5]")))


def test_a_checkpoint_kept_for_one_group_member_is_refused_for_another(shop: Shop) -> None:
    store = MemoryCheckpointStore()
    run(shop, store, group="1/2")
    for other in ("0/2", "0/4", None):
        with pytest.raises(SubscriptionMismatchError, match="member 1/2"):
            run(shop, store, group=other)
    run(shop, store, group="3/4")  # 3 % 2 == 1: within member 1 of 2


def test_a_checkpoint_of_another_source_is_refused(shop: Shop) -> None:
    store = MemoryCheckpointStore(ConsumerCheckpoint(Scn(1), shop.log.manifest().epoch, covers=Coverage("billing")))
    with pytest.raises(SubscriptionMismatchError, match="belongs to a consumer of source 'billing', not 'shop'"):
        run(shop, store)


# -- checkpoints written before coverage was recorded -------------------------------------------------------


def old_checkpoint(scn: Scn, epoch: str | None) -> dict[str, Any]:
    """A checkpoint as earlier versions wrote it: no log id, no coverage."""
    return {"scn": str(scn), "epoch": epoch, "table_floors": {}}


def test_an_old_checkpoint_file_resumes_and_records_its_subscription(shop: Shop) -> None:
    windows = list(shop.log.read_windows())
    at = windows[1].scn
    path = shop.tmp_path / "old.ckpt"
    path.write_text(json.dumps(old_checkpoint(at, shop.log.manifest().epoch)))
    resumed = run(shop, FileCheckpointStore(path), tables=["b", "a"])
    assert sorted(resumed.events) == sorted(shop.events(at)) and not resumed.bootstrapped
    saved = json.loads(path.read_text())
    assert saved["covers"] == {"source": "shop", "tables": ["b", "a"], "filter": None, "group": None}
    assert saved["log_id"] == shop.log.manifest().log_id and saved["scn"] == str(shop.log.committed_scn())


def test_an_old_checkpoint_in_the_lake_resumes_and_its_next_version_records_its_subscription(shop: Shop) -> None:
    at = list(shop.log.read_windows())[2].scn
    objects = shop.config.lake.objects
    prefix = "consumers/shop/indexer/checkpoint/"
    assert objects.create(f"{prefix}{7:020d}.json", json.dumps(old_checkpoint(at, shop.log.manifest().epoch)).encode())
    resumed = run(shop, LakeCheckpointStore.for_consumer(objects, "shop", "indexer"), tables=["a"])
    assert resumed.events == shop.events(at, ["a"])
    newest = json.loads(objects.read(f"{prefix}{8:020d}.json") or b"{}")
    assert newest["covers"]["tables"] == ["a"]
    shop.change()
    with pytest.raises(SubscriptionMismatchError):
        run(shop, LakeCheckpointStore.for_consumer(objects, "shop", "indexer"), tables=["a", "b"])


def test_a_file_that_is_not_a_checkpoint_is_refused_with_its_name(shop: Shop,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert shop.tail("--checkpoint", str(shop.path)) == 2  # the config file, by mistake
    err = capsys.readouterr().err
    assert f"{shop.path} is not a consumer checkpoint" in err and "Fix:" in err
    (shop.tmp_path / "torn.ckpt").write_text('{"scn": ')
    with pytest.raises(CheckpointFormatError):
        FileCheckpointStore(shop.tmp_path / "torn.ckpt").load()


# -- start positions --------------------------------------------------------------------------------------


def test_tail_from_an_scn_past_the_end_of_the_log_is_refused_and_saves_nothing(
        shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    end = shop.log.committed_scn()
    checkpoint = shop.tmp_path / "tail.ckpt"
    assert shop.tail("--from-scn", str(end.value + 6), "--checkpoint", str(checkpoint)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not checkpoint.exists()
    assert f"start position SCN {end.value + 6} is past the end of the change log of 'shop'" in captured.err
    assert f"which has reached SCN {end}" in captured.err and f"--from-scn {end} starts with the next" in captured.err
    shop.change()  # the log grows past it later: still nothing was saved, nothing is skipped
    assert shop.tail("--from-scn", str(end), "--checkpoint", str(checkpoint)) == 0
    assert sorted((e["table"], int(e["scn"]), e["seq"]) for e in printed(capsys)) == sorted(shop.events(end))
    assert json.loads(checkpoint.read_text())["scn"] == str(shop.log.committed_scn())


def test_a_start_past_the_end_is_refused_in_python_and_at_the_end_is_kept(shop: Shop) -> None:
    end = shop.log.committed_scn()
    store = MemoryCheckpointStore()
    with pytest.raises(ConsumerPositionError, match="past the end"):
        run(shop, store, start=Scn(end.value + 1))
    assert store.load() is None
    assert run(shop, store, start=end).events == []
    held = store.load()
    assert held is not None and held.scn == end and held.covers == Coverage("shop")  # recorded even with nothing


def test_a_start_the_log_reached_without_events_is_kept(shop: Shop) -> None:
    # A poll that found nothing for the log moves its checkpoint past its last event (as a MySQL binlog's
    # position moves with other tables' changes): every change up to there is in the log, so a consumer may
    # start there, and resume from there.
    manifest = shop.log.manifest()
    last = manifest.last_scn
    shop.log.writer().advance(Scn(last.value + 5), manifest.epoch or "", dict(manifest.state))
    store = MemoryCheckpointStore()
    with pytest.raises(ConsumerPositionError, match=f"which has reached SCN {last.value + 5}"):
        run(shop, store, start=Scn(last.value + 6))
    assert run(shop, store, start=Scn(last.value + 5)).events == []
    held = store.load()
    assert held is not None and held.scn == Scn(last.value + 5)
    assert run(shop, store).events == [] and store.load() == held  # resumes at it


@pytest.mark.parametrize("bad", ["abc", "-5", "", "1.5", "99999999999999999999"])
def test_tail_refuses_a_from_scn_that_is_not_an_scn(shop: Shop, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = shop.tmp_path / "tail.ckpt"
    assert shop.tail(f"--from-scn={bad}", "--checkpoint", str(checkpoint)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not checkpoint.exists()
    assert captured.err == (f"error: config error at --from-scn: {bad!r} is not an SCN (a whole number from 0 to "
                            f"{Scn.MAX}). Fix: give the SCN to start after, as the change log numbers them (databus "
                            "status shows where it ends), or leave --from-scn out to bootstrap from the snapshots\n")


def test_a_checkpoint_past_the_end_of_the_log_is_refused(shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    # What the earlier tail saved for --from-scn past the end.
    end = shop.log.committed_scn()
    path = shop.tmp_path / "ahead.ckpt"
    path.write_text(json.dumps(old_checkpoint(Scn(end.value + 6), shop.log.manifest().epoch)))
    assert shop.tail("--checkpoint", str(path)) == 2
    err = capsys.readouterr().err
    assert f"consumer checkpoint {end.value + 6} (file {path}) is past the end" in err and "Fix:" in err
    with pytest.raises(ConsumerPositionError):
        run(shop, FileCheckpointStore(path))


def test_run_until_past_the_end_saves_no_checkpoint_past_it(shop: Shop) -> None:
    store = MemoryCheckpointStore()
    run(shop, store, bootstrap=False)
    end = shop.log.committed_scn()
    DatabusClient(shop.config.lake, "shop", Recorder(), checkpoints=store).run(until=Scn(end.value + 100))
    held = store.load()
    assert held is not None and held.scn == end


def test_a_start_before_the_log_starts_bootstraps_or_is_refused_as_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shop = Shop(tmp_path)
    shop.source["retention"] = {"max_bytes": 1}
    shop.config = make_config(tmp_path / "lake", shop.source, merge={"engine": "local"})
    shop.path.write_text(json.dumps(config_document(shop.config, [shop.source])))
    shop.change()
    shop.snapshot()
    assert capture.enforce_retention(shop.config, "shop") is not None
    start = shop.log.manifest().start_scn
    assert start > Scn(1)
    checkpoint = tmp_path / "tail.ckpt"
    assert shop.tail("--no-bootstrap", "--from-scn", "1", "--checkpoint", str(checkpoint)) == 2
    err = capsys.readouterr().err
    assert "start position SCN 1 is before the change log of 'shop' starts" in err and not checkpoint.exists()
    boot = run(shop, MemoryCheckpointStore(), start=Scn(1))
    assert boot.bootstrapped and boot.events


# -- tables the source does not have ------------------------------------------------------------------------


def test_tail_names_the_configured_tables_for_one_that_is_not(shop: Shop, capsys: pytest.CaptureFixture[str]) -> None:
    assert shop.tail("--tables", "a", "nosuch") == 2
    err = capsys.readouterr().err
    assert err == ("error: config error at --tables: nosuch is not one of the tables configured for source 'shop' "
                   "(a, b). Fix: name tables the source's config lists; a new table must be added there, installed "
                   "and materialized before it can be tailed\n")


def test_the_client_says_a_table_it_cannot_find_anywhere_is_not_there(shop: Shop) -> None:
    with pytest.raises(SnapshotMissingError, match=r"table 'nosuch', which is neither in the change log of 'shop' "
                                                   r"nor in its snapshots \(tables there: a, b\)"):
        run(shop, MemoryCheckpointStore(), tables=["nosuch"])


@pytest.mark.parametrize(("flag", "value"), [("--checkpoint-every", "0"), ("--checkpoint-seconds", "-1"),
                                             ("--interval", "-0.5")])
def test_tail_refuses_counts_and_durations_below_zero(shop: Shop, flag: str, value: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert shop.tail(flag, value) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: config error at {flag}: ") and "Fix:" in err


# -- logical tables ------------------------------------------------------------------------------------------


def test_a_logical_checkpoint_kept_for_one_group_member_is_refused_for_another(tmp_path: Path) -> None:
    sources = []
    for name in ("eu", "us"):
        db = SqliteHarness(tmp_path / f"{name}.db")
        db.execute(["CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)"])
        sources.append((name, db))
    config = parse_config({"lake": str(tmp_path / "lake"), "sources": [
        db.source_config(name, [("users", ["id"])]) for name, db in sources],
        "logical_tables": [{"name": "users", "shard_column": "shard", "parts": [
            {"source": name, "table": "users", "shard": name} for name, _ in sources]}]}, base=tmp_path)
    for name, db in sources:
        capture.install(config, name)
        db.execute([("INSERT INTO users VALUES (?, ?)", (i, name)) for i in range(20)])
        capture.run(config, name)
    path = tmp_path / "users.ckpt"

    def run_as(group: str | None) -> Recorder:
        recorder = Recorder()
        LogicalTableClient.from_config(config, "users", recorder, checkpoints=FileLogicalCheckpointStore(path),
                                       group=group).run()
        return recorder

    assert run_as("1/2").events
    assert json.loads(path.read_text())["group"] == "1/2"
    for other in ("0/2", None):
        with pytest.raises(SubscriptionMismatchError, match="kept for group member 1/2"):
            run_as(other)
    run_as("3/4")  # within member 1 of 2: resumes, and records it
    assert json.loads(path.read_text())["group"] == "3/4"
    legacy = {k: v for k, v in json.loads(path.read_text()).items() if k != "group"}
    path.write_text(json.dumps(legacy))  # as earlier versions wrote it: covers any member
    run_as("0/2")
    assert json.loads(path.read_text())["group"] == "0/2"


# -- pull cursors ---------------------------------------------------------------------------------------------


def test_pull_subscribing_a_client_again_to_more_is_refused_and_to_less_is_kept(shop: Shop) -> None:
    meta = MetaManager(shop.config.lake, "shop")
    meta.subscribe("billing", tables=["a"], filter="mod:4:[0,1]")
    consumer = PullConsumer(shop.config.lake, "shop", "billing")
    batch = consumer.get_without_ack(batch_size=2)
    consumer.ack(batch.id)
    for tables, spec in ((["a", "b"], "mod:4:[0,1]"), (None, "mod:4:[0,1]"), (["a"], "mod:4:[0-3]"), (["a"], None)):
        with pytest.raises(SubscriptionMismatchError, match=f"cursor at SCN {batch.end}"):
            meta.subscribe("billing", tables=tables, filter=spec)
    assert meta.subscribe("billing", tables=["a"], filter="mod:4:[1,0]").filter == "mod:4:[0,1]"  # the same
    narrowed = meta.subscribe("billing", tables=["a"], filter="mod:4:[1]")
    assert narrowed.tables == ("a",) and narrowed.filter == "mod:4:[1]"
    assert meta.cursor("billing") == batch.end  # the cursor is kept
    resumed = PullConsumer(shop.config.lake, "shop", "billing").get_without_ack(batch_size=1000)
    assert resumed.start == batch.end and resumed.events
    assert all(e.table == "a" and e.key[0] % 4 == 1 for e in resumed.events)
    with pytest.raises(SubscriptionMismatchError, match="filter mod:4:\\[0,1\\] accepts keys"):
        meta.subscribe("billing", tables=["a"], filter="mod:4:[0,1]")  # what it was before narrowing: now more


def test_pull_cursors_record_their_log_and_are_refused_where_the_log_does_not_place_them(shop: Shop) -> None:
    meta = MetaManager(shop.config.lake, "shop")
    meta.subscribe("billing")
    consumer = PullConsumer(shop.config.lake, "shop", "billing")
    batch = consumer.get_without_ack(batch_size=2)
    consumer.ack(batch.id)
    manifest = shop.log.manifest()
    doc, version = meta._load_versioned("billing")
    assert doc is not None and (doc["epoch"], doc["log_id"]) == (manifest.epoch, manifest.log_id)
    end = shop.log.committed_scn()
    for changed, why in (({"cursor": str(end.value + 6)}, "past the end of the log"),
                         ({"epoch": "another"}, "a position of epoch another"),
                         ({"log_id": "another"}, "a position of change log another")):
        doc, version = meta._load_versioned("billing")
        meta._store("billing", {**doc, **changed}, expected=version)
        with pytest.raises(PullError, match=why):
            PullConsumer(shop.config.lake, "shop", "billing").get_without_ack(batch_size=2)
        meta._store("billing", doc, expected=version + 1)
    again = PullConsumer(shop.config.lake, "shop", "billing").get_without_ack(batch_size=2)
    assert again.start == batch.end  # put back: it resumes


def test_a_pull_cursor_written_before_logs_were_recorded_resumes_and_records_it(shop: Shop) -> None:
    meta = MetaManager(shop.config.lake, "shop")
    meta.subscribe("old", tables=["b"])
    doc, version = meta._load_versioned("old")
    assert doc is not None
    legacy = {k: v for k, v in doc.items() if k not in ("epoch", "log_id")}
    meta._store("old", legacy, expected=version)
    consumer = PullConsumer(shop.config.lake, "shop", "old")
    batch = consumer.get_without_ack(batch_size=1000)
    assert [(e.table, e.scn.value, e.seq) for e in batch.events] == shop.events(Scn(0), ["b"])
    consumer.ack(batch.id)
    assert (meta._load_versioned("old")[0] or {})["log_id"] == shop.log.manifest().log_id


# -- what "within" means ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("narrow", "wide", "within"), [
    ("mod:4:[1]", "mod:4:[0,1]", True), ("mod:8:[0,5]", "mod:4:[0,1]", True), ("mod:8:[2]", "mod:4:[0,1]", False),
    ("mod:4:[0]", "mod:8:[0]", False), ("range:10:[0-1]", "range:20:[0]", True),
    ("range:10:[0-2]", "range:20:[0]", False), ("range:20:[0]", "range:10:[0]", False),
    ("mod:4:[0]", "range:4:[0]", False)])
def test_a_filter_is_within_another_only_when_every_key_it_accepts_the_other_does(
        narrow: str, wide: str, within: bool) -> None:
    a, b = PartitionFilter.parse(narrow), PartitionFilter.parse(wide)
    assert a.within(b) is within
    # Checked on keys, too: integer keys, and (for mod filters) composite keys, which are hashed.
    keys = [[k] for k in range(-500, 500)] + ([["text", k] for k in range(500)] if a.kind == b.kind == "mod" else [])
    outside = [k for k in keys if a.accepts(k) and not b.accepts(k)]
    assert not outside if within else outside


@pytest.mark.parametrize("ids", ["[1,2,5-7]", "[0]", "[3,5,7]", "[0-99]", "[1,2]"])
def test_filters_are_recorded_in_one_form(ids: str) -> None:
    assert parse_ids(format_ids(parse_ids(ids))) == parse_ids(ids)
    assert Coverage.of("s", partition_filter=f"mod:100:{ids}").filter == f"mod:100:{format_ids(parse_ids(ids))}"
