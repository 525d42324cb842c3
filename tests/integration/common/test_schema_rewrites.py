"""Schema changes a DBA runs that rewrite stored values with no row events (issue 48): a change is harmless only
when proven. Each statement below converts values in the source (``USING``, a shorter CHAR, JSON to JSONB, fewer
fractional seconds, VARCHAR to CHAR, BINARY padding, a reordered SET, signedness under a permissive sql_mode); the
sync after it must leave the snapshot (and history) equal to the source, or stop under ``schema_changes: stop``
with the snapshot held. Changes proven to keep every value (a longer VARCHAR, a wider integer, SET members
appended) still evolve in place, and rewrites that keep values (VACUUM FULL, CLUSTER) change nothing."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable
from dagster_databus.errors import CaptureNotInstalledError, HistoryGapError, LogGapError, SchemaDriftError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sources.base import PollStats
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import compare_rows
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, PostgresHarness, SourceHarness, SqliteHarness, make_config

ROWS = 12


def configured(harness: SourceHarness, tmp_path: Path, engine: str, policy: str = "evolve",
               table: tuple[str, list[str]] = ("items", ["id"]), **extra: Any) -> DatabusConfig:
    """A source of one table; on the Spark engine the table has a history table too (each class of change runs
    on the local engine, and one case of it on the Spark engine with history)."""
    document = harness.source_config("shop", [table], schema_changes=policy, **extra)
    document["tables"][0]["history"] = engine == "spark"
    return make_config(tmp_path / "lake", document, merge={"engine": engine})


def assert_exact(config: DatabusConfig) -> None:
    """The snapshots equal the source, and so do a history table's open versions."""
    assert_snapshots_match(config)
    for table in config.source("shop").tables:
        if table.history:
            assert_history_current(config, table.name)


def lagging_across(harness: SourceHarness, config: DatabusConfig, spark: Any, changes: list[Any]) -> None:
    """Synced, then a change of the old shape captured but not merged, so the snapshot lags across ``changes``;
    then the changes (in autocommit, each its own transaction, as a DBA's session runs them), and a row written
    in the new shape."""
    cycle(config, spark)
    harness.execute(["UPDATE items SET id = id WHERE id = 1"])
    harness.execute([("DELETE FROM items WHERE id = ?", (ROWS,))])
    capture.run(config, "shop")
    assert isinstance(harness, MysqlHarness | PostgresHarness)
    harness.server.execute(*changes, database=harness.database)
    harness.execute(["UPDATE items SET id = id WHERE id = 2"])


def each_and_one_on_spark(cases: Any, on_spark: str) -> list[tuple[str, str]]:
    """Every case on the local engine, and ``on_spark`` on the Spark engine too (with a history table)."""
    return [(c, "local") for c in sorted(cases)] + [(on_spark, "spark")]


def assert_history_current(config: DatabusConfig, table: str) -> None:
    """The history's open versions are the source's rows."""
    src = open_source(config.source("shop"))
    schema = src.catalog.schemas()[table]
    versions = HistoryTable(config.lake, "shop", table).read(with_meta=True).to_pylist()
    current = [{k: v[k] for k in schema.column_names} for v in versions if v["__end_scn"] is None]
    result = compare_rows(table, list(schema.primary_key), read_rows(src, table), current)
    assert result.equal, f"history of {table}: {result}"


# -- PostgreSQL ------------------------------------------------------------------------------------------------

PG_TYPE = "CREATE TYPE status AS ENUM ('new', 'shipped')"
PG_TABLE = ("CREATE TABLE items (id INT PRIMARY KEY, price INT, code CHAR(10), doc JSON, at TIMESTAMPTZ(6), "
            "note TEXT, st status DEFAULT 'new')")
PG_ROWS = [(i, i + 1, f"c{i}", f'{{"b": {i},  "a": [1, 2]}}', f"2026-01-01 12:00:0{i % 10}.654321+00", f"n{i}")
           for i in range(1, ROWS + 1)]

PG_REWRITES = {
    "using-multiply": "ALTER TABLE items ALTER COLUMN price TYPE BIGINT USING price * 100",
    "using-divide": "ALTER TABLE items ALTER COLUMN price TYPE NUMERIC(12, 2) USING price / 3.0",
    "char-shorter": "ALTER TABLE items ALTER COLUMN code TYPE CHAR(4)",
    "char-longer": "ALTER TABLE items ALTER COLUMN code TYPE CHAR(12)",
    "json-to-jsonb": "ALTER TABLE items ALTER COLUMN doc TYPE JSONB",
    "fewer-fractions": "ALTER TABLE items ALTER COLUMN at TYPE TIMESTAMPTZ(0)",
    "using-text-to-int": "ALTER TABLE items ALTER COLUMN note TYPE INT USING length(note) * 7",
    "identity-added": "ALTER TABLE items ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY",
    "identity-by-default-added": "ALTER TABLE items ADD COLUMN seq INT GENERATED BY DEFAULT AS IDENTITY",
    "stored-generated-added": "ALTER TABLE items ADD COLUMN twice BIGINT GENERATED ALWAYS AS (price * 2) STORED",
    "dropped-and-added-again": "ALTER TABLE items DROP COLUMN price, ADD COLUMN price INT DEFAULT 2",
    "same-type-using": "ALTER TABLE items ALTER COLUMN note TYPE TEXT USING upper(note)",
    "enum-value-renamed": "ALTER TYPE status RENAME VALUE 'new' TO 'fresh'",
    # The last column: it keeps its place in the column list, only its number tells.
    "last-dropped-and-added-again": "ALTER TABLE items DROP COLUMN st, ADD COLUMN st status DEFAULT 'shipped'",
}


def pg_items(pg: PostgresHarness) -> None:
    pg.execute([PG_TYPE, PG_TABLE] + [("INSERT INTO items (id, price, code, doc, at, note) VALUES (?, ?, ?, ?, ?, ?)",
                                        row) for row in PG_ROWS])


@pytest.mark.parametrize(("rewrite", "engine"), each_and_one_on_spark(PG_REWRITES, "same-type-using"))
def test_a_postgres_type_change_that_rewrites_values_reaches_the_snapshot(pg: PostgresHarness, tmp_path: Path,
                                                                         lazy_spark, rewrite: str, engine: str) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, engine)
    lagging_across(pg, config, lazy_spark, [PG_REWRITES[rewrite]])
    [result] = cycle(config, lazy_spark)
    assert result.evolved is None  # no type change PostgreSQL makes is proven: its USING never reaches the log
    assert_exact(config)


@pytest.mark.parametrize("policy", ["resnapshot", "stop"])
def test_a_postgres_rewrite_under_each_policy_on_the_spark_engine_with_history(pg: PostgresHarness, tmp_path: Path,
                                                                              lazy_spark, policy: str) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, "spark", policy)
    lagging_across(pg, config, lazy_spark, [PG_REWRITES["using-multiply"], PG_REWRITES["char-shorter"]])
    capture.run(config, "shop")
    snap = DeltaSnapshot(config.lake, "shop", "items")
    if policy == "stop":
        held, rows = snap.applied_scn(), snap.read().to_pylist()
        with pytest.raises(SchemaDriftError, match=r"(?s)'items'.*TYPE bigint.*policy is stop"):
            sync_source(lazy_spark, config, "shop")
        assert snap.applied_scn() == held and snap.read().to_pylist() == rows
        return
    [result] = sync_source(lazy_spark, config, "shop")
    assert result.bootstrapped_at is not None
    assert_exact(config)


@pytest.mark.parametrize("rewrite", ["VACUUM FULL items", "CLUSTER items USING items_pkey"])
def test_postgres_rewrites_that_keep_values_break_nothing(pg: PostgresHarness, tmp_path: Path, lazy_spark,
                                                         rewrite: str) -> None:
    """A rewrite looks like ALTER ... TYPE ... USING to capture (a new relfilenode, no row events): the table is
    read again, a read too many, never a wrong row; the capture after it goes on as before."""
    pg_items(pg)
    config = configured(pg, tmp_path, "local")
    lagging_across(pg, config, lazy_spark, [rewrite])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is not None
    assert_snapshots_match(config)
    pg.execute(["UPDATE items SET note = 'after' WHERE id = 3"])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None and result.events == 1
    assert_snapshots_match(config)


# -- MariaDB -----------------------------------------------------------------------------------------------------

MY_TABLE = ("CREATE TABLE items (id INT PRIMARY KEY, n INT, dt DATETIME(6), tm TIME(3), v VARCHAR(10), "
            "vb VARBINARY(8), s SET('a','b','c'), e ENUM('x','y')) "
            "DEFAULT CHARSET = utf8mb4")
MY_ROWS = [(i, -i, f"2026-01-01 10:00:0{i % 10}.987654", f"10:00:0{i % 10}.987654", f"v{i}  ", bytes([i, 0, i]),
            "a,c", "y") for i in range(1, ROWS + 1)]

MY_REWRITES = {
    "datetime-whole-seconds": ["ALTER TABLE items MODIFY dt DATETIME"],
    "time-whole-seconds": ["ALTER TABLE items MODIFY tm TIME(2)"],
    "varchar-to-char": ["ALTER TABLE items MODIFY v CHAR(10)"],
    "varbinary-to-binary": ["ALTER TABLE items MODIFY vb BINARY(8)"],
    "set-reordered": ["ALTER TABLE items MODIFY s SET('c','b','a')"],
    "unsigned-permissive": ["SET SESSION sql_mode = ''", "ALTER TABLE items MODIFY n INT UNSIGNED"],
    "not-null-permissive": ["UPDATE items SET n = NULL WHERE id = 4", "SET SESSION sql_mode = ''",
                            "ALTER TABLE items MODIFY n BIGINT NOT NULL"],
    "charset-permissive": ["SET SESSION sql_mode = ''", "UPDATE items SET v = 'é漢' WHERE id = 5",
                           "ALTER TABLE items MODIFY v VARCHAR(20) CHARACTER SET latin1"],
    "if-exists-narrowing": ["ALTER TABLE IF EXISTS items MODIFY dt DATETIME(3)"],
    # The same declared type: a MODIFY without a character set takes the table's default, converting text.
    "same-type-table-charset": ["SET SESSION sql_mode = ''", "ALTER TABLE items DEFAULT CHARACTER SET latin1",
                                "UPDATE items SET v = 'ü字' WHERE id = 6", "ALTER TABLE items MODIFY v VARCHAR(10)"],
}
MY_PROVEN = {
    "longer-varchar": ("ALTER TABLE items MODIFY v VARCHAR(200)", "retyped v: varchar(10) → varchar(200)"),
    "wider-int": ("ALTER TABLE items MODIFY n BIGINT", "retyped n: int(11) → bigint(20)"),
    "set-appended": ("ALTER TABLE items MODIFY s SET('a','b','c','d')",
                     "retyped s: set('a','b','c') → set('a','b','c','d')"),
    "more-fractions": ("ALTER TABLE items MODIFY tm TIME(6)", "retyped tm: time(3) → time(6)"),
    # A character set named for a new column converts nothing.
    "added-with-charset": ("ALTER TABLE items ADD COLUMN c2 VARCHAR(10) CHARACTER SET latin1", "added c2"),
}


def my_items(harness: MysqlHarness) -> None:
    harness.execute([MY_TABLE] + [("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row) for row in MY_ROWS])


def mariadb_across(mariadb: Any, tmp_path: Path, spark: Any, changes: list[str],
                   engine: str = "local") -> tuple[MysqlHarness, DatabusConfig, Any]:
    """A MariaDB table synced, ``changes`` made while the snapshot lags, and the cycle after them."""
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, engine)
    lagging_across(harness, config, spark, [s.format(db=harness.database) for s in changes])
    [result] = cycle(config, spark)
    return harness, config, result


@pytest.mark.parametrize(("rewrite", "engine"), each_and_one_on_spark(MY_REWRITES, "varchar-to-char"))
def test_a_mariadb_modify_that_rewrites_values_reaches_the_snapshot(mariadb: Any, tmp_path: Path, lazy_spark,
                                                                   rewrite: str, engine: str) -> None:
    _, config, result = mariadb_across(mariadb, tmp_path, lazy_spark, MY_REWRITES[rewrite], engine)
    assert result.evolved is None
    assert_exact(config)


@pytest.mark.parametrize(("change", "engine"), each_and_one_on_spark(MY_PROVEN, "longer-varchar"))
def test_a_mariadb_change_proven_to_keep_values_evolves_in_place(mariadb: Any, tmp_path: Path, lazy_spark,
                                                                change: str, engine: str) -> None:
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, engine)
    statement, described = MY_PROVEN[change]
    lagging_across(harness, config, lazy_spark, [statement])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None
    assert (result.evolved or "").endswith(described)
    assert_exact(config)


def test_a_mariadb_rewrite_under_stop_holds_the_snapshot(mariadb: Any, tmp_path: Path, lazy_spark) -> None:
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, "local", "stop")
    lagging_across(harness, config, lazy_spark, MY_REWRITES["varchar-to-char"])
    capture.run(config, "shop")
    snap = DeltaSnapshot(config.lake, "shop", "items")
    held = snap.applied_scn()
    with pytest.raises(SchemaDriftError, match=r"(?s)'items'.*MODIFY v CHAR\(10\).*policy is stop"):
        sync_source(lazy_spark, config, "shop")
    assert snap.applied_scn() == held


# -- the allow-list -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "kept"), [
    ("int(11)", "bigint(20)", True), ("smallint(5) unsigned", "int(11)", True),
    ("int(11)", "int(10) unsigned", False), ("bigint(20) unsigned", "bigint(20)", False),
    ("tinyint(4)", "decimal(3,0)", True), ("int(11)", "decimal(9,0)", False),
    ("decimal(10,2)", "decimal(12,3)", True), ("decimal(10,2)", "decimal(10,3)", False), ("float", "double", True),
    ("varchar(10)", "varchar(200)", True), ("varchar(10)", "varchar(9)", False), ("varchar(10)", "char(10)", False),
    ("char(10)", "varchar(10)", True), ("varchar(16383)", "text", True), ("varchar(16384)", "text", False),
    ("varbinary(8)", "binary(8)", False), ("varbinary(8)", "blob", True), ("binary(4)", "binary(8)", False),
    ("set('a','b')", "set('a','b','c')", True), ("set('a','b')", "set('b','a')", False),
    ("enum('x','y')", "enum('x','y','z')", True), ("enum('x','y')", "enum('y','x')", False),
    ("datetime(3)", "datetime(6)", True), ("datetime(6)", "datetime", False), ("time(6)", "time(2)", False),
    ("date", "datetime", False), ("text", "mediumtext", True), ("mediumtext", "text", False),
    ("year(4)", "int(11)", False),
])
def test_mysql_keeps_values_only_where_every_value_converts_to_itself(old: str, new: str, kept: bool) -> None:
    from dagster_databus.sources.mysql.retypes import keeps_values

    assert keeps_values(old, new) is kept


# -- MariaDB statements that name a captured table anywhere ---------------------------------------------------------

SWAPS = {
    "alter-if-exists-default": ["ALTER TABLE IF EXISTS items ADD COLUMN c INT DEFAULT 7"],
    "commented-qualified-quoted": ["/* migration 12 */ ALTER TABLE `{db}`.`items` MODIFY `v` CHAR(10)"],
    "rename-if-exists-swap": ["CREATE TABLE items_new LIKE items",
                              "INSERT INTO items_new SELECT id + 100, n, dt, tm, v, vb, s, e FROM items",
                              "RENAME TABLE IF EXISTS items TO items_old, items_new TO items"],
    "rename-captured-not-first": ["CREATE TABLE x LIKE items", "INSERT INTO x SELECT id, n + 1, dt, tm, v, vb, s, e "
                                  "FROM items WHERE id < 5", "RENAME TABLE x TO y, items TO items_old, y TO items"],
    "drop-two-then-create": ["CREATE TABLE other (id INT PRIMARY KEY)", "DROP TABLE other, items",
                             "CREATE TABLE items (id INT PRIMARY KEY, n INT, dt DATETIME(6), tm TIME(3), "
                             "v VARCHAR(10), vb VARBINARY(8), s SET('a','b','c'), e ENUM('x','y'))",
                             "INSERT INTO items (id, n) VALUES (500, 5)"],
    "alter-rename-into-place": ["CREATE TABLE fresh LIKE items", "INSERT INTO fresh (id, n) VALUES (7, 70)",
                                "RENAME TABLE items TO gone", "ALTER TABLE fresh RENAME TO items"],
    "exchange-partition": ["CREATE TABLE parted (id INT PRIMARY KEY, n INT, dt DATETIME(6), tm TIME(3), "
                           "v VARCHAR(10), vb VARBINARY(8), s SET('a','b','c'), e ENUM('x','y')) DEFAULT CHARSET = "
                           "utf8mb4 PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (1000))",
                           "INSERT INTO parted (id, n) VALUES (900, 9)",
                           "ALTER TABLE parted EXCHANGE PARTITION p0 WITH TABLE items"],
}


@pytest.mark.parametrize(("swap", "engine"), each_and_one_on_spark(SWAPS, "rename-captured-not-first"))
def test_a_mariadb_statement_that_names_the_table_anywhere_is_followed(mariadb: Any, tmp_path: Path, lazy_spark,
                                                                      swap: str, engine: str) -> None:
    harness, config, _ = mariadb_across(mariadb, tmp_path, lazy_spark, SWAPS[swap], engine)
    assert_exact(config)
    harness.execute(["UPDATE items SET n = 1000 WHERE n IS NOT NULL"])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None
    assert_exact(config)


@pytest.mark.server  # started in the test: a server whose names compare without case
def test_names_compare_as_the_server_compares_them(tmp_path: Path, lazy_spark) -> None:
    from tests.support.mariadb import MariaDBServer

    server = MariaDBServer(extra_args=["--lower-case-table-names=1"])
    try:
        server.execute("CREATE DATABASE Shop")
        harness = MysqlHarness(server, database="Shop")
        harness.execute(["CREATE TABLE Orders (Id INT PRIMARY KEY, Note VARCHAR(20))",
                         "INSERT INTO Orders VALUES (1, 'a'), (2, 'b')"])
        config = make_config(tmp_path / "lake", harness.source_config("shop", [("Orders", ["Id"])]),
                             merge={"engine": "local"})
        cycle(config, lazy_spark)
        harness.execute(["INSERT INTO Orders VALUES (3, 'c')", "UPDATE Orders SET Note = 'z' WHERE Id = 1",
                         "DELETE FROM Orders WHERE Id = 2"])
        harness.execute(["ALTER TABLE orders ADD COLUMN Extra INT DEFAULT 5"])  # as the application writes it
        captured = capture.run(config, "shop")
        assert captured.events == 3
        [result] = sync_source(lazy_spark, config, "shop")
        assert result.evolved == "added Extra (filled with 5)"
        assert_snapshots_match(config)
    finally:
        server.close()


@pytest.mark.parametrize(("query", "tables"), [
    ("ALTER TABLE IF EXISTS `Shop`.`t` ADD COLUMN x INT", [("Shop", "t")]),
    ("/* c */ ALTER ONLINE IGNORE TABLE t -- why\n MODIFY v CHAR(10)", [(None, "t")]),
    ("RENAME TABLE IF EXISTS x TO y, t TO t_old, y TO t", [(None, "x"), (None, "y"), (None, "t"), (None, "t_old"),
                                                          (None, "y"), (None, "t")]),
    ("rename table `db`.`a b` to c", [("db", "a b"), (None, "c")]),
    ("DROP TABLE IF EXISTS other, `db`.t /* generated by server */", [(None, "other"), ("db", "t")]),
    ("DROP TEMPORARY TABLE IF EXISTS t", None), ("CREATE TEMPORARY TABLE t (x INT)", None),
    ("TRUNCATE `t`", [(None, "t")]), ("truncate table db.t", [("db", "t")]),
    ("CREATE OR REPLACE TABLE t (id INT PRIMARY KEY)", [(None, "t")]),
    ("CREATE TABLE IF NOT EXISTS t LIKE u", [(None, "t")]),
    ("ALTER TABLE t RENAME TO t2", [(None, "t"), (None, "t2")]),
    ("ALTER TABLE t RENAME COLUMN a TO b", [(None, "t")]),
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE t2", [(None, "t"), (None, "t2")]),
    ("ALTER TABLE `status` ALTER COLUMN x SET DEFAULT 'RENAME TABLE q TO r'", [(None, "status")]),
    ("INSERT INTO t VALUES (1)", None), ("GRANT ALL ON t TO x", None), ("ALTER USER x", None),
])
def test_a_statement_names_its_tables_as_the_mysql_grammar_reads_them(query: str, tables: Any) -> None:
    from dagster_databus.sources.mysql.ddl import table_ddl

    ddl = table_ddl(query)
    assert (None if ddl is None else list(ddl.tables)) == tables


def test_a_postgres_capture_lagging_behind_a_migration_decodes_old_rows_with_the_shapes_the_log_recorded(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    pg.execute(["CREATE TYPE status AS ENUM ('new', 'shipped')", "CREATE DOMAIN qty AS INT CHECK (VALUE >= 0)",
                "CREATE TABLE items (id INT PRIMARY KEY, st status, q qty, v TEXT)",
                "INSERT INTO items SELECT g, 'new', g, 'v' || g FROM generate_series(1, 10) g"])
    config = configured(pg, tmp_path, "local")
    cycle(config, lazy_spark)
    pg.execute(["UPDATE items SET st = 'shipped', q = q + 40 WHERE id <= 5",
                "INSERT INTO items VALUES (11, 'new', 3, 'x')"])
    pg.server.execute("ALTER TABLE items ALTER COLUMN st TYPE text USING st::text", "DROP TYPE status",
                      "ALTER TABLE items DROP COLUMN q", "DROP DOMAIN qty", database=pg.database)
    pg.execute(["UPDATE items SET v = 'after' WHERE id = 2"])
    for _ in range(2):  # the first run decodes the old rows; a second finds nothing left to fail on
        cycle(config, lazy_spark)
    events = [e.event for e in ChangeLog(config.lake, "shop").read()]
    old = {e.key[0]: (e.row["st"], e.row["q"]) for e in events if "q" in e.row and e.row["q"] is not None}
    assert old == {1: ("shipped", 41), 2: ("shipped", 42), 3: ("shipped", 43), 4: ("shipped", 44),
                   5: ("shipped", 45), 11: ("new", 3)}
    assert_snapshots_match(config)


PG_REPLACEMENTS = {
    "rename-swap": ["CREATE TABLE items_new (LIKE items INCLUDING ALL)",
                    "INSERT INTO items_new SELECT id + 100, price, code, doc, at, note FROM items",
                    "ALTER TABLE items RENAME TO items_old", "ALTER TABLE items_new RENAME TO items"],
    "drop-and-create": ["DROP TABLE items", PG_TABLE, "INSERT INTO items (id, note) VALUES (500, 'new')"],
    "set-schema-and-create": ["CREATE SCHEMA archive", "ALTER TABLE items SET SCHEMA archive", PG_TABLE,
                              "INSERT INTO items (id, note) SELECT id, note FROM archive.items WHERE id < 5"],
    "out-of-the-publication": ["ALTER PUBLICATION {publication} DROP TABLE items",
                               "UPDATE items SET note = 'while unpublished' WHERE id < 6",
                               "DELETE FROM items WHERE id = 7",
                               "ALTER PUBLICATION {publication} ADD TABLE items"],
    "out-until-install": ["ALTER PUBLICATION {publication} DROP TABLE items",
                          "UPDATE items SET note = 'while unpublished' WHERE id < 6"],
}


@pytest.mark.parametrize(("replacement", "engine"), each_and_one_on_spark(PG_REPLACEMENTS, "rename-swap"))
def test_a_postgres_table_replaced_or_unpublished_behind_captures_back_is_read_again(
        pg: PostgresHarness, tmp_path: Path, lazy_spark, replacement: str, engine: str) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, engine)
    publication = f'"{config.source("shop").publication_name}"'
    lagging_across(pg, config, lazy_spark, [s.format(publication=publication) for s in PG_REPLACEMENTS[replacement]])
    [result] = cycle(config, lazy_spark)  # install publishes the table again where it is not
    assert result.bootstrapped_at is not None
    assert_exact(config)
    pg.execute(["UPDATE items SET note = 'later' WHERE id = 3"])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None
    assert_exact(config)


GAP_POLICIES = [("fail", "local"), ("bootstrap", "local"), ("bootstrap", "spark")]


@pytest.mark.parametrize(("on_purged", "engine"), GAP_POLICIES)
def test_a_publication_dropped_and_created_again_behind_captures_back_is_a_gap_named_or_bootstrapped(
        pg: PostgresHarness, tmp_path: Path, lazy_spark, on_purged: str, engine: str) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, engine, on_purged=on_purged)
    cycle(config, lazy_spark)
    pg.execute(["UPDATE items SET note = 'before the drop' WHERE id = 1"])
    publication = config.source("shop").publication_name
    pg.server.execute(f'DROP PUBLICATION "{publication}"', "UPDATE items SET note = 'unpublished' WHERE id = 4",
                      f'CREATE PUBLICATION "{publication}" FOR TABLE items', database=pg.database)
    pg.execute(["UPDATE items SET note = 'after' WHERE id = 2"])
    capture.install(config, "shop")  # what validate says first: the new publication lacks install's options
    if on_purged == "fail":
        [problem] = capture.validate(config).problems["shop"]
        assert "cannot decode the changes it holds" in problem and "databus bootstrap --source shop" in problem
    gap_named_or_bootstrapped(pg, config, lazy_spark, r"publication '.*' was dropped",
                              "UPDATE items SET note = 'later' WHERE id = 3")


def gap_named_or_bootstrapped(harness: SourceHarness, config: DatabusConfig, spark: Any, problem: str,
                              later: str) -> None:
    """After a gap behind capture's back: under ``on_purged: fail`` every capture refuses with the same
    ``LogGapError`` (never "run again"), naming on_purged; under ``bootstrap`` the capture starts afresh, and the
    snapshots equal the source then and after the ``later`` change."""
    if config.source("shop").on_purged == "fail":
        for _ in range(2):
            with pytest.raises(LogGapError, match=problem) as err:
                capture.run(config, "shop")
            assert "on_purged: bootstrap" in err.value.fix
        return
    assert capture.run(config, "shop").bootstrapped
    if config.source("shop").tables[0].history:  # its versions since the gap are unknown: said, then started again
        with pytest.raises(HistoryGapError, match=r"history of shop\.items .* the changes in between are gone"):
            sync_source(spark, config, "shop")
        sync_source(spark, config, "shop", mode="bootstrap")
    else:
        sync_source(spark, config, "shop")
    assert_exact(config)
    harness.execute([later])
    [result] = cycle(config, spark)
    assert result.events == 1
    assert_exact(config)


# -- SQLite ------------------------------------------------------------------------------------------------------

def backup(source: Path, to: Path) -> None:
    """A consistent copy of the database file, as a backup tool takes it."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(to)) as dst:
        src.backup(dst)


@pytest.mark.parametrize(("on_purged", "engine"), GAP_POLICIES)
def test_a_sqlite_file_restored_from_a_backup_then_written_to_is_a_gap_named_or_bootstrapped(
        tmp_path: Path, lazy_spark, on_purged: str, engine: str) -> None:
    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)"]
                    + [("INSERT INTO items VALUES (?, ?)", (i, f"v{i}")) for i in range(1, 21)])
    config = configured(harness, tmp_path, engine, on_purged=on_purged)
    cycle(config, lazy_spark)
    backup(harness.path, tmp_path / "backup.db")
    harness.execute([("UPDATE items SET v = 'after the backup' WHERE id <= ?", (3,)),
                     "DELETE FROM items WHERE id = 20"])
    cycle(config, lazy_spark)
    backup(tmp_path / "backup.db", harness.path)  # restored: the three updates and the delete are gone
    # More writes than the gap: the txlog's newest SCN passes the checkpoint's again.
    harness.execute([("UPDATE items SET v = ? WHERE id = ?", (f"new {i}", i)) for i in range(5, 17)])
    gap_named_or_bootstrapped(harness, config, lazy_spark, "does not hold the mark capture left in it",
                              "UPDATE items SET v = 'later' WHERE id = 1")


def test_a_sqlite_capture_that_dies_after_its_mark_and_before_its_checkpoint_goes_on(tmp_path: Path,
                                                                                     lazy_spark) -> None:
    harness = SqliteHarness(tmp_path / "source.db")
    harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO items VALUES (1, 'a')"])
    config = configured(harness, tmp_path, "local")
    cycle(config, lazy_spark)
    harness.execute(["UPDATE items SET v = 'b' WHERE id = 1"])
    source = open_source(config.source("shop"))
    checkpoint = ChangeLog(config.lake, "shop").checkpoint()
    assert checkpoint is not None
    stats = PollStats(until=checkpoint.scn)
    next(iter(source.stream.poll(checkpoint.scn, checkpoint.epoch, stats, checkpoint.state)))  # a mark left, no commit
    assert stats.state["incarnation"] != checkpoint.state["incarnation"]
    [result] = cycle(config, lazy_spark)
    assert result.events == 1
    assert_snapshots_match(config)


PARTED = ["CREATE TABLE parted (id INT, region INT, body TEXT, n INT, PRIMARY KEY (id, region)) "
          "PARTITION BY LIST (region)",
          "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1)",
          "CREATE TABLE parted_2 PARTITION OF parted FOR VALUES IN (2)"]


def big_text(seed: int) -> str:
    return random.Random(seed).randbytes(40_000).hex()  # does not compress: stored out of line (TOAST)


def test_every_partition_of_a_partitioned_table_logs_whole_old_rows_even_ones_made_after_install(
        pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    pg.execute(PARTED + [("INSERT INTO parted VALUES (?, ?, ?, 0)", (i, 1 + i % 2, big_text(i))) for i in range(6)])
    document = pg.source_config("shop", [("parted", ["id", "region"])])
    config = make_config(tmp_path / "lake", document, merge={"engine": "local"})
    cycle(config, lazy_spark)
    identities = pg.query("SELECT relname, relreplident FROM pg_class WHERE relname LIKE 'parted%' AND relkind IN "
                          "('r', 'p') ORDER BY 1")
    assert identities == [("parted", "f"), ("parted_1", "f"), ("parted_2", "f")]
    pg.execute(["UPDATE parted SET n = n + 1"])  # the big values untouched: only a FULL old row carries them
    cycle(config, lazy_spark)
    assert_snapshots_match(config)
    # A partition made later has the default identity until install sets it: validate and capture say so.
    pg.execute(["CREATE TABLE parted_3 PARTITION OF parted FOR VALUES IN (3)"])
    [problem] = capture.validate(config).problems["shop"]
    assert "partitions public.parted_3 of table public.parted" in problem and "databus install" in problem
    with pytest.raises(CaptureNotInstalledError, match=r"parted_3"):
        capture.run(config, "shop")
    capture.install(config, "shop")
    pg.execute([("INSERT INTO parted VALUES (?, 3, ?, 0)", (i, big_text(i))) for i in range(10, 13)])
    pg.execute(["UPDATE parted SET n = n + 10"])
    cycle(config, lazy_spark)
    assert_snapshots_match(config)


def test_a_table_others_inherit_from_is_refused_before_anything_is_read(pg: PostgresHarness, tmp_path: Path) -> None:
    pg.execute(["CREATE TABLE base (id INT PRIMARY KEY, v TEXT)", "CREATE TABLE child (extra INT) INHERITS (base)",
                "INSERT INTO child VALUES (1, 'in the child', 5)"])
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("base", ["id"])]), merge={"engine": "local"})
    with pytest.raises(CaptureNotInstalledError, match=r"1 tables inherit from table public\.base"):
        capture.install(config, "shop")
    assert not pg.query("SELECT 1 FROM pg_publication")  # refused before anything was made


PARTITION_MAINTENANCE = {
    "truncate-a-partition": ["TRUNCATE parted_1"],
    "detach": ["ALTER TABLE parted DETACH PARTITION parted_2"],
    "attach-with-rows": ["CREATE TABLE parted_3 (LIKE parted INCLUDING ALL)",
                         "INSERT INTO parted_3 VALUES (30, 3, 'attached', 0), (31, 3, 'attached', 0)",
                         "ALTER TABLE parted ATTACH PARTITION parted_3 FOR VALUES IN (3)"],
    "drop-a-partition": ["DROP TABLE parted_2"],
    "vacuum-full-a-partition": ["VACUUM FULL parted_1"],  # rewrites, values kept: read again, nothing broken
}


@pytest.mark.parametrize(("maintenance", "engine"),
                         each_and_one_on_spark(PARTITION_MAINTENANCE, "attach-with-rows"))
def test_partition_maintenance_with_no_row_events_is_followed(pg: PostgresHarness, tmp_path: Path, lazy_spark,
                                                             maintenance: str, engine: str) -> None:
    pg.execute(PARTED + [("INSERT INTO parted VALUES (?, ?, ?, 0)", (i, 1 + i % 2, f"b{i}")) for i in range(12)])
    config = configured(pg, tmp_path, engine, table=("parted", ["id", "region"]))
    cycle(config, lazy_spark)
    pg.execute(["UPDATE parted SET n = n + 1 WHERE id < 4"])
    capture.run(config, "shop")  # the snapshot lags across the maintenance
    pg.server.execute(*PARTITION_MAINTENANCE[maintenance], database=pg.database)
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is not None
    assert_exact(config)
    pg.execute(["INSERT INTO parted VALUES (100, 1, 'later', 0)"])  # into parted_1, which every case keeps
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None and result.events == 1
    assert_exact(config)


def test_a_rewrite_of_an_idle_table_is_read_again_once(pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    """No row changes after the rewrite: the read it causes absorbs it, and the next syncs read nothing again
    (the policy test in test_postgres_capture.py has the case where the change is recorded past the read's SCN)."""
    pg_items(pg)
    config = configured(pg, tmp_path, "local")
    cycle(config, lazy_spark)
    pg.server.execute("VACUUM FULL items", database=pg.database)
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is not None
    for _ in range(2):
        [result] = cycle(config, lazy_spark)
        assert result.bootstrapped_at is None
    assert_exact(config)
