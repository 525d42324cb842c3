"""The PostgreSQL source's own behaviour beside the shared suite: its config (slot names), a slot per change log,
what status and the capture-lag check show of the WAL the slot holds, and reads at an exact position."""

from __future__ import annotations

import dataclasses
import gc
import json
import time
from pathlib import Path

import dagster as dg
import pytest

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.config import PostgresSourceConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.defs.checks import sync_check
from dagster_databus.defs.common import changelog_key
from dagster_databus.errors import ConfigError, LogGapError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Retaining
from dagster_databus.sources.registry import source_kind
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import PostgresHarness, config_document, make_config
from tests.support.postgres import PostgresServer

TABLES = [("items", ["id"])]


@pytest.fixture
def pg_items(postgres: PostgresServer, request: pytest.FixtureRequest) -> PostgresHarness:
    harness = PostgresHarness(postgres)
    request.addfinalizer(harness.close)
    harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price NUMERIC(12,2))"])
    return harness


def source_doc(harness: PostgresHarness, **extra: object) -> dict[str, object]:
    return {"name": "shop", "kind": "postgres", "host": "127.0.0.1", "port": harness.server.port,
            "user": "postgres", "database": harness.database, "tables": [{"name": "items", "primary_key": ["id"]}],
            **extra}


def temporary_slots(harness: PostgresHarness, settle: int | None = None) -> int:
    """The temporary slots reads hold; with ``settle``, waited for (up to 10 s) to come to that number: the
    server drops a temporary slot as the backend that held it exits, a moment after the client closed."""
    deadline = time.monotonic() + 10
    while True:
        found = int(harness.server.query(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'databus_read_%'")[0][0])
        if settle is None or found == settle or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_slot_name_postgres_would_refuse_or_cut_is_refused_by_validation(tmp_path: Path) -> None:
    base = {"name": "shop", "kind": "postgres", "user": "u", "database": "d",
            "tables": [{"name": "t", "primary_key": ["id"]}]}
    with pytest.raises(ConfigError, match="lower-case letters"):
        make_config(tmp_path / "lake", {**base, "slot": "MySlot"})
    with pytest.raises(ConfigError, match="63 bytes"):
        make_config(tmp_path / "lake", {**base, "publication": "p" * 70})
    with pytest.raises(ConfigError, match=r"publication name .* 63 bytes"):
        make_config(tmp_path / "lake", {**base, "name": "s" * 70})
    # A derived slot name is cut to fit, and tells sources apart by a digest of the whole name and the lake.
    long_names = make_config(tmp_path / "lake", *({**base, "name": "s" * 70 + end, "publication": f"p{end}"}
                                                  for end in ("a", "b"))).sources
    slots = [s.slot_name for s in long_names if isinstance(s, PostgresSourceConfig)]
    assert len(slots) == 2 and len(set(slots)) == 2 and all(len(s) <= 63 for s in slots)


def test_each_lake_reads_its_own_slot_so_two_change_logs_of_one_source_both_hold_every_change(
        pg_items: PostgresHarness, tmp_path: Path, spark) -> None:
    one, two = (make_config(tmp_path / name, source_doc(pg_items), merge={"engine": "local"}) for name in ("a", "b"))
    slots = {c.sources[0].slot_name for c in (one, two)}  # type: ignore[union-attr]
    assert len(slots) == 2 and all(s.startswith("databus_shop_") for s in slots)
    for config in (one, two):
        capture.install(config, "shop")
    pg_items.execute([("INSERT INTO items VALUES (?, ?, ?)", (1, "apple", "1.50"))])
    for config in (one, two, one):
        cycle(config, spark)
    pg_items.execute([("UPDATE items SET price = ? WHERE id = ?", ("2.25", 1)), "DELETE FROM items WHERE id = 1",
                      ("INSERT INTO items VALUES (?, ?, ?)", (2, "pear", None))])
    for config in (two, one):
        cycle(config, spark)
        assert_snapshots_match(config)
        assert [(e.event.op.value, e.event.key) for e in ChangeLog(config.lake, "shop").read()] == [
            ("i", (1,)), ("u", (1,)), ("d", (1,)), ("i", (2,))]


def test_two_change_logs_on_one_named_slot_are_refused_not_thinned(pg_items: PostgresHarness, tmp_path: Path) -> None:
    one, two = (make_config(tmp_path / name, source_doc(pg_items, slot=f"shared_{pg_items.database}"))
                for name in ("a", "b"))
    for config in (one, two):
        capture.install(config, "shop")
    pg_items.execute([("INSERT INTO items VALUES (?, ?, ?)", (1, "apple", "1.50"))])
    capture.run(one, "shop")  # confirms the slot past the other log's checkpoint
    pg_items.execute([("INSERT INTO items VALUES (?, ?, ?)", (2, "pear", "3.00"))])
    checkpoint = ChangeLog(two.lake, "shop").checkpoint()
    with pytest.raises(LogGapError, match="bootstrap"):
        capture.run(two, "shop")
    assert ChangeLog(two.lake, "shop").checkpoint() == checkpoint  # nothing written past the gap


def test_status_and_the_capture_lag_check_show_the_wal_the_slot_holds(
        pg_items: PostgresHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = source_doc(pg_items)
    config = make_config(tmp_path / "lake", doc)
    path = tmp_path / "databus.json"
    path.write_text(json.dumps(config_document(config, [doc])))
    capture.install(config, "shop")
    capture.run(config, "shop")
    # WAL the slot holds: rows written to a table capture never reads, and not captured since.
    pg_items.execute(["CREATE TABLE filler (x TEXT)"],)
    pg_items.execute([("INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 2000)", ())])
    src = open_source(config.sources[0], config.lake)
    assert isinstance(src, Retaining)
    kept = src.retention()
    assert kept.retained_bytes is not None and kept.retained_bytes > 1_000_000 and kept.status == "reserved"
    # The server's position moved, but no change of the published tables waits: no lag in time.
    assert kept.lag_seconds(int(time.time() * 1000)) == 0.0
    check = dg.AssetCheckKey(changelog_key("shop"), "capture_lag")
    assert sync_check(config, config.sources[0], check).metadata["lag_seconds"].value == 0.0  # type: ignore[union-attr]

    pg_items.execute([("INSERT INTO items VALUES (?, ?, ?)", (1, "apple", "1.50"))])
    time.sleep(1.5)
    assert main(["--config", str(path), "status"]) == 0
    out = capsys.readouterr().out
    assert f"replication slot {config.sources[0].slot_name} holds " in out  # type: ignore[union-attr]
    assert "the oldest change waits" in out
    result = sync_check(config, config.sources[0], check)
    assert result.metadata["retained_wal_bytes"].value >= kept.retained_bytes  # type: ignore[union-attr]
    assert result.metadata["lag_seconds"].value >= 1.5  # type: ignore[union-attr]
    capture.run(config, "shop")
    assert src.retention().lag_seconds(int(time.time() * 1000)) == 0.0


def test_a_bootstrap_reads_at_one_exact_position_while_writes_go_on(pg_items: PostgresHarness, tmp_path: Path,
                                                                     spark) -> None:
    """Every key range of a read sees the table at the read's one SCN, whatever is written while the ranges are
    read; what was written is in the log after that SCN; and the snapshots of both engines end equal."""
    pg_items.execute([("INSERT INTO items SELECT g, 'n' || g, g FROM generate_series(1, 400) AS g", ())])
    before = sorted(pg_items.query("SELECT id, name, price FROM items"))
    config = make_config(tmp_path / "lake", source_doc(pg_items, bootstrap_chunk_rows=37))
    capture.install(config, "shop")
    read = open_source(config.sources[0], config.lake).reads.ranges("items", 37)
    assert len(read.ranges) >= 10 and read.scn is not None
    pg_items.execute([("UPDATE items SET price = price + 1 WHERE id % 3 = 0", ()),
                      ("DELETE FROM items WHERE id % 7 = 0", ()),
                      ("INSERT INTO items SELECT g, 'late', 0 FROM generate_series(401, 420) AS g", ())])
    kind = source_kind("postgres")
    rows = [r for i in range(len(read.ranges)) for b in kind.read_range(read, i).batches for r in b.to_pylist()]
    assert sorted((r["id"], r["name"], r["price"]) for r in rows) == before
    capture.run(config, "shop")
    events = [e.event for e in ChangeLog(config.lake, "shop").read()]
    assert len(events) == 133 + 57 + 20 and all(e.scn > read.scn for e in events)
    del read, rows  # the exported snapshot (and its temporary slot) go with the read
    assert temporary_slots(pg_items, settle=0) == 0
    for engine in ("spark", "local"):
        engine_config = make_config(tmp_path / engine, source_doc(pg_items, bootstrap_chunk_rows=37),
                                    merge={"engine": engine})
        cycle(engine_config, spark)
        assert_snapshots_match(engine_config)
        assert DeltaSnapshot(engine_config.lake, "shop", "items").applied_scn() is not None


def test_a_read_keeps_its_snapshot_through_copies_and_ends_it_with_the_last(pg_items: PostgresHarness,
                                                                             tmp_path: Path) -> None:
    """An engine may replace a read's ranges (a resumed bootstrap): the copy still reads the exported snapshot
    after the original is gone, and the temporary slot goes when the last copy does."""
    pg_items.execute([("INSERT INTO items SELECT g, 'n' || g, g FROM generate_series(1, 100) AS g", ())])
    config = make_config(tmp_path / "lake", source_doc(pg_items))
    capture.install(config, "shop")
    read = open_source(config.sources[0], config.lake).reads.ranges("items", 30)
    copy = dataclasses.replace(read, ranges=read.ranges[1:])
    del read
    gc.collect()
    pg_items.execute(["DELETE FROM items"])
    rows = [r for i in range(len(copy.ranges)) for b in source_kind("postgres").read_range(copy, i).batches
            for r in b.to_pylist()]
    assert sorted(r["id"] for r in rows) == list(range(31, 101))

    assert temporary_slots(pg_items) == 1
    del copy, rows
    gc.collect()
    assert temporary_slots(pg_items, settle=0) == 0
