"""The in-process reduce: newest change per key in bounded memory, the same rows whether it spills or not,
and the same rows as the Spark reduce over a real change log."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dagster_databus import capture
from dagster_databus.config import SparkConfig
from dagster_databus.core import progress as progress_module
from dagster_databus.core.event_columns import CHANGE_META
from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaSnapshot, conform_changes, merge_with_delta_rs
from dagster_databus.dataplane.reduce import NewestPerKey, PieceEdges
from dagster_databus.engines import local as local_engine
from dagster_databus.engines.local import apply_changes, reduced_in_process
from dagster_databus.errors import ChangeLogCorruptError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.columns import table_changes
from dagster_databus.spark.delta_jars import may_commit_with_delta_spark
from dagster_databus.spark.frames import reduce_latest
from dagster_databus.spark.logread import read_changes
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import SqliteHarness, make_config

SCHEMA = pa.schema([("region", pa.string()), ("id", pa.int64()), ("v", pa.float64()),
                    *(pa.field(n, t) for n, t in CHANGE_META)])
SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def random_changes(seed: int, events: int = 5_000, per_batch: int = 700) -> list[pa.RecordBatch]:
    """Events in log order over a two-column key, windows of 1..9 events that straddle batch edges."""
    rng = random.Random(seed)
    rows, scn, seq, window = [], 0, 0, 0
    for _ in range(events):
        if seq == 0 or rng.random() < 0.2:
            scn += rng.randint(1, 5)
            window, seq = scn, 0
        seq += 1
        region, key = rng.choice(["eu", "us", "日本", ""]), rng.randint(1, 400)
        rows.append({"region": region, "id": key, "v": rng.random(), "__scn": scn, "__seq": seq,
                     "__window_scn": window, "__op": rng.choice("iud"), "__commit_ts_ms": scn * 10,
                     "__partition": hash((region, key)) & 0xFFFF})
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return table.to_batches(max_chunksize=per_batch)


def newest_by_hand(batches: list[pa.RecordBatch]) -> dict[tuple, dict]:
    newest: dict[tuple, dict] = {}
    for row in pa.Table.from_batches(batches).to_pylist():
        key = (row["region"], row["id"])
        if key not in newest or (row["__scn"], row["__seq"]) > (newest[key]["__scn"], newest[key]["__seq"]):
            newest[key] = row
    return newest


def reduced(reducer: NewestPerKey) -> dict[tuple, dict]:
    out = pa.Table.from_batches(list(reducer.results()), SCHEMA).to_pylist()
    keys = [(r["region"], r["id"]) for r in out]
    assert len(set(keys)) == len(keys)
    return dict(zip(keys, out, strict=True))


@pytest.mark.parametrize("budget", [1 << 30, 1], ids=["in-memory", "spilled"])
def test_the_newest_event_of_every_key_survives_whether_or_not_it_spills(budget: int, tmp_path: Path) -> None:
    batches = random_changes(seed=3)
    reducer = NewestPerKey(SCHEMA, ["region", "id"], budget_bytes=budget, spill_dir=tmp_path).extend(batches)
    assert (reducer.stats.spilled_bytes > 0) == (budget == 1)
    assert reduced(reducer) == newest_by_hand(batches)
    table = pa.Table.from_batches(batches)
    assert reducer.stats.events == table.num_rows
    assert reducer.stats.events_by_op == {op: table["__op"].to_pylist().count(op) for op in "iud"}
    assert reducer.stats.windows == len(set(table["__window_scn"].to_pylist()))
    assert list(tmp_path.iterdir()) == []  # spill files removed once read


def test_rows_out_of_log_order_are_still_reduced_by_scn_then_seq() -> None:
    batches = random_changes(seed=5, events=2_000)
    shuffled = pa.Table.from_batches(batches).take(pa.array(random.Random(1).sample(range(2_000), 2_000)))
    reducer = NewestPerKey(SCHEMA, ["region", "id"]).extend(shuffled.to_batches(max_chunksize=333))
    assert reduced(reducer) == newest_by_hand(batches)


def test_spill_files_go_when_the_reduce_is_abandoned(tmp_path: Path) -> None:
    reducer = NewestPerKey(SCHEMA, ["region", "id"], budget_bytes=1, spill_dir=tmp_path)
    reducer.extend(random_changes(seed=7, events=500))
    assert any(tmp_path.iterdir())
    results = reducer.results()
    next(results)
    results.close()
    assert list(tmp_path.iterdir()) == []


def test_in_process_and_spark_reduce_give_the_same_rows_from_a_real_log(tmp_path: Path, spark) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.create_shop()
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP, poll={"chunk_rows": 50}))
    workload = source.workload(seed=4)
    workload.run(20)
    cycle(config, spark)
    applied = {t: DeltaSnapshot(config.lake, "shop", t).applied_scn() for t, _ in SHOP}
    workload.run(120, rollback_every=5)
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    until = log.committed_scn()
    for table, key in SHOP:
        schema = log.schemas.latest(table)[1]
        in_spark = conform_changes(reduce_latest(spark, read_changes(spark, config, "shop", table, applied[table],
                                                                     until), key).toArrow(),
                                   schema.arrow(with_meta=True))
        with reduced_in_process(log, schema, applied[table], until, memory_bytes=1,
                                spill_dir=tmp_path) as (changes, stats):
            assert stats.spilled_bytes > 0
            in_process = changes.read_all()
        assert in_process.schema == in_spark.schema
        assert sorted(in_process.to_pylist(), key=lambda r: [r[k] for k in key]) == \
            sorted(in_spark.to_pylist(), key=lambda r: [r[k] for k in key])
        assert stats.events == sum(b.num_rows for b in table_changes(log, schema, applied[table], until)) > 0
    # The spilled stream merged into the snapshots leaves them equal to the source.
    for table, _ in SHOP:
        schema = log.schemas.latest(table)[1]
        with reduced_in_process(log, schema, applied[table], until, memory_bytes=1) as (changes, _):
            counts = apply_changes(DeltaSnapshot(config.lake, "shop", table), schema, changes, until)
        assert counts is not None and counts.inserted + counts.updated + counts.deleted > 0
    assert_snapshots_match(config)
    assert all(DeltaSnapshot(config.lake, "shop", t).applied_scn() == until for t, _ in SHOP)
    assert list(tmp_path.glob("databus-reduce-*")) == []


def test_a_replayed_range_streams_nothing_into_the_snapshot(tmp_path: Path, spark, monkeypatch) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)",
                    ("INSERT INTO items VALUES (?, ?)", (1, "a"))])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    cycle(config, spark)
    source.execute([("UPDATE items SET name = ? WHERE id = ?", ("b", 1))])
    cycle(config, spark)
    snap = DeltaSnapshot(config.lake, "shop", "items")
    version, log = snap.version(), ChangeLog(config.lake, "shop")
    schema = log.schemas.latest("items")[1]
    with reduced_in_process(log, schema, Scn.BEGINNING, log.committed_scn(), memory_bytes=1 << 20) as (changes, _):
        assert apply_changes(snap, schema, changes, log.committed_scn()) is None
    assert snap.version() == version and snap.read().to_pylist() == [{"id": 1, "name": "b"}]

    # The replayed range again, now ending in a change the snapshot has not applied: past the early return,
    # the stream reaches the MERGE holding that change alone (the replayed update of id 1 is dropped).
    source.execute(["INSERT INTO items VALUES (2, 'c')"])
    capture.run(config, "shop")
    streamed: list[dict] = []

    def merge_seen(target, key, changes, props, **options):
        rows = changes.read_all() if isinstance(changes, pa.RecordBatchReader) else changes
        streamed.extend(rows.to_pylist())
        return merge_with_delta_rs(target, key, rows, props, **options)

    monkeypatch.setattr(local_engine, "merge_with_delta_rs", merge_seen)
    log = ChangeLog(config.lake, "shop")
    with reduced_in_process(log, schema, Scn.BEGINNING, log.committed_scn(), memory_bytes=1 << 20) as (changes, _):
        counts = apply_changes(snap, schema, changes, log.committed_scn())
    assert [r["id"] for r in streamed] == [2] and (counts.inserted, counts.updated, counts.deleted) == (1, 0, 0)
    assert sorted(snap.read().to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "name": "b"}, {"id": 2, "name": "c"}]


def test_the_local_engine_never_starts_spark(tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)",
                    ("INSERT INTO items VALUES (?, ?)", (1, "a"))])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"engine": "local"})

    def no_spark() -> None:
        raise AssertionError("the local engine asked for a Spark session")

    for statement in ["UPDATE items SET name = 'b' WHERE id = 1", "INSERT INTO items VALUES (2, 'c')"]:
        capture.install(config, "shop")
        capture.run(config, "shop")
        results = sync_source(no_spark, config, "shop")
        assert results[0].engine == "local"
        source.execute([statement])
    capture.run(config, "shop")
    assert sync_source(no_spark, config, "shop")[0].events == 1
    assert_snapshots_match(config)


def test_configured_delta_jars_make_the_merge_ask_for_the_session(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "delta-spark_2.13-4.0.0.jar").write_bytes(b"")
    assert not may_commit_with_delta_spark(SparkConfig())
    assert may_commit_with_delta_spark(SparkConfig(delta_jars=jars))
    assert may_commit_with_delta_spark(SparkConfig(conf={"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"}))


def test_a_damaged_segment_is_named_not_misread(tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"]
                   + [("INSERT INTO items VALUES (?, ?)", (i, f"name {i}")) for i in range(500)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    capture.install(config, "shop")
    source.execute([("UPDATE items SET name = ? WHERE id = ?", (f"new {i}", i)) for i in range(500)])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    schema = log.schemas.latest("items")[1]
    assert sum(b.num_rows for b in table_changes(log, schema, Scn.BEGINNING)) == 500
    segment = log.manifest().segments[-1]
    path = log.segments_dir / segment.file
    data = bytearray(path.read_bytes())
    data[-40:-20] = bytes(20)  # inside the last block's compressed records or its sync marker
    path.write_bytes(bytes(data))
    with pytest.raises(ChangeLogCorruptError, match=segment.file):
        list(table_changes(log, schema, Scn.BEGINNING))
    path.unlink()
    with pytest.raises(ChangeLogCorruptError, match="missing"):
        list(table_changes(log, schema, Scn.BEGINNING))


def test_long_steps_report_progress_with_counts_and_rates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local engine's steps, and capture and reconciliation, report counts and rates as they go."""
    monkeypatch.setattr(progress_module, "EVERY_S", 0.0)  # every batch reports, as a long step's would every 10 s
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"]
                   + [("INSERT INTO items VALUES (?, ?)", (i, "x")) for i in range(120_000)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"engine": "local"})
    capture.install(config, "shop")
    lines: list[str] = []
    sync_source(lambda: None, config, "shop", progress=lines.append)  # type: ignore[arg-type,return-value]
    booted = [line for line in lines if line.startswith("items: bootstrapping: ")]
    assert [int(line.split()[2].replace(",", "")) for line in booted] == [50_000, 100_000, 120_000]
    assert all(line.endswith("rows/s") for line in booted)
    source.execute([("UPDATE items SET name = ? WHERE id < ?", ("y", 70_000))])
    capture.run(config, "shop", progress=lines.append)
    [appended] = [line for line in lines if line.startswith("shop: appended SCN ")]
    assert re.fullmatch(r"shop: appended SCN 1\.\.70000 \(1 windows, 70000 events\); 70,000 events in "
                        r"[0-9.]+s, [0-9,]+ events/s", appended), appended
    lines.clear()
    sync_source(lambda: None, config, "shop", progress=lines.append)  # type: ignore[arg-type,return-value]
    reading = [line for line in lines if line.startswith("items: reading and reducing changes: ")]
    assert reading[-1].startswith("items: reading and reducing changes: 70,000 of ~70,000 events (100%) in ")
    assert any(line.startswith("items: merging: 70,000 keys in ") for line in lines), lines
    lines.clear()
    assert reconcile_table(config, config.source("shop"), "items", lines.append).equal
    source_side = [line for line in lines if line.startswith("items: fingerprinting the source: ")]
    snapshot_side = [line for line in lines if line.startswith("items: fingerprinting the snapshot: ")]
    assert source_side[-1].startswith("items: fingerprinting the source: 120,000 rows in ")
    assert snapshot_side[-1].startswith("items: fingerprinting the snapshot: 120,000 of ~120,000 rows (100%) in ")


def test_spark_steps_report_the_tasks_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark) -> None:
    monkeypatch.setattr(progress_module, "EVERY_S", 0.05)
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"]
                   + [("INSERT INTO items VALUES (?, ?)", (i, "x")) for i in range(20_000)])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]),
                         merge={"file_rows": 2_000})
    capture.install(config, "shop")
    lines: list[str] = []
    sync_source(spark, config, "shop", progress=lines.append)
    # Ten ranges on the test cluster's two slots: two tasks of five (``spark.jobs.range_tasks``).
    assert "items: bootstrapping in 10 key range(s), read by 2 Spark task(s)" in lines, lines
    done = [line for line in lines if re.fullmatch(r"items: bootstrapping: \d+ of \d+ Spark tasks done", line)]
    assert done, lines
    assert any(re.fullmatch(r"items: bootstrapped 20,000 rows in 10 file\(s\) at SCN \d+", line) for line in lines)
    source.execute([("UPDATE items SET name = ? WHERE id < ?", ("y", 3_000))])
    capture.run(config, "shop")
    lines.clear()
    sync_source(spark, config, "shop", progress=lines.append)
    assert any(re.fullmatch(r"items: merging: \d+ of \d+ Spark tasks done", line) for line in lines), lines
    assert any(line.startswith("items: merged 3,000 events in 1 windows: 0 inserted, 3,000 updated, 0 deleted; "
                               "rewrote 2 of 10 file(s)") for line in lines), lines


def _events(*windows: str) -> pa.Table:
    """Windows of events on one key column, each event ``<op><key>`` (``i5``: insert key 5), SCN = window number."""
    rows = []
    for w, window in enumerate(windows, start=1):
        for seq, event in enumerate(window.split()):
            rows.append({"region": "eu", "id": int(event[1:]), "v": float(w * 100 + seq), "__scn": w, "__seq": seq,
                         "__window_scn": w, "__op": event[0], "__commit_ts_ms": w, "__partition": 0})
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@pytest.mark.parametrize(("windows", "expected"), [
    # SET id = 6 - id on a DEFERRABLE key: 1 and 5 swap, so both stay, with the image each took.
    (["d1 i5 d5 i1"], {1: ("i", 103.0), 5: ("c", 101.0)}),
    (["d5 i1 d1 i5"], {5: ("i", 103.0), 1: ("c", 101.0)}),
    # Insert then delete of a new key: gone, or (deferred) the row that took the key stays: the snapshot decides.
    (["i7 d7"], {7: ("c", 100.0)}),
    (["d7 i7"], {7: ("i", 101.0)}),
    (["i7 i7 d7"], {7: ("i", 101.0)}),  # two rows took the key, one left: it stays
    (["d7 i7 d7"], {7: ("d", 102.0)}),  # the row left, another came and left
    # A window that leaves the key as it was, after one that decided it.
    (["i7", "i7 d7"], {7: ("i", 200.0)}),
    (["d7", "i7 d7"], {7: ("d", 201.0)}),
    (["i7 d7", "i7 d7"], {7: ("c", 200.0)}),
    (["u7 d7"], {7: ("d", 101.0)}),
    (["i7", "u7 d7", "i7 u7 d7"], {7: ("d", 302.0)}),
])
def test_at_commit_a_key_holds_the_state_its_last_window_left(windows: list[str],
                                                             expected: dict[int, tuple[str, float]]) -> None:
    plain = NewestPerKey(SCHEMA, ["region", "id"]).extend(_events(*windows).to_batches())
    at_commit = NewestPerKey(SCHEMA, ["region", "id"], at_commit=True).extend(_events(*windows).to_batches())
    got = {r["id"]: (r["__op"], r["v"]) for r in pa.Table.from_batches(list(at_commit.results()), SCHEMA).to_pylist()}
    assert got == expected
    # Without at_commit the newest event wins, as it always did (the delta-spark engine's reduce does too).
    newest = {r["id"]: r["__op"] for r in pa.Table.from_batches(list(plain.results()), SCHEMA).to_pylist()}
    last_event = {int(e[1:]): e[0] for window in windows for e in window.split()}
    assert newest == last_event


def test_a_float_key_and_its_negative_zero_are_one_key() -> None:
    schema = pa.schema([("k", pa.float64()), ("v", pa.string()), *(pa.field(n, t) for n, t in CHANGE_META)])
    rows = [{"k": k, "v": v, "__scn": 1, "__seq": s, "__window_scn": 1, "__op": op, "__commit_ts_ms": 1,
             "__partition": 0} for s, (k, v, op) in enumerate([(0.0, "zero", "d"), (-0.0, "negzero", "i")])]
    for at_commit in (False, True):
        reducer = NewestPerKey(schema, ["k"], at_commit=at_commit).extend(
            pa.Table.from_pylist(rows, schema).to_batches())
        out = pa.Table.from_batches(list(reducer.results()), schema).to_pylist()
        assert [(r["k"], r["v"], r["__op"]) for r in out] == [(-0.0, "negzero", "i")]
        assert str(out[0]["k"]) == "-0.0"  # the value as the source holds it


def _reduced_rows(batches: list[pa.RecordBatch], key: list[str]) -> dict[tuple, tuple]:
    reducer = NewestPerKey(SCHEMA, key, at_commit=True).extend(batches)
    out = pa.Table.from_batches(list(reducer.results()), SCHEMA).to_pylist()
    return {tuple(r[k] for k in key): (r["__op"], r["v"], r["__scn"]) for r in out}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("key", [["region", "id"], ["region", "id", "__scn"]], ids=["snapshot", "history"])
def test_pieces_reduced_apart_then_together_give_what_one_reduce_gives(seed: int, key: list[str]) -> None:
    """The Spark engine reduces each piece of a log segment before the shuffle and the pieces together after it;
    a piece may cut a transaction (pieces are byte ranges), whose events then pass whole (``PieceEdges``)."""
    rng = random.Random(seed)
    rows, scn = [], 0
    for _ in range(300):  # transactions of 1..8 events on few keys: key changes, deletes, inserts in any order
        scn += rng.randint(1, 3)
        for seq in range(rng.randint(1, 8)):
            rows.append({"region": "eu", "id": rng.randint(1, 12), "v": rng.random(), "__scn": scn, "__seq": seq,
                         "__window_scn": scn, "__op": rng.choice("iiudd"), "__commit_ts_ms": scn, "__partition": 0})
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    cuts = sorted(rng.sample(range(1, table.num_rows), 7))
    pieces = [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, table.num_rows], strict=True)]
    routed: list[pa.RecordBatch] = []
    for piece in pieces:
        edges, reducer = PieceEdges(), NewestPerKey(SCHEMA, key, at_commit=True)
        for batch in piece.to_batches(max_chunksize=rng.randint(5, 60)):
            reducer.extend(edges.split(batch))
        routed += [*reducer.results(), *edges.rest()]
    assert _reduced_rows(routed, key) == _reduced_rows(table.to_batches(), key)


def test_a_held_only_row_of_an_earlier_reduce_takes_the_state_before_it() -> None:
    """Reduced rows reduced again (the Spark engine's pieces): a delete, then a piece whose transaction inserted
    and deleted the key, is a delete; an insert, then that piece, keeps the key with the later image."""
    def reduce(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        return list(NewestPerKey(SCHEMA, ["region", "id"], at_commit=True).extend(batches).results())

    for first, expected in (("d7", "d"), ("i7", "u")):
        both = _events(first, "i7 d7 u8").to_batches()
        earlier, later = both[0].filter(pc.equal(both[0]["__scn"], 1)), both[0].filter(pc.equal(both[0]["__scn"], 2))
        routed = [*reduce([earlier]), *reduce([later])]
        assert [r["__op"] for r in pa.Table.from_batches(routed, SCHEMA).to_pylist() if r["id"] == 7] == [first[0], "c"]
        again = {r["id"]: (r["__op"], r["v"]) for r in pa.Table.from_batches(reduce(routed), SCHEMA).to_pylist()}
        assert again[7][0] == expected and (expected == "d" or again[7][1] == 200.0)
