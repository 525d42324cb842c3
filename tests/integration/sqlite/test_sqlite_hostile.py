"""Careless and hostile input to a SQLite source: tables rebuilt by renaming, dropped and re-created or renamed
away; keys that compare without case; two sources on one database file; text that is not UTF-8; timestamps that
leave the calendar once taken to UTC. Each either ends with the snapshot equal to the table, or is refused with
the problem and the fix and writes nothing."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError, SchemaDriftError, SchemaMismatchError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.harness import SqliteHarness, make_config

Spark = Callable[[], Any]


def database(tmp_path: Path, *ddl: str) -> SqliteHarness:
    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(list(ddl))
    return harness


def configured(harness: SqliteHarness, tmp_path: Path, table: str = "t", key: tuple[str, ...] = ("k",),
               engine: str = "local", **extra: Any) -> DatabusConfig:
    return make_config(tmp_path / "lake", harness.source_config("shop", [(table, list(key))], **extra),
                       merge={"engine": engine, "file_rows": 2})


def sync(config: DatabusConfig, spark: Spark, source: str = "shop") -> None:
    """What a sync step does: install (idempotent), capture, merge every snapshot."""
    capture.install(config, source)
    capture.run(config, source)
    sync_source(spark, config, source)


def snapshot(config: DatabusConfig, table: str = "t", source: str = "shop") -> list[dict[str, Any]]:
    return sorted(DeltaSnapshot(config.lake, source, table).read().to_pylist(), key=repr)


def live(harness: SqliteHarness, table: str = "t") -> list[dict[str, Any]]:
    with sqlite3.connect(harness.path) as conn:
        conn.text_factory = bytes
        cursor = conn.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return sorted(({k: v.decode() if isinstance(v, bytes) else v for k, v in r.items()} for r in rows), key=repr)


def triggers_on(harness: SqliteHarness, table: str) -> list[str]:
    return [r[0] for r in harness.query(f"SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                        f"AND tbl_name = '{table}' ORDER BY name")]


# -- 1. tables rebuilt, dropped, renamed away ----------------------------------------------------------------

REBUILD = ["ALTER TABLE t RENAME TO t_old",
           "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
           "INSERT INTO t SELECT * FROM t_old"]


def rebuilt_by_renaming(tmp_path: Path, spark: Spark, policy: str) -> tuple[SqliteHarness, DatabusConfig]:
    """A synced table, one more change, then SQLite's recommended rebuild (rename it away, create it again, copy
    the rows) followed by writes to both tables."""
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
                       "INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    config = configured(harness, tmp_path, schema_changes=policy)
    sync(config, spark)
    harness.execute(["INSERT INTO t VALUES (3, 'three')"])
    harness.execute(REBUILD)
    harness.execute(["UPDATE t_old SET v = 'old only' WHERE k = 1", "INSERT INTO t_old VALUES (10, 'old only')",
                     "DELETE FROM t_old WHERE k = 2"])
    harness.execute(["UPDATE t SET v = 'new' WHERE k = 2", "INSERT INTO t VALUES (20, 'new')"])
    return harness, config


@pytest.mark.parametrize("policy", ["evolve", "resnapshot"])
def test_a_table_rebuilt_by_renaming_is_read_again_and_the_old_tables_changes_never_reach_it(
        tmp_path: Path, lazy_spark: Spark, policy: str) -> None:
    harness, config = rebuilt_by_renaming(tmp_path, lazy_spark, policy)
    problems = capture.validate(config).problems["shop"]
    assert any("t_old" in p and "renamed" in p for p in problems), problems
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)
    log = ChangeLog(config.lake, "shop")
    assert all(e.event.row is None or e.event.row.get("v") != "old only" for e in log.read()), \
        "a change of t_old reached t's change log"
    [ddl] = log.ddl.records()
    assert "t_old" in ddl.statement
    # The triggers follow the table's name: t's changes arrive, t_old's do not.
    assert triggers_on(harness, "t_old") == [] and len(triggers_on(harness, "t")) == 4
    harness.execute(["UPDATE t_old SET v = 'old only' WHERE k = 3", "INSERT INTO t VALUES (30, 'new')",
                     "DELETE FROM t WHERE k = 1"])
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)


def test_a_table_rebuilt_by_renaming_stops_capture_under_the_stop_policy(tmp_path: Path, lazy_spark: Spark) -> None:
    harness, config = rebuilt_by_renaming(tmp_path, lazy_spark, "stop")
    before = ChangeLog(config.lake, "shop").checkpoint()
    held = snapshot(config)
    capture.install(config, "shop")
    with pytest.raises(SchemaDriftError, match=r"(?s)'t'.*renamed to 't_old'.*databus bootstrap --source shop"):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == before
    assert snapshot(config) == held
    capture.restart(config, "shop")
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)


@pytest.mark.parametrize("policy", ["evolve", "stop"])
def test_a_table_dropped_and_created_again_is_read_again_or_stops(tmp_path: Path, lazy_spark: Spark,
                                                                  policy: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
                       "INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    config = configured(harness, tmp_path, schema_changes=policy)
    sync(config, lazy_spark)
    harness.execute(["DROP TABLE t", "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
                     "INSERT INTO t VALUES (2, 'again'), (5, 'five')"])
    if policy == "stop":
        capture.install(config, "shop")
        with pytest.raises(SchemaDriftError, match=r"(?s)'t'.*databus bootstrap --source shop"):
            capture.run(config, "shop")
        capture.restart(config, "shop")
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness) == [{"k": 2, "v": "again"}, {"k": 5, "v": "five"}]


def test_a_table_renamed_away_is_refused_naming_its_new_name_until_renamed_back(tmp_path: Path,
                                                                                lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO t VALUES (1, 'one')")
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    harness.execute(["ALTER TABLE t RENAME TO t_gone", "INSERT INTO t_gone VALUES (2, 'two')"])
    before, held = ChangeLog(config.lake, "shop").checkpoint(), snapshot(config)
    renamed = r"(?s)table 't' .*renamed to 't_gone'.*ALTER TABLE \"t_gone\" RENAME TO \"t\""
    problems = capture.validate(config).problems["shop"]
    assert any("renamed to 't_gone'" in p for p in problems), problems
    for step in (lambda: capture.install(config, "shop"), lambda: capture.run(config, "shop")):
        with pytest.raises(ConfigError, match=renamed):
            step()
    assert ChangeLog(config.lake, "shop").checkpoint() == before and snapshot(config) == held
    harness.execute(['ALTER TABLE "t_gone" RENAME TO "t"'])  # the fix: its changes meanwhile were t's
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness) == [{"k": 1, "v": "one"}, {"k": 2, "v": "two"}]


# -- 2. keys that compare without case ---------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_key_changed_only_in_case_replaces_the_row(tmp_path: Path, lazy_spark: Spark, engine: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k TEXT COLLATE NOCASE PRIMARY KEY, v INTEGER)",
                       "INSERT INTO t VALUES ('a', 1), ('B', 2), ('c', 3), ('D', 4), ('e', 5)")
    config = configured(harness, tmp_path, engine=engine)
    sync(config, lazy_spark)
    harness.execute(["UPDATE t SET k = 'A' WHERE k = 'a'", "UPDATE t SET v = 20 WHERE k = 'b'",
                     "UPDATE t SET k = 'd', v = 40 WHERE k = 'D'"])
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)
    assert sorted(r["k"] for r in snapshot(config)) == ["A", "B", "c", "d", "e"]
    harness.execute(["UPDATE t SET k = 'a' WHERE k = 'A'", "DELETE FROM t WHERE k = 'C'"])
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)


# -- 3. two sources on one database file ---------------------------------------------------------------------

def test_a_second_source_on_the_same_file_is_refused(tmp_path: Path, lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
                       "CREATE TABLE u (k INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO t VALUES (1, 'one')")
    (tmp_path / "alias.db").symlink_to(harness.path)
    config = make_config(tmp_path / "lake", harness.source_config("first", [("t", ["k"])]),
                         {**harness.source_config("second", [("u", ["k"])]), "path": str(tmp_path / "alias.db")},
                         merge={"engine": "local"})
    sync(config, lazy_spark, "first")
    owned = r"(?s)already captured by source 'first'.*one source"
    problems = capture.validate(config).problems["second"]
    assert any("already captured by source 'first'" in p for p in problems), problems
    with pytest.raises(ConfigError, match=owned):
        capture.install(config, "second")
    with pytest.raises(ConfigError, match=owned):
        capture.run(config, "second")
    assert ChangeLog(config.lake, "second").checkpoint() is None
    assert triggers_on(harness, "u") == []
    harness.execute(["INSERT INTO t VALUES (2, 'two')"])
    sync(config, lazy_spark, "first")  # the owner goes on undisturbed
    assert snapshot(config, source="first") == live(harness)


def test_validate_refuses_two_sources_on_one_file_before_either_is_installed(tmp_path: Path) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
                       "CREATE TABLE u (k INTEGER PRIMARY KEY, v TEXT)")
    (tmp_path / "alias.db").symlink_to(harness.path)
    config = make_config(tmp_path / "lake", harness.source_config("first", [("t", ["k"])]),
                         {**harness.source_config("second", [("u", ["k"])]), "path": str(tmp_path / "alias.db")})
    result = capture.validate(config)
    assert result.problems["first"] == []
    assert any("is also captured by source 'first'" in p and "remove this source" in p
               for p in result.problems["second"]), result.problems
    assert triggers_on(harness, "t") == [] and triggers_on(harness, "u") == [], "validate wrote nothing"


def test_the_owner_name_is_recorded_by_install_and_kept(tmp_path: Path) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    config = configured(harness, tmp_path)
    capture.install(config, "shop")
    capture.install(config, "shop")
    assert harness.query("SELECT value FROM _databus_settings WHERE name = 'owner_source'") == [("shop",)]


# -- 4. text that is not UTF-8 -----------------------------------------------------------------------------------

BAD = "CAST(x'61ff62' AS TEXT)"  # 'a', a byte no UTF-8 text holds, 'b'


def test_text_that_is_not_utf8_stops_capture_naming_table_column_and_key(tmp_path: Path, lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO t VALUES (1, 'one')")
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    harness.execute([f"INSERT INTO t VALUES (2, {BAD})", "INSERT INTO t VALUES (3, 'three')"])
    before = ChangeLog(config.lake, "shop").checkpoint()
    problems = capture.validate(config).problems["shop"]
    assert any("t.v" in p and "(2,)" in p and "UTF-8" in p for p in problems), problems
    refused = r"(?s)column t\.v .*b'a\\xffb'.*not valid UTF-8.*key \(2,\).*invalid_utf8: binary"
    for _ in range(2):  # the same refusal each time, never a raw sqlite3 error
        with pytest.raises(SchemaMismatchError, match=refused):
            capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == before
    # The fix as the message gives it: correct the value, then bootstrap.
    harness.execute(["UPDATE t SET v = 'ab' WHERE k = 2"])
    capture.restart(config, "shop")
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)


@pytest.mark.parametrize("policy", ["evolve", "stop"])
def test_switching_to_binary_carries_the_refused_change_and_reads_the_table_again(tmp_path: Path, lazy_spark: Spark,
                                                                                   policy: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO t VALUES (1, 'one')")
    config = configured(harness, tmp_path, schema_changes=policy)
    sync(config, lazy_spark)
    harness.execute([f"INSERT INTO t VALUES (2, {BAD})"])
    with pytest.raises(SchemaMismatchError, match="not valid UTF-8"):
        capture.run(config, "shop")
    binary = configured(harness, tmp_path, schema_changes=policy, invalid_utf8="binary")
    if policy == "stop":  # the type of v changes (string to binary): the snapshot stops at the change
        capture.install(binary, "shop")
        capture.run(binary, "shop")
        with pytest.raises(SchemaDriftError, match=r"(?s)'t'.*CARRIED AS BINARY"):
            sync_source(lazy_spark, binary, "shop")
        return
    sync(binary, lazy_spark)  # the refused change is carried by its bytes, then the table is read again
    assert snapshot(binary) == [{"k": 1, "v": b"one"}, {"k": 2, "v": b"a\xffb"}]
    log = ChangeLog(binary.lake, "shop")
    assert [e.event.row["v"] for e in log.read() if e.event.row and e.event.row.get("v")] == [b"a\xffb"]
    assert "CARRIED AS BINARY" in log.ddl.records()[0].statement


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_text_that_is_not_utf8_stops_the_bootstrap_naming_table_column_and_key(tmp_path: Path, lazy_spark: Spark,
                                                                              engine: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT, n INTEGER, b BLOB)",
                       "INSERT INTO t VALUES ('a', 'one', 1, x'ff'), ('b', 'two', 2, x'c3')",  # BLOBs: any bytes
                       f"INSERT INTO t VALUES ('c', {BAD}, 3, NULL)", "INSERT INTO t VALUES ('d', 'four', 4, x'00')")
    config = configured(harness, tmp_path, engine=engine)
    capture.install(config, "shop")
    capture.run(config, "shop")
    with pytest.raises(SchemaMismatchError, match=r"(?s)column t\.v .*b'a\\xffb'.*not valid UTF-8.*key \('c',\)"):
        sync_source(lazy_spark, config, "shop")
    assert not DeltaSnapshot(config.lake, "shop", "t").exists()


def test_the_command_line_names_text_that_is_not_utf8_without_a_traceback(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", f"INSERT INTO t VALUES (7, {BAD})")
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({"lake": "lake", "merge": {"engine": "local"},
                                "sources": [harness.source_config("shop", [("t", ["k"])])]}))
    assert main(["--config", str(path), "install"]) == 0
    capsys.readouterr()
    for command in (["validate"], ["snapshot", "--source", "shop"]):
        assert main(["--config", str(path), *command]) == 2, command
        err = capsys.readouterr().err
        assert "column t.v" in err and "not valid UTF-8" in err and "(7,)" in err and "Fix:" in err, err
        assert "Traceback" not in err and "images" not in err


def test_text_that_is_not_utf8_in_a_column_of_another_type_is_refused_too(tmp_path: Path, lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, d DATE, b BLOB)",
                       f"INSERT INTO t VALUES (1, '2024-01-01', x'ff'), (2, {BAD}, NULL)")
    config = configured(harness, tmp_path, invalid_utf8="binary")  # carries text columns only
    capture.install(config, "shop")
    capture.run(config, "shop")
    refused = r"(?s)column t\.d \(declared DATE.*b'a\\xffb'.*not valid UTF-8.*key \(2,\)"
    with pytest.raises(SchemaMismatchError, match=refused):
        sync_source(lazy_spark, config, "shop")
    harness.execute([f"INSERT INTO t VALUES (3, {BAD}, x'ff')"])
    with pytest.raises(SchemaMismatchError, match=refused.replace(r"\(2,\)", r"\(3,\)")):
        capture.run(config, "shop")


def test_a_key_that_is_not_utf8_is_refused_naming_it(tmp_path: Path, lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)", f"INSERT INTO t VALUES ({BAD}, 'x')")
    config = configured(harness, tmp_path, invalid_utf8="binary")  # binary carries other columns, never keys
    capture.install(config, "shop")
    problems = capture.validate(config).problems["shop"]
    assert any("t.k" in p and "UTF-8" in p for p in problems), problems
    capture.run(config, "shop")
    with pytest.raises(SchemaMismatchError, match=r"(?s)column t\.k .*b'a\\xffb'.*not valid UTF-8"):
        sync_source(lazy_spark, config, "shop")
    harness.execute(["DELETE FROM t", "INSERT INTO t VALUES ('fine', 'x')", f"INSERT INTO t VALUES ({BAD}, 'y')"])
    with pytest.raises(SchemaMismatchError, match=r"(?s)column t\.k .*b'a\\xffb'.*not valid UTF-8.*SCN"):
        capture.run(config, "shop")


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_text_columns_carried_as_binary_keep_every_byte_on_both_roads(tmp_path: Path, lazy_spark: Spark,
                                                                      engine: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT, note, n INTEGER)",
                       f"INSERT INTO t VALUES (1, {BAD}, 'plain', 1)",
                       "INSERT INTO t VALUES (2, 'héllo', 12.5, 2), (3, NULL, 7, 3), (4, x'00ff', 0.1, 4)")
    config = configured(harness, tmp_path, engine=engine, invalid_utf8="binary")
    sync(config, lazy_spark)  # the bootstrap
    expected = [
        {"k": 1, "v": b"a\xffb", "note": b"plain", "n": 1},
        {"k": 2, "v": "héllo".encode(), "note": b"12.5", "n": 2},
        {"k": 3, "v": None, "note": b"7", "n": 3},
        {"k": 4, "v": b"\x00\xff", "note": b"0.1", "n": 4},
    ]
    assert snapshot(config) == sorted(expected, key=repr)
    # The same rows again through the triggers: every value as the bootstrap read it.
    harness.execute(["CREATE TABLE copy AS SELECT * FROM t", "DELETE FROM t", "INSERT INTO t SELECT * FROM copy",
                     f"UPDATE t SET v = {BAD} || v WHERE k = 2"])
    sync(config, lazy_spark)
    expected[1]["v"] = b"a\xffb" + "héllo".encode()
    assert snapshot(config) == sorted(expected, key=repr)
    assert capture.validate(config).ok


# -- 5. timestamps outside the calendar once taken to UTC --------------------------------------------------------

@pytest.mark.parametrize("value", ["9999-12-31 23:30:00-01:00", "0001-01-01 00:30:00+01:00"])
def test_a_timestamp_that_leaves_the_calendar_in_utc_is_refused_naming_it(tmp_path: Path, lazy_spark: Spark,
                                                                         value: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, at TIMESTAMP)",
                       "INSERT INTO t VALUES (1, '2024-06-01 12:00:00+02:00')")
    config = configured(harness, tmp_path)
    sync(config, lazy_spark)
    refused = rf"(?s)column t\.at .*'{re.escape(value)}'.*UTC"
    harness.execute([("INSERT INTO t VALUES (2, ?)", (value,))])
    before = ChangeLog(config.lake, "shop").checkpoint()
    with pytest.raises(SchemaMismatchError, match=refused):
        capture.run(config, "shop")
    assert ChangeLog(config.lake, "shop").checkpoint() == before
    with pytest.raises(SchemaMismatchError, match=refused):  # the bootstrap's road
        sync_source(lazy_spark, config, "shop", mode="bootstrap")
