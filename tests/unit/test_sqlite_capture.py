"""SQLite capture specifics: triggers, epochs and chunks, verify/uninstall, drift, gaps, lineage."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.core.scn import Scn
from dagster_databus.errors import (
    CaptureNotInstalledError,
    EpochMismatchError,
    LogGapError,
    SchemaDriftError,
    SchemaMismatchError,
)
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.sqlite.source import SqliteSource
from tests.support.harness import CUT, SqliteHarness, make_config
from tests.support.paths import DATA

TABLES = [("items", ["id"]), ("tags", ["item_id", "tag"])]


@pytest.fixture
def shop(tmp_path: Path):
    source = SqliteHarness(tmp_path / "source.db")
    source.execute([
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER)",
        "CREATE TABLE tags (item_id INTEGER, tag TEXT, weight REAL, PRIMARY KEY (item_id, tag))",
    ])
    config = make_config(tmp_path / "lake", source.source_config("shop", TABLES, poll={"chunk_rows": 3}))
    capture.install(config, "shop")
    return source, config


def log_events(config) -> list:
    return list(ChangeLog(config.lake, "shop").read())


def test_install_is_idempotent(shop) -> None:
    source, config = shop
    before = source.query("SELECT type, name, sql FROM sqlite_master ORDER BY name")
    report = capture.install(config, "shop")
    assert report.changed == () and set(report.unchanged) == {"items", "tags"}
    assert source.query("SELECT type, name, sql FROM sqlite_master ORDER BY name") == before


def close_epoch(source: SqliteHarness) -> None:
    """What a poll does first (a cut); lets a test put several closed windows in front of one poll."""
    source.execute([CUT])


def test_a_transaction_spanning_a_chunk_boundary_stays_whole(shop) -> None:
    source, config = shop  # chunk_rows = 3
    source.execute([("INSERT INTO items VALUES (?, 'a', 1, 1)", (i,)) for i in (1, 2)])
    close_epoch(source)
    big = [("INSERT INTO items VALUES (?, 'b', 2, 2)", (i,)) for i in range(10, 20)]
    source.execute(big)
    close_epoch(source)
    source.execute([("INSERT INTO items VALUES (?, 'c', 3, 3)", (i,)) for i in (30, 31)])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    windows = list(log.read_windows())
    assert [sorted(e.key[0] for e in w.events) for w in windows] == [[1, 2], list(range(10, 20)), [30, 31]]
    # The first chunk (3 rows) ended inside the 10-row transaction; it was completed, not cut.
    segments = log.manifest().segments
    assert [(s.windows, s.events) for s in segments] == [(2, 12), (1, 2)]
    assert log.checkpoint().scn == windows[-1].scn


def test_a_delete_and_a_key_change_log_the_old_key_alone(shop) -> None:
    """A delete's image is its key, as Databus's delete shadow tables hold it (and Oracle capture here): the
    delete trigger writes no more than that, which keeps a delete's cost near the one-more-row floor. A key
    change is that delete and an insert of the new key, however the statement names the key."""
    source, config = shop
    source.execute([("INSERT INTO items VALUES (?, 'a', 1.5, 1)", (1,)), "INSERT INTO tags VALUES (1, 'x', 0.1)"])
    source.execute(["DELETE FROM tags WHERE item_id = 1", "UPDATE items SET id = 2 WHERE id = 1",
                    "UPDATE items SET qty = 5, id = id", "UPDATE items SET rowid = 3"])  # the key by its rowid name
    capture.run(config, "shop")
    events = [(e.event.table, e.event.op.value, e.event.row) for e in log_events(config)][2:]
    gone = {"name": None, "price": None, "qty": None}
    assert events == [("tags", "d", {"item_id": 1, "tag": "x", "weight": None}),
                      ("items", "d", {"id": 1, **gone}), ("items", "i", {"id": 2, "name": "a", "price": 1.5, "qty": 1}),
                      ("items", "u", {"id": 2, "name": "a", "price": 1.5, "qty": 5}),
                      ("items", "d", {"id": 2, **gone}), ("items", "i", {"id": 3, "name": "a", "price": 1.5, "qty": 5})]


def test_capture_before_install_fails_and_writes_nothing(tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "source.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])]))
    with pytest.raises(CaptureNotInstalledError, match="shop/capture"):
        capture.run(config, "shop")
    assert not (tmp_path / "lake").exists()


def test_verify_names_a_dropped_trigger(shop) -> None:
    source, config = shop
    source.execute(["DROP TRIGGER _databus_items_delete"])
    problems = SqliteSource(config.sources[0]).setup.verify()
    assert problems == ["table items: trigger(s) _databus_items_delete missing"]
    with pytest.raises(CaptureNotInstalledError, match="_databus_items_delete"):
        capture.run(config, "shop")


def test_a_dropped_or_altered_images_view_is_named_by_verify_and_made_again_by_install(shop) -> None:
    source, config = shop
    source.execute(["INSERT INTO items VALUES (1, 'a', 0.5, 1)"])
    for damage in ["DROP VIEW _databus_images",
                   "DROP VIEW _databus_images; CREATE VIEW _databus_images AS SELECT scn, tbl, op, row, ts "
                   "FROM _databus_txlog"]:
        source.execute(damage.split("; "))
        problems = SqliteSource(config.sources[0]).setup.verify()
        assert problems == ["capture view _databus_images is missing or out of date"]
        with pytest.raises(CaptureNotInstalledError, match="_databus_images"):
            capture.run(config, "shop")
        capture.install(config, "shop")
        assert SqliteSource(config.sources[0]).setup.verify() == []
    capture.run(config, "shop")
    assert [e.event.row for e in log_events(config)] == [{"id": 1, "name": "a", "price": 0.5, "qty": 1}]


def test_schema_change_makes_triggers_out_of_date_until_reinstalled(shop) -> None:
    source, config = shop
    source.execute(["ALTER TABLE items ADD COLUMN colour TEXT"])
    with pytest.raises(CaptureNotInstalledError, match="out of date"):
        capture.run(config, "shop")
    assert capture.install(config, "shop").changed == ("items",)
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?, ?)", (5, "kiwi", 1.0, 1, "green"))])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    assert [e.event.row["colour"] for e in log.read()] == ["green"]
    assert log.schemas.versions("items") == [1]  # first capture registered the new shape only


def test_replaced_database_is_refused_until_bootstrapped(shop) -> None:
    source, config = shop
    source.execute([("INSERT INTO items VALUES (?, 'a', 1, 1)", (1,))])
    capture.run(config, "shop")
    # The database is rebuilt: capture objects are installed afresh with a new epoch.
    source.execute(["DROP TABLE _databus_settings"])
    capture.install(config, "shop")
    source.execute([("INSERT INTO items VALUES (?, 'b', 1, 1)", (2,))])
    before = ChangeLog(config.lake, "shop").manifest()
    with pytest.raises(EpochMismatchError, match="databus bootstrap --source shop"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").manifest() == before
    capture.restart(config, "shop")
    source.execute([("INSERT INTO items VALUES (?, 'c', 1, 1)", (3,))])
    capture.run(config, "shop")
    assert [e.event.key for e in log_events(config)] == [(3,)]  # the new lineage only


def test_a_second_lake_behind_the_pruned_txlog_reports_a_gap(shop, tmp_path: Path) -> None:
    source, config = shop
    source.execute([("INSERT INTO items VALUES (?, 'a', 1, 1)", (1,))])
    capture.run(config, "shop")  # prunes the txlog through the checkpoint
    other = make_config(tmp_path / "other-lake", source.source_config("shop", TABLES))
    with pytest.raises(LogGapError, match="pruned its txlog through SCN"):
        capture.run(other, "shop")
    assert not (tmp_path / "other-lake" / "log" / "shop" / "manifest.json").exists()
    capture.restart(other, "shop")  # the other lake starts at the source's current position
    source.execute([("INSERT INTO items VALUES (?, 'b', 1, 1)", (2,))])
    result = capture.run(other, "shop")
    assert result.since == Scn(1) and [e.event.key for e in ChangeLog(other.lake, "shop").read()] == [(2,)]


def test_value_that_does_not_fit_the_column_type_stops_capture(shop) -> None:
    source, config = shop
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (1, "x", "not a price", 1))])
    with pytest.raises(SchemaMismatchError, match=r"items\.price .* 'not a price'"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() is None


def test_poll_reads_only_to_the_bound_fixed_at_its_start(shop) -> None:
    source, config = shop
    source.execute([("INSERT INTO items VALUES (?, 'a', 1, 1)", (i,)) for i in range(1, 8)])
    src = SqliteSource(config.sources[0])
    from dagster_databus.sources.base import PollStats

    stats = PollStats()
    chunks = src.stream.poll(Scn.BEGINNING, None, stats)
    first = next(chunks)
    # A transaction committed mid-poll lands in a later epoch: not part of this poll.
    source.execute([("INSERT INTO items VALUES (?, 'late', 1, 1)", (100,))])
    rest = [w for chunk in chunks for w in chunk.to_windows(src.catalog.schemas())]
    keys = [e.key[0] for w in [*first.to_windows(src.catalog.schemas()), *rest] for e in w.events]
    assert keys == list(range(1, 8))


def test_uninstall_removes_what_install_created_and_nothing_else(shop) -> None:
    source, config = shop
    source.execute([("INSERT INTO items VALUES (?, 'a', 1, 1)", (1,))])
    SqliteSource(config.sources[0]).uninstall()
    objects = source.query("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
    assert objects == [("table", "items"), ("table", "tags")]
    assert source.query("SELECT * FROM items") == [(1, "a", 1.0, 1)]
    assert SqliteSource(config.sources[0]).setup.verify()[0] == "capture table _databus_settings is missing"


@pytest.mark.parametrize(("rows", "expected"), [
    (0, [(None, None)]),
    (4, [(None, None)]),
    (10, [(None, (5,)), ((5,), None)]),  # the last full range reaches the end: it takes the open end
    (11, [(None, (5,)), ((5,), (10,)), ((10,), None)]),
])
def test_key_ranges_split_the_table_by_keys_and_leave_the_last_open(tmp_path: Path, rows: int, expected) -> None:
    import sqlite3

    from dagster_databus.sources.sqlite.reads import key_ranges

    with sqlite3.connect(tmp_path / "k.db") as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, str(i)) for i in range(1, rows + 1)])
        ranges = key_ranges(conn, "t", ["id"], 5)
    assert [(r.after, r.through) for r in ranges] == expected


@pytest.mark.parametrize("page_rows", [1, 2, 5, 100])
def test_range_reads_page_through_every_range_by_key(tmp_path: Path, page_rows: int) -> None:
    """Each range is read by keyset pages (``sources.keys.keyset_pages``): every row once, in key order, whatever
    the page size, with a compound key."""
    from dagster_databus.sources import read_range

    source = SqliteHarness(tmp_path / "r.db")
    source.execute(["CREATE TABLE t (a INTEGER, b TEXT, v TEXT, PRIMARY KEY (a, b))"])
    source.execute([("INSERT INTO t VALUES (?, ?, ?)", (a, b, f"{a}{b}")) for a in range(1, 8) for b in "xyz"])
    config = make_config(tmp_path / "lake", source.source_config("s", [("t", ["a", "b"])]))
    capture = SqliteSource(config.sources[0])
    capture.setup.install()
    read = capture.reads.ranges("t", 4)
    read = dataclasses.replace(read, spec=dataclasses.replace(read.spec, page_rows=page_rows))
    keys = [(row["a"], row["b"]) for i in range(len(read.ranges))
            for batch in read_range(read, i).batches for row in batch.to_pylist()]
    assert len(read.ranges) > 1
    assert keys == sorted((a, b) for a in range(1, 8) for b in "xyz")


V2_OBJECTS = DATA / "sqlite_capture_v2.sql"


def installed_v2(tmp_path: Path) -> tuple[SqliteHarness, object]:
    """A database whose ``items`` table capture version 2 has been capturing (its objects as it left them)."""
    import sqlite3

    source = SqliteHarness(tmp_path / "v2.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER)"])
    with sqlite3.connect(source.path) as conn:
        conn.executescript(V2_OBJECTS.read_text())
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])], poll={"chunk_rows": 3}))
    return source, config


def start_log_at(config, scn: int, epoch: str) -> None:
    """The change log as capture version 2 left it: checkpoint at ``scn``."""
    with ChangeLog(config.lake, "shop").writer() as writer:
        writer.start_at(Scn(scn), epoch, {})


def test_a_version_2_install_is_converted_keeping_every_uncaptured_change_and_its_scn(tmp_path: Path) -> None:
    source, config = installed_v2(tmp_path)
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (i, f"v2-{i}", i + 0.1, i)) for i in range(1, 5)])
    source.execute(["UPDATE _databus_epoch SET epoch = epoch + 1"])  # a version 2 poll closed an epoch here
    source.execute([("UPDATE items SET price = ? WHERE id = ?", (0.1 + 0.2, 2)), "DELETE FROM items WHERE id = 3"])
    # Version 2 captured and pruned the first two changes.
    source.execute(["DELETE FROM _databus_txlog WHERE scn <= 2",
                    "UPDATE _databus_settings SET value = '2' WHERE name = 'pruned_through'"])
    epoch = source.query("SELECT value FROM _databus_settings WHERE name = 'epoch_id'")[0][0]
    start_log_at(config, 2, epoch)
    kept = source.query("SELECT scn, tbl, op, row, ts FROM _databus_txlog ORDER BY scn")

    report = capture.install(config, "shop")
    assert report.changed == ("items",) and report.epoch == epoch
    assert source.query("SELECT scn, tbl, op, row, ts FROM _databus_txlog WHERE op != 'm' ORDER BY scn") == kept
    tables = {r[0] for r in source.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "_databus_epoch" not in tables and "_databus_txlog_v2" not in tables
    assert source.query("SELECT value FROM _databus_settings WHERE name = 'version'") == [("4",)]
    source.execute([("INSERT INTO items VALUES (?, 'v3', 1.5, 1)", (9,))])
    assert source.query("SELECT max(scn) FROM _databus_txlog")[0][0] == kept[-1][0] + 1  # SCNs go on, never back

    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    windows = [[(e.op.value, e.key[0]) for e in w.events] for w in log.read_windows()]
    # The epochs version 2 left are windows still; the change after the upgrade is one of its own.
    assert windows == [[("i", 3), ("i", 4)], [("u", 2), ("d", 3)], [("i", 9)]]
    assert [e.event.row["price"] for e in log.read() if e.event.key == (2,)] == [0.30000000000000004]
    assert capture.install(config, "shop").changed == ()  # converted once


def test_a_version_2_txlog_pruned_empty_keeps_its_highest_scn_as_the_floor(tmp_path: Path) -> None:
    source, config = installed_v2(tmp_path)
    source.execute([("INSERT INTO items VALUES (?, 'a', 1, 1)", (i,)) for i in range(1, 8)])
    source.execute(["DELETE FROM _databus_txlog",
                    "UPDATE _databus_settings SET value = '7' WHERE name = 'pruned_through'"])
    start_log_at(config, 7, source.query("SELECT value FROM _databus_settings WHERE name = 'epoch_id'")[0][0])
    capture.install(config, "shop")
    source.execute(["UPDATE items SET name = 'b' WHERE id = 1"])
    result = capture.run(config, "shop")
    # The marker row holding the floor sits at SCN 7, so the next change is 8, not 1.
    assert result.since == Scn(7) and result.until == Scn(8)
    assert [(e.event.scn, e.event.key) for e in ChangeLog(config.lake, "shop").read()] == [(Scn(8), (1,))]


def test_changes_version_2_flagged_stale_follow_the_schema_changes_policy_after_the_upgrade(tmp_path: Path) -> None:
    source, config = installed_v2(tmp_path)
    source.execute(["ALTER TABLE items ADD COLUMN colour TEXT",
                    ("INSERT INTO items VALUES (?, 'a', 1, 1, 'red')", (1,))])  # version 2 flags it stale
    stop = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])], schema_changes="stop"))
    capture.install(stop, "shop")
    with pytest.raises(SchemaDriftError, match=r"(?s)'items'.*SCN 1\b.*databus bootstrap --source shop"):
        capture.run(stop, "shop")
    # Under evolve (the default) capture goes on and records the change, which the merge cannot evolve
    # in place: nothing can repair those changes now, so the table is read again.
    capture.run(config, "shop")
    [ddl] = ChangeLog(config.lake, "shop").ddl.records()
    assert ddl.table == "items" and "not repaired" in ddl.statement


# -- capture version 4: the values in value columns, the images made by the view ---------------------------

V3_OBJECTS = DATA / "sqlite_capture_v3.sql"
# Values whose JSON image version 3's triggers had to tag or escape: a REAL JSON would round, a BLOB, text
# with quotes, newlines and a character beyond the BMP, 64-bit integer limits.
EDGE_ITEMS = [(1, 'a "quoted"\nline \\ 😀', 0.1 + 0.2, 2**63 - 1, b"\x00\xff"),
              (2, "", -0.0, -2**63, b""), (3, None, 1.7976931348623157e308, 0, None),
              (4, "x", 5e-324, None, b"\x01" * 300)]


def test_a_version_3_install_keeps_its_json_changes_and_captures_the_rest_from_value_columns(tmp_path: Path) -> None:
    import sqlite3

    source = SqliteHarness(tmp_path / "v3.db")
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, data BLOB)"])
    with sqlite3.connect(source.path) as conn:
        conn.executescript(V3_OBJECTS.read_text())
    config = make_config(tmp_path / "lake", source.source_config("shop", [("items", ["id"])], poll={"chunk_rows": 3}))
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?, ?)", row) for row in EDGE_ITEMS])
    source.execute([("UPDATE items SET price = ? WHERE id = 2", (0.1 + 0.7,)), "DELETE FROM items WHERE id = 3"])
    written_by_v3 = source.query("SELECT row FROM _databus_txlog ORDER BY scn")
    assert all(row.startswith("{") for (row,) in written_by_v3), "version 3's triggers wrote JSON images"
    with pytest.raises(CaptureNotInstalledError, match=r"(?s)_databus_layouts is missing.*out of date.*install"):
        capture.run(config, "shop")  # this version reads a version 3 install only once it is upgraded

    report = capture.install(config, "shop")
    assert report.changed == ("items",) and report.version == "4"
    assert source.query("SELECT row FROM _databus_txlog ORDER BY scn") == written_by_v3, "kept as they were"
    source.execute([("INSERT INTO items VALUES (?, ?, ?, ?, ?)", (10 + row[0], *row[1:])) for row in EDGE_ITEMS])
    source.execute([("UPDATE items SET price = ? WHERE id = 12", (0.1 + 0.7,)), "DELETE FROM items WHERE id = 13",
                    "UPDATE items SET id = 20 WHERE id = 14"])
    after = source.query(f"SELECT row FROM _databus_txlog ORDER BY scn LIMIT -1 OFFSET {len(written_by_v3)}")
    assert after and all(row.startswith("#") for (row,) in after), "version 4's triggers write layout markers"

    capture.run(config, "shop")
    events = [(e.event.op.value, e.event.key, e.event.row) for e in ChangeLog(config.lake, "shop").read()]
    images = {key: row for op, key, row in events if op != "d"}
    for key in [(1,), (11,)]:
        assert images[key] == {"id": key[0], "name": EDGE_ITEMS[0][1], "price": 0.1 + 0.2, "qty": 2**63 - 1,
                               "data": b"\x00\xff"}, "the same image, by either version"
    assert images[(2,)] == images[(12,)] | {"id": 2} and images[(2,)]["price"] == 0.1 + 0.7
    assert images[(2,)]["qty"] == -2**63 and images[(2,)]["data"] == b""
    assert images[(4,)] == images[(20,)] | {"id": 4} == {"id": 4, "name": "x", "price": 5e-324, "qty": None,
                                                        "data": b"\x01" * 300}
    assert [key for op, key, _ in events if op == "d"] == [(3,), (13,), (14,)]


WIDE_KINDS = ["INTEGER", "TEXT", "REAL", "BLOB", "NUMERIC", "DOUBLE PRECISION"]


def wide_value(kind: str, row: int, column: int) -> object:
    if (row + column) % 7 == 0:
        return None
    return {"INTEGER": (row * 7919 + column) * (-1) ** column, "TEXT": f"t{row}-{column} \"q\"\n",
            "REAL": (row + column) / 3, "BLOB": bytes([row % 256, column % 256, 0]),
            "NUMERIC": row * 1000 + column, "DOUBLE PRECISION": 0.1 * column + row}[kind]


def test_a_table_wider_than_json_objects_arguments_is_captured_exactly(tmp_path: Path, lazy_spark) -> None:
    """SQLite's json_object takes 63 columns (127 arguments): version 3's triggers could not be created for a
    wider table; version 4's write values, and the view joins the images of several objects."""
    from dagster_databus.sync.merge import sync_source
    from tests.support.checks import assert_snapshots_match

    columns = [(f"c{i}", WIDE_KINDS[i % len(WIDE_KINDS)]) for i in range(1, 200)]
    source = SqliteHarness(tmp_path / "wide.db")
    source.execute([f"CREATE TABLE wide (id INTEGER PRIMARY KEY, {', '.join(f'{n} {k}' for n, k in columns)})"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("wide", ["id"])]),
                         merge={"engine": "local"})
    capture.install(config, "shop")
    insert = f"INSERT INTO wide VALUES ({', '.join('?' * (len(columns) + 1))})"

    def rows(first: int, last: int) -> list:
        return [(insert, (r, *(wide_value(kind, r, i) for i, (_, kind) in enumerate(columns, 1))))
                for r in range(first, last)]

    source.execute(rows(1, 30))
    sync_source(lazy_spark, config, "shop", mode="bootstrap")
    source.execute(rows(30, 60))
    source.execute(["UPDATE wide SET c2 = 0.1 + 0.2, c199 = 'changed' WHERE id % 4 = 0",
                    "DELETE FROM wide WHERE id % 5 = 0"])
    [(image,)] = source.query("SELECT row FROM _databus_images WHERE op = 'i' ORDER BY scn DESC LIMIT 1")
    assert list(json.loads(image)) == ["id", *(n for n, _ in columns)], "one JSON object of every column"
    assert capture.run(config, "shop").events == 29 + 30 + 14 + 11
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)


def test_rows_of_a_tables_old_and_new_layout_waiting_in_the_txlog_each_keep_their_columns(shop) -> None:
    source, config = shop
    source.execute(["INSERT INTO items VALUES (1, 'a', 1.5, 1)", "ALTER TABLE items ADD COLUMN colour TEXT"])
    capture.install(config, "shop")  # new triggers, a second layout; the first change waits with the old one
    source.execute(["INSERT INTO items VALUES (2, 'b', 2.5, 2, 'red')",
                    "UPDATE items SET colour = 'blue' WHERE id = 1"])
    assert len(source.query("SELECT * FROM _databus_layouts WHERE tbl = 'items'")) == 2
    images = [json.loads(r) for (r,) in source.query("SELECT row FROM _databus_images WHERE op != 'm' ORDER BY scn")]
    first, repaired, *later = images  # install's repair of key 1 (drift) comes after the change it repairs
    assert first == {"id": 1, "name": "a", "price": {"$r": "1.5e+00"}, "qty": 1}, "the old layout's columns"
    assert repaired == {"id": 1, "name": "a", "price": {"$r": "1.5e+00"}, "qty": 1, "colour": None}
    assert later == [{"id": 2, "name": "b", "price": {"$r": "2.5e+00"}, "qty": 2, "colour": "red"},
                     {"id": 1, "name": "a", "price": {"$r": "1.5e+00"}, "qty": 1, "colour": "blue"}]
    capture.run(config, "shop")
    rows = [e.event.row for e in log_events(config) if e.event.table == "items"]
    assert rows[-2:] == [{"id": 2, "name": "b", "price": 2.5, "qty": 2, "colour": "red"},
                         {"id": 1, "name": "a", "price": 1.5, "qty": 1, "colour": "blue"}]


def test_a_table_too_wide_for_the_txlog_is_refused_naming_it_and_nothing_is_installed(tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "wide.db")
    source.execute(["CREATE TABLE narrow (id INTEGER PRIMARY KEY, v TEXT)",
                    f"CREATE TABLE widest (id INTEGER PRIMARY KEY, {', '.join(f'c{i} TEXT' for i in range(1, 2000))})"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("narrow", ["id"]), ("widest", ["id"])]))
    refusal = r"(?s)'widest'.*2000 columns.*SQLITE_MAX_COLUMN.*leave 'widest' out"
    with pytest.raises(CaptureNotInstalledError, match=refusal):
        capture.install(config, "shop")
    assert not source.query("SELECT name FROM sqlite_master WHERE name LIKE '\\_databus%' ESCAPE '\\'")


def test_columns_named_as_the_txlogs_own_and_values_shaped_as_its_markers_arrive_as_they_are(tmp_path: Path) -> None:
    source = SqliteHarness(tmp_path / "names.db")
    source.execute(['CREATE TABLE t (id INTEGER PRIMARY KEY, v0 TEXT, "row" TEXT, tbl INTEGER, scn REAL, op BLOB)'])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("t", ["id"])]))
    capture.install(config, "shop")
    source.execute(["INSERT INTO t VALUES (1, '#1', '#1k', 7, 0.5, x'7b7d')",
                    "UPDATE t SET \"row\" = '{\"id\": 2}', v0 = NULL WHERE id = 1", "DELETE FROM t WHERE id = 1"])
    capture.run(config, "shop")
    events = [(e.event.op.value, e.event.key, e.event.row) for e in log_events(config)]
    assert events[:2] == [("i", (1,), {"id": 1, "v0": "#1", "row": "#1k", "tbl": 7, "scn": 0.5, "op": b"{}"}),
                          ("u", (1,), {"id": 1, "v0": None, "row": '{"id": 2}', "tbl": 7, "scn": 0.5, "op": b"{}"})]
    assert [(op, key) for op, key, _ in events[2:]] == [("d", (1,))]
