"""Consumers on real change logs produced by the pipeline (SQLite shop workload)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.cli import main as cli
from dagster_databus.consumer.checkpoints import ConsumerCheckpoint, FileCheckpointStore, MemoryCheckpointStore
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.consumer.filters import PartitionFilter, parse_ids
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.core.events import ChangeEvent, Op
from dagster_databus.core.scn import Scn
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.errors import (
    ConsumerError,
    DatabusError,
    FilterSpecError,
    GroupSpecError,
    LogicalCheckpointError,
    OrderingError,
    PullError,
    SubscriptionMismatchError,
    for_task,
    from_task,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sync.merge import sync_source
from tests.support.harness import make_config
from tests.support.paths import REPO

TABLES = [{"name": "customers", "primary_key": ["id"]}, {"name": "orders", "primary_key": ["id"]},
          {"name": "order_items", "primary_key": ["order_id", "line_no"]}]


def shop_log(tmp_path: Path, rounds: int = 4, **extra: Any):
    """A shop database captured over several polls: a log of many windows."""
    create_shop(tmp_path / "shop.db")
    config = make_config(tmp_path / "lake", {"name": "shop", "kind": "sqlite", "path": str(tmp_path / "shop.db"),
                                             "tables": TABLES, **extra})
    workload = ShopWorkload(tmp_path / "shop.db", seed=41)
    capture.install(config, "shop")
    for _ in range(rounds):
        workload.run(15)
        capture.run(config, "shop")
    return config, workload


class Recorder(DatabusConsumer):
    def __init__(self) -> None:
        self.trace: list[tuple[str, Any]] = []
        self.events: list[ChangeEvent] = []

    def on_start_data_event_sequence(self, scn: Scn) -> None:
        self.trace.append(("start", scn))

    def on_start_source(self, table: str) -> None:
        self.trace.append(("source", table))

    def on_data_event(self, event: ChangeEvent) -> None:
        self.trace.append(("event", event.table))
        self.events.append(event)

    def on_end_source(self, table: str) -> None:
        self.trace.append(("end_source", table))

    def on_end_data_event_sequence(self, scn: Scn) -> None:
        self.trace.append(("end", scn))

    def on_checkpoint(self, scn: Scn) -> None:
        self.trace.append(("checkpoint", scn))

    def on_rollback(self, scn: Scn) -> None:
        self.trace.append(("rollback", scn))


def ids(events: list[ChangeEvent]) -> list[tuple[int, int]]:
    return [(e.scn.value, e.seq) for e in events]


def test_windows_arrive_in_scn_order_grouped_per_table_in_subscription_order(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path)
    order = ["orders", "customers", "order_items"]
    recorder = Recorder()
    stats = DatabusClient(config.lake, "shop", recorder, tables=order, bootstrap=False).run()
    log = ChangeLog(config.lake, "shop")
    assert sorted(ids(recorder.events)) == sorted(ids([e.event for e in log.read()]))
    windows = [w.scn for w in log.read_windows()]
    assert [s for kind, s in recorder.trace if kind == "start"] == windows == sorted(windows)
    assert stats.windows == len(windows) and stats.checkpoint == log.committed_scn()
    # Inside each window: each table once, in subscription order, its events between its boundaries.
    window_tables: list[str] = []
    for kind, value in recorder.trace:
        if kind == "start":
            window_tables = []
        elif kind == "source":
            window_tables.append(value)
        elif kind == "end":
            assert window_tables == [t for t in order if t in window_tables]
            assert len(set(window_tables)) == len(window_tables)
    # SCN order holds across windows (above) and within each table's events.
    for table in order:
        per_table = ids([e for e in recorder.events if e.table == table])
        assert per_table == sorted(per_table)


def test_a_failing_callback_rolls_the_window_back_and_redelivers_it(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path)

    class FailsOnce(Recorder):
        failed = False

        def on_data_event(self, event: ChangeEvent) -> Any:
            super().on_data_event(event)
            if len(self.events) == 7 and not self.failed:
                self.failed = True
                raise RuntimeError("downstream hiccup")

    consumer = FailsOnce()
    store = MemoryCheckpointStore()
    stats = DatabusClient(config.lake, "shop", consumer, checkpoints=store, bootstrap=False).run()
    log_ids = ids([e.event for e in ChangeLog(config.lake, "shop").read()])
    assert stats.rollbacks == 1 and ("rollback", Scn(0)) in consumer.trace
    # The failed window was redelivered from its start (the same first 7 events again), then
    # everything arrived exactly once.
    delivered = ids(consumer.events)
    assert delivered[:7] == delivered[7:14]
    assert sorted(delivered[7:]) == sorted(log_ids)
    assert store.load().scn == ChangeLog(config.lake, "shop").committed_scn()


def test_a_window_that_keeps_failing_stops_with_the_checkpoint_before_it(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path)
    windows = list(ChangeLog(config.lake, "shop").read_windows())

    class Stubborn(Recorder):
        def on_end_data_event_sequence(self, scn: Scn) -> Any:
            return scn != windows[1].scn  # refuses the second window, every time

    store = MemoryCheckpointStore()
    with pytest.raises(ConsumerError, match=f"window {windows[1].scn}.*failed 3 times"):
        DatabusClient(config.lake, "shop", Stubborn(), checkpoints=store, max_retries=2, bootstrap=False).run()
    assert store.load().scn == windows[0].scn


class CountingStore(MemoryCheckpointStore):
    def __init__(self) -> None:
        super().__init__()
        self.saves: list[Scn] = []

    def save(self, checkpoint: ConsumerCheckpoint) -> None:
        super().save(checkpoint)
        self.saves.append(checkpoint.scn)


def test_checkpoints_every_n_windows_and_a_failure_redelivers_only_what_followed_the_last(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path, rounds=24)  # a SQLite capture run closes one window
    log = ChangeLog(config.lake, "shop")
    windows = list(log.read_windows())
    assert len(windows) > 20

    class Stubborn(Recorder):
        def on_end_data_event_sequence(self, scn: Scn) -> Any:
            return scn != windows[12].scn

    store = CountingStore()
    with pytest.raises(ConsumerError, match=f"the checkpoint is still {windows[11].scn}"):
        DatabusClient(config.lake, "shop", Stubborn(), checkpoints=store, max_retries=0, bootstrap=False,
                      checkpoint_every_windows=5).run()
    # Every 5 windows, then the last window delivered in full before the one that failed.
    assert store.saves == [windows[4].scn, windows[9].scn, windows[11].scn]
    recorder = Recorder()
    store.saves.clear()
    DatabusClient(config.lake, "shop", recorder, checkpoints=store, bootstrap=False, checkpoint_every_windows=5).run()
    delivered = [scn for kind, scn in recorder.trace if kind == "start"]
    assert delivered == [w.scn for w in windows[12:]]
    rest = len(windows) - 12
    assert store.saves[-1] == log.committed_scn() and len(store.saves) == -(-rest // 5)


def test_checkpoints_by_time(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path, rounds=6)
    windows = list(ChangeLog(config.lake, "shop").read_windows())
    rarely, always = CountingStore(), CountingStore()
    DatabusClient(config.lake, "shop", Recorder(), checkpoints=rarely, bootstrap=False,
                  checkpoint_every_windows=10**9, checkpoint_every_s=3600).run()
    DatabusClient(config.lake, "shop", Recorder(), checkpoints=always, bootstrap=False,
                  checkpoint_every_windows=10**9, checkpoint_every_s=0).run()
    assert rarely.saves == [windows[-1].scn]
    assert always.saves == [w.scn for w in windows]
    with pytest.raises(ValueError, match="checkpoint_every_windows"):
        DatabusClient(config.lake, "shop", Recorder(), checkpoint_every_windows=0)


CONSUMER_SCRIPT = """
import json, os, sys
from dagster_databus.consumer.checkpoints import FileCheckpointStore
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
lake, out, die_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = 0
class Writer(DatabusConsumer):
    def on_data_event(self, event):
        global seen
        with open(out, "a") as f:
            f.write(json.dumps([event.scn.value, event.seq]) + "\\n")
        seen += 1
        if seen == die_after:
            os._exit(9)
DatabusClient(lake, "shop", Writer(), checkpoints=FileCheckpointStore(out + ".ckpt"), bootstrap=False).run()
"""


def test_at_least_once_across_a_killed_consumer_process(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path)
    out = tmp_path / "delivered.jsonl"
    run = [sys.executable, "-c", CONSUMER_SCRIPT, str(config.lake), str(out)]
    sizes = [len(w.events) for w in ChangeLog(config.lake, "shop").read_windows()]
    die_after = sizes[0] + sizes[1] + sizes[2] // 2  # in the middle of the third window
    died = subprocess.run([*run, str(die_after)], cwd=REPO, capture_output=True, text=True)
    assert died.returncode == 9, died.stderr
    checkpoint = FileCheckpointStore(f"{out}.ckpt").load()
    assert subprocess.run([*run, "0"], cwd=REPO, capture_output=True, text=True).returncode == 0
    delivered = [tuple(json.loads(line)) for line in out.read_text().splitlines()]
    log_ids = ids([e.event for e in ChangeLog(config.lake, "shop").read()])
    assert set(delivered) == set(log_ids), "nothing lost"
    repeated = [d for d in set(delivered) if delivered.count(d) > 1]
    assert repeated and all(d[0] > checkpoint.scn.value for d in repeated), "only the interrupted window again"


def test_pull_batches_ack_in_order_roll_back_and_keep_cursors(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path)
    meta = MetaManager(config.lake, "shop")
    with pytest.raises(PullError, match="not subscribed"):
        PullConsumer(config.lake, "shop", "app1")
    meta.subscribe("app1", tables=["orders"])
    with pytest.raises(SubscriptionMismatchError, match="table customers was never delivered"):
        meta.subscribe("app1", tables=["customers"])  # not silently left at orders: customers would never come
    assert [(sub.client_id, sub.tables) for sub in meta.subscriptions()] == [("app1", ("orders",))]
    client = PullConsumer(config.lake, "shop", "app1")
    b1, b2, b3 = (client.get_without_ack(batch_size=5) for _ in range(3))
    assert b1.id < b2.id < b3.id and b1.end == b2.start and b2.end == b3.start
    assert all(e.table == "orders" for b in (b1, b2, b3) for e in b.events)
    with pytest.raises(PullError, match=f"batch {b2.id} acked out of order: batch {b1.id}"):
        client.ack(b2.id)
    client.ack(b1.id)
    client.rollback(b3.id)  # b3 comes again
    again = client.get_without_ack(batch_size=5)
    assert again.start == b3.start and ids(list(again.events)) == ids(list(b3.events)) and again.id > b3.id
    client.rollback()  # b2 and the redelivered b3 go back too
    assert meta.cursor("app1") == b1.end
    restarted = PullConsumer(config.lake, "shop", "app1")  # un-acked work is redelivered after a restart
    first = restarted.get_without_ack(batch_size=5)
    assert first.start == b1.end and first.id > again.id
    restarted.ack(first.id)
    drained = []
    while (batch := restarted.get_without_ack(batch_size=50)).id != -1:
        drained += batch.events
        restarted.ack(batch.id)
    orders = [e.event for e in ChangeLog(config.lake, "shop").read(tables=["orders"])]
    assert ids(list(b1.events) + list(first.events) + drained) == ids(orders)
    assert restarted.get_without_ack(batch_size=50, timeout_s=0.3).id == -1  # nothing new: waits, then empty
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        conn.execute("INSERT INTO orders (id, customer_id, status) VALUES (99999, 1, 'new')")
    capture.run(config, "shop")
    waited = restarted.get_without_ack(batch_size=50, timeout_s=0.5)
    assert [e.key for e in waited.events] == [(99999,)]
    meta.unsubscribe("app1")
    assert not meta.has_subscribed("app1")


@pytest.mark.parametrize(("text", "expected"), [("[1,5,10]", {1, 5, 10}), ("[1-4]", {1, 2, 3, 4}),
                                                 ("[1,2,5-7]", {1, 2, 5, 6, 7})])
def test_id_lists_in_the_seeds_syntax(text: str, expected: set[int]) -> None:
    assert parse_ids(text) == expected


@pytest.mark.parametrize("bad", ["1,2", "[]", "[3-1]", "[a]", "mod:0:[1]", "mod:4:[4]", "hash:4:[1]"])
def test_bad_filters_are_refused(bad: str) -> None:
    with pytest.raises(FilterSpecError):
        PartitionFilter.parse(bad) if ":" in bad else parse_ids(bad)


@pytest.mark.parametrize("members", [["mod:3:[0]", "mod:3:[1]", "mod:3:[2]"],
                                     ["mod:10:[0-4]", "mod:10:[5,6]", "mod:10:[7-9]"],
                                     ["range:10:[0-2]", "range:10:[3-1000000]"]])
def test_a_consumer_group_with_disjoint_ids_covers_the_stream_exactly_once(tmp_path: Path, members) -> None:
    config, _ = shop_log(tmp_path)
    got: list[tuple[int, int]] = []
    for spec in members:
        recorder = Recorder()
        DatabusClient(config.lake, "shop", recorder, partition_filter=spec, bootstrap=False).run()
        got += ids(recorder.events)
        assert all(PartitionFilter.parse(spec).accepts(list(e.key)) for e in recorder.events)
    assert sorted(got) == sorted(ids([e.event for e in ChangeLog(config.lake, "shop").read()]))


class BootstrapRecorder(DatabusConsumer):
    """The (scn, seq) of each row delivered by the bootstrap, by table and key."""

    def __init__(self) -> None:
        self.positions: dict[tuple[str, tuple], tuple[int, int]] = {}
        self.bootstrapping = False

    def on_start_bootstrap(self, scn: Scn) -> None:
        self.bootstrapping = True

    def on_end_bootstrap(self, scn: Scn) -> None:
        self.bootstrapping = False

    def on_data_event(self, event: ChangeEvent) -> None:
        if self.bootstrapping:
            self.positions[(event.table, event.key)] = (event.scn.value, event.seq)


def test_a_snapshot_row_has_the_same_scn_and_seq_with_or_without_a_partition_filter(tmp_path: Path) -> None:
    create_shop(tmp_path / "shop.db")
    config = make_config(tmp_path / "lake", {"name": "shop", "kind": "sqlite", "path": str(tmp_path / "shop.db"),
                                             "tables": TABLES}, merge={"engine": "local"})
    capture.install(config, "shop")
    ShopWorkload(tmp_path / "shop.db", seed=41).run(30)
    capture.run(config, "shop")
    sync_source(None, config, "shop")  # the local engine: no Spark
    everything, filtered = BootstrapRecorder(), BootstrapRecorder()
    DatabusClient(config.lake, "shop", everything).run()
    DatabusClient(config.lake, "shop", filtered, partition_filter="mod:3:[1]").run()
    assert filtered.positions and len(filtered.positions) < len(everything.positions)
    assert {k: everything.positions[k] for k in filtered.positions} == filtered.positions


class Materializer(DatabusConsumer):
    """Applies events to an in-memory copy of each table."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple, dict]] = defaultdict(dict)
        self.pending: list[ChangeEvent] = []

    def on_start_data_event_sequence(self, scn: Scn) -> None:
        self.pending = []

    def on_data_event(self, event: ChangeEvent) -> None:
        self.pending.append(event)

    def on_end_data_event_sequence(self, scn: Scn) -> None:
        for e in self.pending:
            if e.op is Op.DELETE:
                self.tables[e.table].pop(e.key, None)
            else:
                self.tables[e.table][e.key] = dict(e.row)


def assert_materialized_equals_source(config, consumer: Materializer) -> None:
    source = open_source(config.sources[0])
    for table in TABLES:
        key = table["primary_key"]
        rows = {tuple(r[k] for k in key): r for r in read_rows(source, table["name"])}
        assert consumer.tables[table["name"]] == rows, table["name"]


def test_bootstrap_then_catch_up_after_a_retention_cut(tmp_path: Path, spark) -> None:
    config, workload = shop_log(tmp_path, rounds=2, retention={"max_bytes": 1})
    old = MemoryCheckpointStore(ConsumerCheckpoint(scn=Scn(1), epoch=ChangeLog(config.lake, "shop").manifest().epoch))
    sync_source(spark, config, "shop")
    cut = capture.enforce_retention(config, "shop")
    assert cut.removed_segments > 0 and ChangeLog(config.lake, "shop").manifest().start_scn > Scn(1)
    workload.run(20)
    capture.run(config, "shop")  # changes after the snapshots, still only in the log
    for store in (MemoryCheckpointStore(), old):  # a new consumer, and one behind the retained log
        consumer = Materializer()
        stats = DatabusClient(config.lake, "shop", consumer, checkpoints=store).run()
        assert stats.bootstrapped and stats.bootstrap_rows > 0 and stats.events > stats.bootstrap_rows
        assert_materialized_equals_source(config, consumer)
        assert DatabusClient(config.lake, "shop", Recorder(), checkpoints=store).run().events == 0


def test_retention_never_drops_what_the_snapshots_have_not_absorbed(tmp_path: Path, spark) -> None:
    config, workload = shop_log(tmp_path, rounds=2, retention={"max_bytes": 1})
    sync_source(spark, config, "shop")
    absorbed = ChangeLog(config.lake, "shop").committed_scn()
    workload.run(20)
    capture.run(config, "shop")  # not merged yet
    result = capture.enforce_retention(config, "shop")
    log = ChangeLog(config.lake, "shop")
    assert result.held_by_snapshots and log.manifest().start_scn <= absorbed
    assert all(s.last_scn > absorbed.value for s in log.manifest().segments)
    assert [e for e in log.read(since=absorbed)], "the unmerged changes are all still there"


def test_parallel_dispatch_keeps_per_key_order(tmp_path: Path) -> None:
    config, _ = shop_log(tmp_path)
    lock = threading.Lock()
    seen: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    workers: list[Recorder] = []

    class Worker(Recorder):
        def on_data_event(self, event: ChangeEvent) -> None:
            super().on_data_event(event)
            with lock:
                seen[(event.table, event.key)].append((event.scn.value, event.seq))

    def factory() -> Worker:
        w = Worker()
        workers.append(w)
        return w

    client = DatabusClient(config.lake, "shop", factory, workers=4, bootstrap=False)
    stats = client.run()
    client.close()
    log_events = [e.event for e in ChangeLog(config.lake, "shop").read()]
    assert sum(len(w.events) for w in workers) == len(log_events) == stats.events
    assert all(order == sorted(order) for order in seen.values())
    assert sum(1 for w in workers if w.events) > 1, "events were spread over workers"
    for w in workers:  # boundaries are broadcast to every worker
        assert [s for k, s in w.trace if k == "end"] == [s for k, s in workers[0].trace if k == "end"]


def test_databus_tail_prints_json_lines_and_keeps_its_checkpoint(tmp_path: Path, capsys) -> None:
    config, workload = shop_log(tmp_path)
    path = tmp_path / "databus.json"
    path.write_text(json.dumps({"lake": str(config.lake), "sources": [
        {"name": "shop", "kind": "sqlite", "path": str(tmp_path / "shop.db"), "tables": TABLES}]}))
    args = ["--config", str(path), "tail", "--source", "shop", "--tables", "orders", "--filter", "mod:2:[1]",
            "--checkpoint", str(tmp_path / "tail.ckpt"), "--from-scn", "0", "--checkpoint-every", "3"]
    assert cli(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = [e.event for e in ChangeLog(config.lake, "shop").read(tables=["orders"]) if e.event.key[0] % 2 == 1]
    assert [(int(x["scn"]), x["seq"]) for x in lines] == ids(expected) and lines
    assert cli(args) == 0 and capsys.readouterr().out == ""  # nothing new since the checkpoint
    workload.run(30)
    capture.run(config, "shop")
    assert cli(args) == 0
    more = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert more and all(int(x["scn"]) > int(lines[-1]["scn"]) for x in more)



@pytest.mark.parametrize("kind", [ConsumerError, LogicalCheckpointError, FilterSpecError, PullError, OrderingError,
                                  GroupSpecError])
def test_a_consumer_error_raised_in_a_spark_task_is_rebuilt_with_its_type(kind: type[DatabusError]) -> None:
    rebuilt = from_task(for_task(kind("the problem", "the fix", part="a")))
    assert type(rebuilt) is kind and (rebuilt.problem, rebuilt.fix, rebuilt.context) == (
        "the problem", "the fix", {"part": "a"})
