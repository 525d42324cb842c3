"""Schema changes a DBA runs that rewrite stored values with no row events (issue 48): a change is harmless only
when proven. Each statement below converts values in the source (``USING``, a shorter CHAR, JSON to JSONB, fewer
fractional seconds, VARCHAR to CHAR, BINARY padding, a reordered SET, signedness under a permissive sql_mode); the
sync after it must leave the snapshot (and history) equal to the source, or stop under ``schema_changes: stop``
with the snapshot held. Changes proven to keep every value (a longer VARCHAR, a wider integer, SET members
appended) still evolve in place, and rewrites that keep values (VACUUM FULL, CLUSTER) change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dagster_databus import pipeline
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.dataplane.history import HistoryTable
from dagster_databus.errors import SchemaDriftError
from dagster_databus.snapshot.merge import sync_source
from dagster_databus.snapshot.reconcile import compare_rows
from dagster_databus.sources import open_source, read_rows
from tests.conftest import assert_snapshots_match, cycle
from tests.harness import MysqlHarness, PostgresHarness, SourceHarness, make_config

ROWS = 12


def configured(harness: SourceHarness, tmp_path: Path, engine: str, policy: str = "evolve",
               history: bool = False) -> DatabusConfig:
    document = harness.source_config("shop", [("items", ["id"])], schema_changes=policy)
    document["tables"][0]["history"] = history
    return make_config(tmp_path / "lake", document, merge={"engine": engine})


def lagging_across(harness: SourceHarness, config: DatabusConfig, spark: Any, changes: list[Any]) -> None:
    """Synced, then a change of the old shape captured but not merged, so the snapshot lags across ``changes``;
    then the changes (in autocommit, each its own transaction, as a DBA's session runs them), and a row written
    in the new shape."""
    cycle(config, spark)
    harness.execute(["UPDATE items SET id = id WHERE id = 1"])
    harness.execute([("DELETE FROM items WHERE id = ?", (ROWS,))])
    pipeline.capture(config, "shop")
    assert isinstance(harness, MysqlHarness | PostgresHarness)
    harness.server.execute(*changes, database=harness.database)
    harness.execute(["UPDATE items SET id = id WHERE id = 2"])


def assert_history_current(config: DatabusConfig) -> None:
    """The history's open versions are the source's rows."""
    src = open_source(config.source("shop"))
    names = src.schemas()["items"].column_names
    versions = HistoryTable(config.lake, "shop", "items").read(with_meta=True).to_pylist()
    current = [{k: v[k] for k in names} for v in versions if v["__end_scn"] is None]
    result = compare_rows("items", ["id"], read_rows(src, "items"), current)
    assert result.equal, f"history of items: {result}"


# -- PostgreSQL ------------------------------------------------------------------------------------------------

PG_TABLE = ("CREATE TABLE items (id INT PRIMARY KEY, price INT, code CHAR(10), doc JSON, at TIMESTAMPTZ(6), "
            "note TEXT)")
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
}


def pg_items(pg: PostgresHarness) -> None:
    pg.execute([PG_TABLE] + [("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", row) for row in PG_ROWS])


@pytest.mark.parametrize("rewrite", sorted(PG_REWRITES))
def test_a_postgres_type_change_that_rewrites_values_reaches_the_snapshot(pg: PostgresHarness, tmp_path: Path,
                                                                         lazy_spark, rewrite: str) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, "local")
    lagging_across(pg, config, lazy_spark, [PG_REWRITES[rewrite]])
    [result] = cycle(config, lazy_spark)
    assert result.evolved is None  # no type change PostgreSQL makes is proven: its USING never reaches the log
    assert_snapshots_match(config)


@pytest.mark.parametrize("policy", ["resnapshot", "stop"])
def test_a_postgres_rewrite_under_each_policy_on_the_spark_engine_with_history(pg: PostgresHarness, tmp_path: Path,
                                                                              lazy_spark, policy: str) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, "spark", policy, history=True)
    lagging_across(pg, config, lazy_spark, [PG_REWRITES["using-multiply"], PG_REWRITES["char-shorter"]])
    pipeline.capture(config, "shop")
    snap = DeltaSnapshot(config.lake, "shop", "items")
    if policy == "stop":
        held, rows = snap.applied_scn(), snap.read().to_pylist()
        with pytest.raises(SchemaDriftError, match=r"(?s)'items'.*TYPE bigint.*policy is stop"):
            sync_source(lazy_spark, config, "shop")
        assert snap.applied_scn() == held and snap.read().to_pylist() == rows
        return
    [result] = sync_source(lazy_spark, config, "shop")
    assert result.bootstrapped_at is not None
    assert_snapshots_match(config)
    assert_history_current(config)


def test_postgres_rewrites_that_keep_values_change_nothing(pg: PostgresHarness, tmp_path: Path, lazy_spark) -> None:
    pg_items(pg)
    config = configured(pg, tmp_path, "local")
    cycle(config, lazy_spark)
    pg.server.execute("VACUUM FULL items", "CLUSTER items USING items_pkey", database=pg.database)
    pg.execute(["UPDATE items SET note = 'after' WHERE id = 3"])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None and result.evolved is None and result.events == 1
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
    "longer-varchar": ("ALTER TABLE items MODIFY v VARCHAR(200)", "v: varchar(10) → varchar(200)"),
    "wider-int": ("ALTER TABLE items MODIFY n BIGINT", "n: int(11) → bigint(20)"),
    "set-appended": ("ALTER TABLE items MODIFY s SET('a','b','c','d')", "s: set('a','b','c') → set('a','b','c','d')"),
    "more-fractions": ("ALTER TABLE items MODIFY tm TIME(6)", "tm: time(3) → time(6)"),
}


def my_items(harness: MysqlHarness) -> None:
    harness.execute([MY_TABLE] + [("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row) for row in MY_ROWS])


@pytest.mark.parametrize("rewrite", sorted(MY_REWRITES))
def test_a_mariadb_modify_that_rewrites_values_reaches_the_snapshot(mariadb: Any, tmp_path: Path, lazy_spark,
                                                                   rewrite: str) -> None:
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, "local")
    lagging_across(harness, config, lazy_spark, MY_REWRITES[rewrite])
    [result] = cycle(config, lazy_spark)
    assert result.evolved is None
    assert_snapshots_match(config)


@pytest.mark.parametrize(("change", "engine"),
                         [(c, "local") for c in sorted(MY_PROVEN)] + [("longer-varchar", "spark")])
def test_a_mariadb_change_proven_to_keep_values_evolves_in_place(mariadb: Any, tmp_path: Path, lazy_spark,
                                                                change: str, engine: str) -> None:
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, engine, history=engine == "spark")
    statement, described = MY_PROVEN[change]
    lagging_across(harness, config, lazy_spark, [statement])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None
    assert (result.evolved or "").endswith(f"retyped {described}")
    assert_snapshots_match(config)
    if engine == "spark":
        assert_history_current(config)


def test_a_mariadb_rewrite_under_stop_holds_the_snapshot(mariadb: Any, tmp_path: Path, lazy_spark) -> None:
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, "local", "stop")
    lagging_across(harness, config, lazy_spark, MY_REWRITES["varchar-to-char"])
    pipeline.capture(config, "shop")
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


@pytest.mark.parametrize("swap", sorted(SWAPS))
def test_a_mariadb_statement_that_names_the_table_anywhere_is_followed(mariadb: Any, tmp_path: Path, lazy_spark,
                                                                      swap: str) -> None:
    harness = MysqlHarness(mariadb)
    my_items(harness)
    config = configured(harness, tmp_path, "local")
    lagging_across(harness, config, lazy_spark, [s.format(db=harness.database) for s in SWAPS[swap]])
    cycle(config, lazy_spark)
    assert_snapshots_match(config)
    harness.execute(["UPDATE items SET n = 1000 WHERE n IS NOT NULL"])
    [result] = cycle(config, lazy_spark)
    assert result.bootstrapped_at is None
    assert_snapshots_match(config)


@pytest.mark.server  # started in the test: a server whose names compare without case
def test_names_compare_as_the_server_compares_them(tmp_path: Path, lazy_spark) -> None:
    from tests.mariadb import MariaDBServer

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
        capture = pipeline.capture(config, "shop")
        assert capture.events == 3
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
