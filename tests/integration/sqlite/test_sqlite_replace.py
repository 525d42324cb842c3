"""SQLite's REPLACE conflicts: INSERT OR REPLACE, REPLACE INTO and UPDATE OR REPLACE delete the rows holding a value
of another UNIQUE constraint the new row takes, without firing their delete trigger. Capture records those
deletes, before the change that displaced them, and nothing more under IGNORE, upserts and aborted conflicts."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.core.scn import Scn
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.sqlite import layouts
from dagster_databus.sources.sqlite.catalog import SqliteCatalog
from dagster_databus.sources.sqlite.database import SqliteDatabase
from dagster_databus.sources.sqlite.render import split, wanted_triggers
from tests.integration.sqlite.test_sqlite_hostile import configured, database, live, snapshot, sync, triggers_on

Spark = Callable[[], Any]


def changes(config: Any, since: Scn) -> list[tuple[str, tuple[Any, ...]]]:
    """The change log's (op, key) pairs after ``since``, in order."""
    return [(str(x.event.op), x.event.key) for x in ChangeLog(config.lake, "shop").read(since)]


def replayed(tmp_path: Path, spark: Spark, ddl: Sequence[str], writes: Sequence[str], key: tuple[str, ...] = ("k",),
             engine: str = "local") -> tuple[list[tuple[str, tuple[Any, ...]]], Any]:
    """A table synced, ``writes`` in one transaction, synced again: the snapshot must equal the table. The changes
    the writes were captured as, and the config."""
    harness = database(tmp_path, *ddl)
    config = configured(harness, tmp_path, key=key, engine=engine)
    sync(config, spark)
    before = ChangeLog(config.lake, "shop").checkpoint()
    harness.execute(list(writes))
    sync(config, spark)
    assert snapshot(config) == live(harness)
    return changes(config, before.scn if before is not None else Scn.BEGINNING), config


UNIQUE_B = ["CREATE TABLE t (k INTEGER PRIMARY KEY, b TEXT UNIQUE, v TEXT)",
            "INSERT INTO t VALUES (1, 'x', 'one'), (2, 'y', 'two')"]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_insert_or_replace_through_another_unique_column_deletes_the_displaced_row_first(
        tmp_path: Path, lazy_spark: Spark, engine: str) -> None:
    found, _ = replayed(tmp_path, lazy_spark, UNIQUE_B, ["INSERT OR REPLACE INTO t VALUES (3, 'x', 'three')"],
                        engine=engine)
    assert found == [("d", (1,)), ("i", (3,))]


@pytest.mark.parametrize(("ddl", "writes", "expected"), [
    pytest.param(UNIQUE_B, ["REPLACE INTO t VALUES (3, 'y', 'three')"], [("d", (2,)), ("i", (3,))], id="replace-into"),
    pytest.param(["CREATE TABLE t (k INTEGER PRIMARY KEY, c INTEGER, d INTEGER, UNIQUE (c, d))",
                  "INSERT INTO t VALUES (1, 1, 1), (2, 1, 2), (3, NULL, 2)"],
                 ["INSERT OR REPLACE INTO t VALUES (4, 1, 2)", "INSERT OR REPLACE INTO t VALUES (5, NULL, 2)"],
                 [("d", (2,)), ("i", (4,)), ("i", (5,))], id="composite-unique-and-nulls"),
    pytest.param(["CREATE TABLE t (k INTEGER PRIMARY KEY, b TEXT UNIQUE, c TEXT UNIQUE)",
                  "INSERT INTO t VALUES (1, 'x', 'p'), (2, 'y', 'q'), (3, 'z', 'r')"],
                 ["INSERT OR REPLACE INTO t VALUES (4, 'x', 'q')"], [("d", (1,)), ("d", (2,)), ("i", (4,))],
                 id="two-rows-at-once"),
    pytest.param(UNIQUE_B, ["UPDATE OR REPLACE t SET b = 'y' WHERE k = 1"], [("d", (2,)), ("u", (1,))],
                 id="update-or-replace"),
    pytest.param(["CREATE TABLE t (k TEXT PRIMARY KEY, b INTEGER NOT NULL UNIQUE, v TEXT) WITHOUT ROWID",
                  "INSERT INTO t VALUES ('a', 1, 'one'), ('b', 2, 'two')"],
                 ["INSERT OR REPLACE INTO t VALUES ('c', 1, 'three')", "UPDATE OR REPLACE t SET b = 3 WHERE k = 'b'",
                  "UPDATE OR REPLACE t SET b = 3 WHERE k = 'c'"],
                 [("d", ("a",)), ("i", ("c",)), ("u", ("b",)), ("d", ("b",)), ("u", ("c",))], id="without-rowid"),
    pytest.param(["CREATE TABLE t (k INTEGER PRIMARY KEY, b TEXT COLLATE NOCASE UNIQUE)",
                  "INSERT INTO t VALUES (1, 'abc'), (2, 'def')"],
                 ["INSERT OR REPLACE INTO t VALUES (3, 'ABC')"], [("d", (1,)), ("i", (3,))], id="nocase-unique"),
    pytest.param(["CREATE TABLE t (k INTEGER PRIMARY KEY, b TEXT, v TEXT)",
                  "CREATE UNIQUE INDEX t_b ON t (b) WHERE v IS NOT NULL", "INSERT INTO t VALUES (1, 'x', 'one')"],
                 ["INSERT OR REPLACE INTO t VALUES (2, 'x', NULL)",
                  "INSERT OR REPLACE INTO t VALUES (3, 'x', 'three')"],
                 [("i", (2,)), ("d", (1,)), ("i", (3,))], id="partial-unique"),
    pytest.param(UNIQUE_B, ["INSERT OR REPLACE INTO t VALUES (1, 'y', 'new')"], [("d", (2,)), ("i", (1,))],
                 id="its-own-key-and-another"),
    pytest.param(UNIQUE_B, ["INSERT OR REPLACE INTO t VALUES (3, 'z', 'a'), (4, 'z', 'b')"],
                 [("i", (3,)), ("d", (3,)), ("i", (4,))], id="a-row-of-the-same-statement"),
    pytest.param(["CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)", "INSERT INTO t (rowid, k, v) VALUES (1, 'a', 'one')"],
                 ["INSERT OR REPLACE INTO t (rowid, k, v) VALUES (1, 'b', 'two')"], [("d", ("a",)), ("i", ("b",))],
                 id="explicit-rowid"),
    pytest.param(UNIQUE_B, ["INSERT INTO t VALUES (9, 'y', 'moved') ON CONFLICT (b) DO UPDATE SET k = 20"],
                 [("d", (2,)), ("i", (20,))], id="upsert-changing-the-key"),
    # An update of a column only an index's expression part reads: the index's values change all the same.
    pytest.param(["CREATE TABLE t (k INTEGER PRIMARY KEY, a TEXT, b TEXT)",
                  "CREATE UNIQUE INDEX t_ab ON t (a, lower(b))", "INSERT INTO t VALUES (1, 'x', 'P'), (2, 'x', 'Q')"],
                 ["UPDATE OR REPLACE t SET b = 'p' WHERE k = 2"], [("d", (1,)), ("u", (2,))], id="expression-part"),
])
def test_a_replace_conflict_is_captured_as_the_deletes_it_made(tmp_path: Path, lazy_spark: Spark, ddl: list[str],
                                                               writes: list[str],
                                                               expected: list[tuple[str, tuple[Any, ...]]]) -> None:
    assert in_order(replayed(tmp_path, lazy_spark, ddl, writes)[0]) == in_order(expected)


def in_order(found: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """The changes with each run of deletes sorted (one statement's displaced rows go in any order); a key
    deleted twice stays twice."""
    runs: list[Any] = []
    for op, key in found:
        if op == "d" and runs and isinstance(runs[-1], list):
            runs[-1] = sorted([*runs[-1], key])
        else:
            runs.append([key] if op == "d" else (op, key))
    return runs


def test_a_table_keyed_on_a_unique_column_sees_a_replace_through_its_rowid(tmp_path: Path, lazy_spark: Spark) -> None:
    ddl = ["CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT NOT NULL UNIQUE COLLATE NOCASE)",
           "INSERT INTO t VALUES (1, 'a'), (2, 'b')"]
    found, _ = replayed(tmp_path, lazy_spark, ddl, ["INSERT OR REPLACE INTO t VALUES (1, 'c')",
                                                    "INSERT OR REPLACE INTO t VALUES (5, 'B')"], key=("code",))
    # 'B' displaces 'b' under NOCASE: another key to the snapshot, which keys rows by their bytes
    assert found == [("d", ("a",)), ("i", ("c",)), ("d", ("b",)), ("i", ("B",))]


def test_a_rowid_alias_set_by_another_of_its_names_displaces_too(tmp_path: Path, lazy_spark: Spark) -> None:
    ddl = ["CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT NOT NULL UNIQUE)",
           "INSERT INTO t VALUES (1, 'a'), (2, 'b')"]
    found, _ = replayed(tmp_path, lazy_spark, ddl, ["UPDATE OR REPLACE t SET rowid = 1 WHERE code = 'b'"],
                        key=("code",))
    assert found == [("d", ("a",)), ("u", ("b",))]


def test_ignore_upserts_and_aborted_conflicts_delete_nothing(tmp_path: Path, lazy_spark: Spark) -> None:
    harness = database(tmp_path, *UNIQUE_B)
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    before = ChangeLog(config.lake, "shop").checkpoint()
    harness.execute(["INSERT OR IGNORE INTO t VALUES (3, 'x', 'ignored')",
                     "INSERT INTO t VALUES (4, 'y', 'nothing') ON CONFLICT DO NOTHING",
                     "INSERT INTO t VALUES (5, 'x', 'upsert') ON CONFLICT (b) DO UPDATE SET v = excluded.v",
                     "UPDATE OR IGNORE t SET b = 'y' WHERE k = 1",
                     "INSERT INTO t VALUES (6, 'z', 'six')"])
    conn = sqlite3.connect(harness.path, isolation_level=None)
    conn.execute("BEGIN")
    for statement in ("INSERT INTO t VALUES (7, 'x', 'aborted')", "UPDATE t SET b = 'y' WHERE k = 1",
                      "INSERT INTO t VALUES (2, 'w', 'aborted') ON CONFLICT (b) DO NOTHING"):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(statement)
    conn.execute("INSERT INTO t VALUES (8, 'q', 'eight')")
    conn.execute("COMMIT")
    conn.close()
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)
    assert changes(config, before.scn if before is not None else Scn.BEGINNING) == [
        ("u", (1,)), ("i", (6,)), ("i", (8,))]
    assert harness.query("SELECT count(*) FROM _databus_txlog WHERE op = 'd'") == [(0,)]


def test_recursive_triggers_delete_a_displaced_row_once(tmp_path: Path, lazy_spark: Spark) -> None:
    harness = database(tmp_path, *UNIQUE_B)
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    before = ChangeLog(config.lake, "shop").checkpoint()
    conn = sqlite3.connect(harness.path, isolation_level=None)
    conn.execute("PRAGMA recursive_triggers = ON")  # SQLite fires the delete trigger of a displaced row
    conn.execute("INSERT OR REPLACE INTO t VALUES (3, 'x', 'three')")
    conn.close()
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)
    assert changes(config, before.scn if before is not None else Scn.BEGINNING) == [("d", (1,)), ("i", (3,))]


def test_an_install_before_a_unique_index_is_brought_up_to_date_by_installing_again(tmp_path: Path,
                                                                                    lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, b TEXT)", "INSERT INTO t VALUES (1, 'x')")
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    harness.execute(["CREATE UNIQUE INDEX t_b ON t (b)"])
    assert any("out of date" in p for p in capture.validate(config).problems["shop"])
    sync(config, lazy_spark)  # install again, then capture
    harness.execute(["INSERT OR REPLACE INTO t VALUES (2, 'x')"])
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness) == [{"k": 2, "b": "x"}]
    assert not capture.validate(config).problems["shop"]


def test_an_install_made_before_displace_triggers_is_upgraded_by_installing_again(tmp_path: Path,
                                                                                   lazy_spark: Spark) -> None:
    harness = database(tmp_path, *UNIQUE_B)
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    # What an install of the version before left: the four triggers as a table without UNIQUE constraints has
    # them, and no _databus_displaced.
    with sqlite3.connect(harness.path) as conn:
        schema = SqliteCatalog(SqliteDatabase(config.sources[0])).preflight()["t"]
        script, _ = wanted_triggers(schema, "k", layouts.layout(conn, schema, "k"))
        for statement in [*split(script), "DROP TABLE _databus_displaced"]:
            conn.execute(statement)
    assert triggers_on(harness, "t") == ["_databus_t_delete", "_databus_t_insert", "_databus_t_rekey",
                                         "_databus_t_update"]
    problems = capture.validate(config).problems["shop"]
    assert any("_databus_displaced is missing" in p for p in problems), problems
    sync(config, lazy_spark)  # install again, then capture
    before = ChangeLog(config.lake, "shop").checkpoint()
    harness.execute(["INSERT OR REPLACE INTO t VALUES (3, 'x', 'three')"])
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)
    assert changes(config, before.scn if before is not None else Scn.BEGINNING) == [("d", (1,)), ("i", (3,))]
    assert not capture.validate(config).problems["shop"]


def test_validate_names_a_unique_index_of_expressions_alone_which_replace_deletes_through_unseen(
        tmp_path: Path) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, email TEXT)",
                       "CREATE UNIQUE INDEX t_email ON t (lower(email))",
                       "CREATE UNIQUE INDEX t_k2 ON t (k, lower(email))")
    config = configured(harness, tmp_path)
    capture.install(config, "shop")
    notes = capture.validate(config).notes["shop"]
    assert [n for n in notes if "t_email" in n and "expressions alone" in n and "REPLACE" in n]
    assert not [n for n in notes if "t_k2" in n]  # a plain column matches it
