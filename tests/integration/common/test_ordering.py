"""Per-key ordering and logical tables over shards, on real change logs.

The logs come from the pipeline capturing real SQLite files: three sources, each with one shard
of a ``users`` table (``user1``/``user2``/``user3``), with colliding ids and commits interleaved
across the shards. Logs that need a shape the sources cannot produce on demand (a clock going
backwards) are written with the log's own writer.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.consumer.checkpoints import ConsumerCheckpoint, FileCheckpointStore, MemoryCheckpointStore
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer, ParallelDispatcher
from dagster_databus.consumer.filters import PartitionFilter
from dagster_databus.consumer.logical import (
    FileLogicalCheckpointStore,
    LogicalCheckpoint,
    LogicalEvent,
    LogicalTableClient,
    MemoryLogicalCheckpointStore,
    PartPosition,
)
from dagster_databus.consumer.ordering import (
    DUPLICATE,
    STALE,
    FilePositionStore,
    GroupMember,
    IdempotentSink,
    KeyRouter,
    SinkPosition,
    SinkState,
    log_lineage,
)
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.core.events import ChangeEvent, Op, Window, encode_key
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import EpochMismatchError, GroupSpecError, LogicalCheckpointError, OrderingError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.harness import SqliteHarness
from tests.support.paths import REPO

SHARDS = {"a": ("s1", "user1"), "b": ("s2", "user2"), "c": ("s3", "user3")}


# -- fixtures: three SQLite shards captured by the pipeline ---------------------------------


def users_lake(tmp_path: Path, rounds: int = 6, seed: int = 7) -> tuple[DatabusConfig, dict[str, SqliteHarness]]:
    """Three sources, one shard table each; ids collide across shards; every round writes to all
    shards in an interleaved order and then captures each source (one window per source per round)."""
    dbs: dict[str, SqliteHarness] = {}
    sources = []
    for label, (source, table) in SHARDS.items():
        db = dbs[label] = SqliteHarness(tmp_path / f"{source}.db")
        db.execute([f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, balance INTEGER NOT NULL)"])
        sources.append(db.source_config(source, [(table, ["id"])]))
    config = parse_config({
        "lake": str(tmp_path / "lake"), "sources": sources,
        "logical_tables": [{"name": "users", "shard_column": "shard", "parts": [
            {"source": source, "table": table, "shard": label} for label, (source, table) in SHARDS.items()]}],
    }, base=tmp_path)
    for source, _ in SHARDS.values():
        capture.install(config, source)
    rng = random.Random(seed)
    for _ in range(rounds):
        write_round(dbs, rng)
        for source, _ in rng.sample(list(SHARDS.values()), k=3):
            capture.run(config, source)
    return config, dbs


def write_round(dbs: dict[str, SqliteHarness], rng: random.Random, transactions: int = 12) -> None:
    for _ in range(transactions):
        label = rng.choice(sorted(dbs))
        table = SHARDS[label][1]
        statements: list[Any] = []
        for _ in range(rng.randint(1, 3)):
            key = rng.randint(1, 12)  # few keys: many changes per key, and the same ids on every shard
            action = rng.random()
            if action < 0.2:
                statements.append((f"DELETE FROM {table} WHERE id = ?", (key,)))
            elif action < 0.6:
                statements.append((f"INSERT OR IGNORE INTO {table} (id, name, balance) VALUES (?, ?, ?)",
                                   (key, f"{label}-{key}", rng.randint(0, 100))))
            else:
                statements.append((f"UPDATE {table} SET balance = balance + ?, name = ? WHERE id = ?",
                                   (rng.randint(1, 9), f"{label}-{key}-{rng.randint(0, 999)}", key)))
        dbs[label].execute(statements)


def source_rows(db: SqliteHarness, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = db.query(f"SELECT id, name, balance FROM {table}")
    return {(r[0],): {"id": r[0], "name": r[1], "balance": r[2]} for r in rows}


def logical_rows(dbs: dict[str, SqliteHarness]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The union of the shard tables, each row labelled with its shard: what the logical table holds."""
    return {(label, *key): {"shard": label, **row}
            for label, db in dbs.items() for key, row in source_rows(db, SHARDS[label][1]).items()}


def log_windows(config: DatabusConfig, source: str) -> list[Window]:
    return list(ChangeLog(config.lake, source).read_windows())


def lineage(config: DatabusConfig, source: str) -> str:
    return log_lineage(source, ChangeLog(config.lake, source).manifest())


class Table:
    """An in-memory sink table: upserts and deletes by key."""

    def __init__(self) -> None:
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.applied = 0

    def apply(self, event: Any) -> None:
        self.applied += 1
        if event.op is Op.DELETE:
            self.rows.pop(tuple(event.key), None)
        else:
            self.rows[tuple(event.key)] = dict(event.row)


class Materializer(DatabusConsumer):
    """Applies a window when it ends (a transactional sink): a rolled-back window leaves no trace."""

    def __init__(self, fail_on: set[Scn] | None = None) -> None:
        self.table = Table()
        self.pending: list[Any] = []
        self.events: list[Any] = []
        self.windows: list[Scn] = []
        self.delivered: list[list[Any]] = []  # the events of each window applied, in order
        self.fail_on = set(fail_on or ())

    def on_start_data_event_sequence(self, scn: Scn) -> None:
        self.pending = []

    def on_data_event(self, event: Any) -> None:
        self.pending.append(event)

    def on_end_data_event_sequence(self, scn: Scn) -> None:
        if scn in self.fail_on:
            self.fail_on.discard(scn)
            raise RuntimeError("the sink's commit failed once")
        for event in self.pending:
            self.table.apply(event)
        self.events += self.pending
        self.windows.append(scn)
        self.delivered.append(self.pending)


def position(event: Any) -> tuple[int, int]:
    return event.scn.value, event.seq


# -- routing ----------------------------------------------------------------------------------

ROUTER_SCRIPT = """
import json, sys
from dagster_databus.consumer.ordering import KeyRouter
keys = json.loads(sys.argv[1])
print(json.dumps({n: [KeyRouter(int(n)).member(k) for k in keys] for n in ["1", "2", "3", "5", "8"]}))
"""


def test_a_key_goes_to_the_same_member_in_every_run_and_one_hash_serves_every_router(tmp_path: Path) -> None:
    config, _ = users_lake(tmp_path, rounds=2)
    keys: list[list[Any]] = [list(w.key) for s, _ in SHARDS.values() for win in log_windows(config, s)
                             for w in win.events]
    keys += [["a", 1], ["b", 1], ["ünï", 7], ["x", "café"], [3.5], ["deadbeef", 2]]  # logical, non-ASCII, composite
    here = {str(n): [KeyRouter(n).member(k) for k in keys] for n in (1, 2, 3, 5, 8)}
    # Another process with another hash seed: Python's salted hash() would move keys; crc32 must not.
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", ROUTER_SCRIPT, json.dumps(keys)], cwd=REPO, check=True,
                             capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed})
        assert json.loads(out.stdout) == here
    for n in (2, 3, 5, 8):
        members = [GroupMember(i, n) for i in range(n)]
        dispatcher = ParallelDispatcher([DatabusConsumer() for _ in range(n)])
        try:
            for key in keys:
                owners = [m.index for m in members if m.owns(key)]
                assert owners == [KeyRouter(n).member(key)], "each key has exactly one owner"
                assert dispatcher.router.member(key) == owners[0], "the parallel dispatcher routes the same way"
                assert GroupMember(owners[0], n).owns_encoded(encode_key(key)), "and so does the log's stored key"
                if not (len(key) == 1 and isinstance(key[0], int)):  # mod filters bucket one int key by value
                    assert PartitionFilter.parse(f"mod:{n}:[{owners[0]}]").accepts(key)
        finally:
            dispatcher.close()
    assert len(set(here["3"])) == 3, "keys spread over the members"


@pytest.mark.parametrize("bad", ["3/3", "-1/2", "1", "a/b", "0/0"])
def test_impossible_group_members_are_refused(bad: str) -> None:
    with pytest.raises(GroupSpecError):
        GroupMember.parse(bad)


def test_a_consumer_group_gets_each_key_on_one_member_in_log_order(tmp_path: Path) -> None:
    config, _ = users_lake(tmp_path)
    log_events = [e for w in log_windows(config, "s1") for e in w.events]
    owner: dict[tuple[Any, ...], int] = {}
    got = []
    for i in range(3):
        consumer = Materializer()
        DatabusClient(config.lake, "s1", consumer, group=f"{i}/3", bootstrap=False).run()
        got += consumer.events
        per_key: dict[tuple[Any, ...], list[tuple[int, int]]] = defaultdict(list)
        for event in consumer.events:
            assert owner.setdefault(event.key, i) == i, f"key {event.key} reached two members"
            per_key[event.key].append(position(event))
        assert all(p == sorted(p) for p in per_key.values()), "per-key order kept on the member"
    assert sorted(map(position, got)) == sorted(map(position, log_events))
    assert len(set(owner.values())) == 3


# -- the sink guard ---------------------------------------------------------------------------


def last_position_per_key(events: Iterable[ChangeEvent]) -> dict[tuple[str, tuple[Any, ...]], tuple[int, int]]:
    last: dict[tuple[str, tuple[Any, ...]], tuple[int, int]] = {}
    for e in events:
        last[(e.table, e.key)] = max(last.get((e.table, e.key), (-1, -1)), position(e))
    return last


def test_replayed_and_duplicated_windows_are_discarded_and_the_sink_ends_equal_to_the_source(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    windows = log_windows(config, "s1")
    events = [e for w in windows for e in w.events]
    table = Table()
    sink = IdempotentSink(table.apply, FilePositionStore(tmp_path / "positions.json"))
    line = lineage(config, "s1")
    assert all(sink.offer(e, line) for e in events)  # in order once: nothing is old
    assert sink.discards == {DUPLICATE: 0, STALE: 0}
    # Inject: earlier windows again, in a scrambled order, some twice.
    rng = random.Random(3)
    injected = rng.choices(windows, k=2 * len(windows))
    last = last_position_per_key(events)
    expected = Counter(DUPLICATE if position(e) == last[(e.table, e.key)] else STALE
                       for w in injected for e in w.events)
    assert expected[STALE] and expected[DUPLICATE]
    assert not any(sink.offer(e, line) for w in injected for e in w.events)
    assert sink.discards == {DUPLICATE: expected[DUPLICATE], STALE: expected[STALE]}
    assert table.rows == source_rows(dbs["a"], "user1") and table.applied == len(events)
    sink.commit()
    # A restarted sink reads its positions back: the same replays are still discarded.
    again = Table()
    restarted = IdempotentSink(again.apply, FilePositionStore(tmp_path / "positions.json"))
    assert restarted.discards == sink.discards and restarted.keys_held == len(last)
    assert not any(restarted.offer(e, line) for w in windows for e in w.events)
    assert again.applied == 0


def test_windows_delivered_in_a_shuffled_order_end_with_the_source_rows(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path, rounds=8, seed=11)
    windows = log_windows(config, "s2")
    events = [e for w in windows for e in w.events]
    for seed in range(5):
        order = windows[:]
        random.Random(seed).shuffle(order)
        table = Table()
        sink = IdempotentSink(table.apply)
        for w in order:
            for e in w.events:  # each window's own events stay in order: the log delivers windows whole
                sink.offer(e, lineage(config, "s2"))
        # Only late older changes are dropped (a deleted key's tombstone drops its late insert too).
        assert table.rows == source_rows(dbs["b"], "user2")
        assert sink.discards[DUPLICATE] == 0 and table.applied + sink.discards[STALE] == len(events)
    assert sink.discarded > 0


def test_pull_batches_rolled_back_after_they_were_written_are_discarded_on_redelivery(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    MetaManager(config.lake, "s3").subscribe("sink")
    consumer = PullConsumer(config.lake, "s3", "sink")
    table = Table()
    sink = IdempotentSink(table.apply, FilePositionStore(tmp_path / "s3.positions"))
    line = lineage(config, "s3")
    b1, b2 = consumer.get_without_ack(batch_size=8), consumer.get_without_ack(batch_size=8)
    for e in (*b1.events, *b2.events):  # written through to the sink...
        sink.offer(e, line)
    consumer.ack(b1.id)
    consumer.rollback(b2.id)  # ...but the ack of b2 never happened: it comes again
    sink.commit()
    redelivered = 0
    while (batch := consumer.get_without_ack(batch_size=8)).id != -1:
        for e in batch.events:
            sink.offer(e, line)
        redelivered += sum(1 for e in batch.events if position(e) <= position(b2.events[-1]))
        consumer.ack(batch.id)
    assert redelivered == len(b2.events) and sink.discards == {DUPLICATE: len(b2.events), STALE: 0}
    assert table.rows == source_rows(dbs["c"], "user3")


def test_client_dedupe_discards_a_restart_from_an_older_checkpoint_but_not_a_rolled_back_window(
        tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    windows = log_windows(config, "s1")
    positions = tmp_path / "sink.positions"
    first = Materializer(fail_on={windows[2].scn})  # the sink's commit of window 3 fails once
    store = FileCheckpointStore(tmp_path / "client.ckpt")
    stats = DatabusClient(config.lake, "s1", first, checkpoints=store, bootstrap=False,
                          dedupe=IdempotentSink(store=FilePositionStore(positions))).run()
    # The rolled-back window was not applied, so its redelivery passed the guard.
    assert stats.rollbacks == 1 and stats.discarded == 0 and windows[2].scn in first.windows
    assert first.table.rows == source_rows(dbs["a"], "user1")
    # Restart from an older checkpoint (a restored checkpoint file, say) with the same sink state.
    older = windows[1].scn
    replayed = [e for w in windows if w.scn > older for e in w.events]
    second = Materializer()
    second.table.rows = dict(first.table.rows)
    sink = IdempotentSink(store=FilePositionStore(positions))
    stats = DatabusClient(config.lake, "s1", second, checkpoints=MemoryCheckpointStore(ConsumerCheckpoint(
        scn=older, epoch=ChangeLog(config.lake, "s1").manifest().epoch)), bootstrap=False, dedupe=sink).run()
    assert second.events == [] and stats.events == 0 and stats.discarded == len(replayed)
    last = last_position_per_key(e for w in windows for e in w.events)
    assert sink.discards[DUPLICATE] == sum(1 for e in replayed if position(e) == last[(e.table, e.key)])
    assert second.table.rows == source_rows(dbs["a"], "user1")


def test_a_crash_between_the_sink_commit_and_the_checkpoint_redelivers_a_window_the_sink_drops(
        tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    windows = log_windows(config, "s2")

    class CrashingStore(MemoryCheckpointStore):
        def save(self, checkpoint: ConsumerCheckpoint) -> None:
            if checkpoint.scn == windows[3].scn and not getattr(self, "crashed", False):
                self.crashed = True
                raise OSError("killed before the checkpoint was written")
            super().save(checkpoint)

    store = CrashingStore()
    consumer = Materializer()
    positions = FilePositionStore(tmp_path / "p.json")
    with pytest.raises(OSError):
        DatabusClient(config.lake, "s2", consumer, checkpoints=store, bootstrap=False,
                      dedupe=IdempotentSink(store=positions)).run()
    assert store.load().scn == windows[2].scn and consumer.windows[-1] == windows[3].scn
    stats = DatabusClient(config.lake, "s2", consumer, checkpoints=store, bootstrap=False,
                          dedupe=IdempotentSink(store=positions)).run()
    assert consumer.windows.count(windows[3].scn) == 1, "the applied window did not reach the consumer again"
    assert stats.discarded == len(windows[3].events)
    assert consumer.table.rows == source_rows(dbs["b"], "user2")


SCHEMA = TableSchema("clock", "t", (Column("id", ColumnType("long")), Column("v", ColumnType("string"))), ("id",))


def test_a_source_clock_going_backwards_does_not_discard_newer_changes(tmp_path: Path) -> None:
    def event(scn: int, seq: int, op: Op, v: str, ts: int) -> ChangeEvent:
        return ChangeEvent(Scn(scn), seq, "t", op, (1,), {"id": 1, "v": v}, ts)

    windows = [
        Window(Scn(10), (event(10, 0, Op.INSERT, "first", 5_000),)),
        # The clock stepped back 3 s: newer SCNs, older commit times.
        Window(Scn(20), (event(20, 0, Op.UPDATE, "second", 2_000),)),
        # One transaction, two changes of the key at one SCN (as MySQL windows have): seq orders them.
        Window(Scn(30), (event(30, 0, Op.UPDATE, "third", 1_000), event(30, 1, Op.UPDATE, "fourth", 1_000))),
    ]
    log = ChangeLog(tmp_path / "lake", "clock")
    with log.writer() as writer:
        writer.register_schemas([SCHEMA])
        writer.append(windows, "e1")
    stored = [e for w in log.read_windows() for e in w.events]
    assert [e.commit_ts_ms for e in stored] == [5_000, 2_000, 1_000, 1_000]  # (commit time, offset) would drop 3
    consumer = Materializer()
    stats = DatabusClient(tmp_path / "lake", "clock", consumer, bootstrap=False, dedupe=True).run()
    assert stats.discarded == 0 and [e.row["v"] for e in consumer.events] == ["first", "second", "third", "fourth"]
    assert consumer.table.rows == {(1,): {"id": 1, "v": "fourth"}}
    # Replaying the whole log now drops everything: positions, not clocks, decide.
    sink = IdempotentSink()
    line = log_lineage("clock", log.manifest())
    assert [sink.offer(e, line) for e in stored] == [True, True, True, True]
    assert [sink.offer(e, line) for e in stored] == [False, False, False, False]
    assert sink.discards == {DUPLICATE: 1, STALE: 3}


def test_positions_of_unrelated_logs_are_never_compared() -> None:
    change = ChangeEvent(Scn(5), 0, "t", Op.INSERT, (1,), {"id": 1}, 0)
    sink = IdempotentSink()
    assert sink.offer(change, "src@e1")
    with pytest.raises(EpochMismatchError, match="bootstrapped"):
        sink.offer(change, "src@e2")  # the same source, restarted: SCN 5 of e2 is not SCN 5 of e1
    with pytest.raises(OrderingError, match="different change logs"):
        sink.offer(change, "other@e1")
    assert sink.forget("src", keep="src@e2") == 1
    assert sink.offer(change, "src@e2") and sink.held("t", (1,)) == SinkPosition("src@e2", Scn(5), 0)
    assert SinkPosition("x@1", Scn(7), 0, commit_ts_ms=1) == SinkPosition("x@1", Scn(7), 0, commit_ts_ms=99)
    assert SinkPosition("x@1", Scn(7), 0) < SinkPosition("x@1", Scn(7), 1) < SinkPosition("x@1", Scn(8), 0)


# -- logical tables ---------------------------------------------------------------------------


def logical_client(config: DatabusConfig, consumer: Any, **options: Any) -> LogicalTableClient:
    return LogicalTableClient.from_config(config, "users", consumer, **options)


def test_the_logical_stream_is_the_union_of_the_shards_each_in_its_own_scn_order(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    consumer = Materializer()
    store = MemoryLogicalCheckpointStore()
    stats = logical_client(config, consumer, checkpoints=store).run()
    assert consumer.table.rows == logical_rows(dbs)
    events: list[LogicalEvent] = consumer.events
    assert all(isinstance(e, LogicalEvent) and e.table == "users" and e.row["shard"] == e.part == e.key[0]
               for e in events)
    expected = {label: [(position(e), e.op, e.row) for w in log_windows(config, source) for e in w.events]
                for label, (source, _) in SHARDS.items()}
    for label in SHARDS:
        mine = [(position(e), e.op, {k: v for k, v in e.row.items() if k != "shard"})
                for e in events if e.part == label]
        assert mine == expected[label], f"part {label}: every event once, in its log's order"
        scns = [position(e) for e in events if e.part == label]
        assert all(a < b for a, b in itertools.pairwise(scns)), "strictly increasing per part"
    parts_in_order = [e.part for e in events]
    assert parts_in_order != sorted(parts_in_order), "parts are interleaved, not one after another"
    assert all(len({e.part for e in w}) == 1 for w in consumer.delivered), "a window holds one part's changes"
    commit_order = [w[-1].commit_ts_ms for w in consumer.delivered]
    assert commit_order == sorted(commit_order), "part windows interleaved by commit time"
    assert stats.positions == {label: ChangeLog(config.lake, s).committed_scn() for label, (s, _) in SHARDS.items()}
    assert store.load().scns() == stats.positions
    assert logical_client(config, Materializer(), checkpoints=store).run().events == 0


LOGICAL_SCRIPT = """
import json, os, sys
from dagster_databus.config import parse_config
from dagster_databus.consumer.client import DatabusConsumer
from dagster_databus.consumer.logical import FileLogicalCheckpointStore, LogicalTableClient
config = parse_config(json.loads(sys.argv[1]), base=os.getcwd())
out, die_after = sys.argv[2], int(sys.argv[3])
seen = 0
class Writer(DatabusConsumer):
    def on_data_event(self, event):
        global seen
        with open(out, "a") as f:
            f.write(json.dumps([event.part, event.scn.value, event.seq]) + "\\n")
        seen += 1
        if seen == die_after:
            os._exit(9)
LogicalTableClient.from_config(config, "users", Writer(), checkpoints=FileLogicalCheckpointStore(out + ".ckpt")).run()
"""


def test_a_killed_logical_consumer_resumes_each_part_at_its_own_checkpoint(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    raw = {"lake": str(config.lake), "sources": [s.model_dump(mode="json", exclude_none=True) for s in config.sources],
           "logical_tables": [t.model_dump(mode="json") for t in config.logical_tables]}
    out = tmp_path / "delivered.jsonl"
    run = [sys.executable, "-c", LOGICAL_SCRIPT, json.dumps(raw), str(out)]
    everything = [(label, e.scn.value, e.seq) for label, (s, _) in SHARDS.items()
                  for w in log_windows(config, s) for e in w.events]
    died = subprocess.run([*run, str(len(everything) // 2)], cwd=REPO, capture_output=True, text=True)
    assert died.returncode == 9, died.stderr
    at_kill = FileLogicalCheckpointStore(f"{out}.ckpt").load().scns()
    assert len(set(at_kill.values())) > 1, "the parts stand at different SCNs"
    assert subprocess.run([*run, "0"], cwd=REPO, capture_output=True, text=True).returncode == 0
    delivered = [tuple(json.loads(line)) for line in out.read_text().splitlines()]
    assert set(delivered) == set(everything), "no gap in any part"
    repeated = {d for d in delivered if delivered.count(d) > 1}
    assert repeated, "the interrupted window came again"
    # Duplicates only within the one window that was interrupted: one part, above its checkpoint, one window.
    (part,) = {d[0] for d in repeated}
    source = SHARDS[part][0]
    (window,) = [w for w in log_windows(config, source)
                 if any(p == part and w.first_scn.value <= s <= w.scn.value for p, s, _ in repeated)]
    assert window.first_scn.value > at_kill[part].value
    assert all(window.first_scn.value <= s <= window.scn.value for _, s, _ in repeated)
    # New changes later: only they are delivered, from each part's own position.
    write_round(dbs, random.Random(99))
    for source, _ in SHARDS.values():
        capture.run(config, source)
    before = len(delivered)
    assert subprocess.run([*run, "0"], cwd=REPO, capture_output=True, text=True).returncode == 0
    new = [tuple(json.loads(line)) for line in out.read_text().splitlines()][before:]
    assert new and all(s > at_kill[p].value for p, s, _ in new) and not set(new) & set(delivered)
    assert FileLogicalCheckpointStore(f"{out}.ckpt").load().scns() == {
        label: ChangeLog(config.lake, s).committed_scn() for label, (s, _) in SHARDS.items()}


def test_a_logical_consumer_group_of_three_gets_each_key_on_one_member(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    owner: dict[tuple[Any, ...], int] = {}
    members = []
    for i in range(3):
        consumer = Materializer()
        logical_client(config, consumer, group=GroupMember(i, 3)).run()
        members.append(consumer)
        for event in consumer.events:
            assert owner.setdefault(event.key, i) == i, f"logical key {event.key} reached two members"
        per_part = defaultdict(list)
        for event in consumer.events:
            per_part[event.part].append(position(event))
        assert all(all(a < b for a, b in itertools.pairwise(p)) for p in per_part.values())
    union = {k: v for m in members for k, v in m.table.rows.items()}
    assert union == logical_rows(dbs) and sum(len(m.table.rows) for m in members) == len(union)
    assert len(set(owner.values())) == 3
    # The same physical id on different shards is a different logical key and may go elsewhere.
    assert any(owner.get(("a", i)) != owner.get(("b", i)) for i in range(1, 13) if ("a", i) in owner)


def test_a_logical_consumer_with_dedupe_drops_a_replay_from_an_older_vector(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path)
    store = MemoryLogicalCheckpointStore()
    positions = FilePositionStore(tmp_path / "users.positions")
    consumer = Materializer(fail_on={log_windows(config, "s2")[1].scn})  # a rollback on the way: not a discard
    stats = logical_client(config, consumer, checkpoints=store, dedupe=IdempotentSink(store=positions)).run()
    assert stats.rollbacks == 1 and stats.discarded == 0 and consumer.table.rows == logical_rows(dbs)
    # Roll part "b" back two windows and "c" to its start; "a" stays.
    b = log_windows(config, "s2")
    vector = store.load()
    older = LogicalCheckpoint("users", {**vector.parts,
                                        "b": PartPosition("s2", "user2", ConsumerCheckpoint(b[-3].scn)),
                                        "c": PartPosition("s3", "user3", ConsumerCheckpoint(Scn(0)))})
    replay = sum(len(w.events) for w in b[-2:]) + sum(len(w.events) for w in log_windows(config, "s3"))
    again = Materializer()
    again.table.rows = dict(consumer.table.rows)
    stats = logical_client(config, again, checkpoints=MemoryLogicalCheckpointStore(older),
                           dedupe=IdempotentSink(store=positions)).run()
    assert again.events == [] and stats.discarded == replay
    assert again.table.rows == logical_rows(dbs)


def test_a_part_checkpoint_the_log_no_longer_holds_is_refused_with_the_fix(tmp_path: Path) -> None:
    config, dbs = users_lake(tmp_path, rounds=3)
    store = MemoryLogicalCheckpointStore()
    logical_client(config, Materializer(), checkpoints=store).run()
    kept = store.load()
    moved = LogicalCheckpoint("users", {**kept.parts, "c": PartPosition("s1", "user1", kept.parts["c"].checkpoint)})
    with pytest.raises(LogicalCheckpointError, match=r"part 'c'.* is for s1.user1, but the part is now s3.user3"):
        logical_client(config, Materializer(), checkpoints=MemoryLogicalCheckpointStore(moved)).run()
    ahead = LogicalCheckpoint("users", {**kept.parts, "c": PartPosition("s3", "user3", ConsumerCheckpoint(
        Scn(10**6), epoch=kept.parts["c"].checkpoint.epoch))})
    with pytest.raises(LogicalCheckpointError, match=r"part 'c'.*past the end .* the log was restarted"):
        logical_client(config, Materializer(), checkpoints=MemoryLogicalCheckpointStore(ahead)).run()
    write_round(dbs, random.Random(5))
    capture.restart(config, "s2")  # the log of part b restarts at the source's current position
    with pytest.raises(LogicalCheckpointError, match=r"part 'b' \(s2.user2\).*now starts after") as err:
        logical_client(config, Materializer(), checkpoints=MemoryLogicalCheckpointStore(kept)).run()
    assert "snapshot" in err.value.fix and err.value.context["part"] == "b"
    foreign = LogicalCheckpoint("users", {**kept.parts, "a": PartPosition("s1", "user1", ConsumerCheckpoint(
        kept.parts["a"].scn, epoch="restored-elsewhere"))})
    with pytest.raises(LogicalCheckpointError, match=r"part 'a'.*epoch restored-elsewhere"):
        logical_client(config, Materializer(), checkpoints=MemoryLogicalCheckpointStore(foreign)).run()
    assert store.load() == kept, "nothing was delivered or saved"


def test_a_bootstrapping_client_starts_its_sink_positions_afresh(tmp_path: Path, spark) -> None:
    config, dbs = users_lake(tmp_path, rounds=3)
    sync_source(spark, config, "s1")
    # Positions left from earlier logs of s1, restarted since: one of another epoch, and one that began
    # in the same epoch as today's log (a fail-back, then a bootstrap) whose SCNs reached higher.
    stale = SinkState({("user1", encode_key([k])): SinkPosition("s1@gone" if k % 2 else lineage(config, "s1"),
                                                                  Scn(10**9), 0) for k in range(1, 13)})
    stale.positions[("user2", "[1]")] = SinkPosition("s2@kept", Scn(5), 0)
    positions = FilePositionStore(tmp_path / "p.json")
    positions.save(stale)
    consumer = Materializer()
    stats = DatabusClient(config.lake, "s1", consumer, dedupe=IdempotentSink(store=positions)).run()
    assert stats.bootstrapped and stats.discarded == 0 and consumer.table.rows == source_rows(dbs["a"], "user1")
    held = positions.load().positions
    assert {p.lineage for k, p in held.items() if k[0] == "user1"} == {lineage(config, "s1")}
    assert held[("user2", "[1]")] == SinkPosition("s2@kept", Scn(5), 0), "other sources' positions stay"


def test_a_shard_column_the_physical_tables_have_is_used_as_it_is(tmp_path: Path) -> None:
    dbs = {name: SqliteHarness(tmp_path / f"{name}.db") for name in ("east", "west")}
    for db in dbs.values():
        db.execute(["CREATE TABLE accounts (region TEXT NOT NULL, id INTEGER NOT NULL, v INTEGER, "
                    "PRIMARY KEY (region, id))"])
    config = parse_config({
        "lake": str(tmp_path / "lake"),
        "sources": [db.source_config(name, [("accounts", ["region", "id"])]) for name, db in dbs.items()],
        "logical_tables": [{"name": "all_accounts", "shard_column": "region",
                            "parts": [{"source": name, "table": "accounts"} for name in dbs]}],
    }, base=tmp_path)
    for name, db in dbs.items():
        capture.install(config, name)
        db.execute([(f"INSERT INTO accounts VALUES ('{name}', ?, ?)", (i, i * 10)) for i in (1, 2)])
        db.execute([("UPDATE accounts SET v = v + 1 WHERE id = 1", ())])
        capture.run(config, name)
    consumer = Materializer()
    LogicalTableClient.from_config(config, "all_accounts", consumer).run()
    assert consumer.table.rows == {(name, i): {"region": name, "id": i, "v": i * 10 + (i == 1)}
                                   for name in dbs for i in (1, 2)}
    assert {e.part for e in consumer.events} == {"east.accounts", "west.accounts"}
