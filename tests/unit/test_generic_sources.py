"""The parts the SQL sources share (``sources.generic``), on their own: the epoch check, and the catalog's
algorithm over a dialect of its own (an in-memory SQLite database described by plain SQL), without any kind."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConfigError, EpochMismatchError, UnsupportedTypeError
from dagster_databus.sources.generic.catalog import CatalogDialect, SqlCatalog
from dagster_databus.sources.generic.epoch import require_same_epoch


def test_the_epoch_check_passes_the_same_epoch_or_none_and_refuses_another_with_the_kinds_words() -> None:
    require_same_epoch(None, "e1", Scn(5), "problem", "fix", "src")
    require_same_epoch("e1", "e1", Scn(5), "problem", "fix", "src")
    with pytest.raises(EpochMismatchError) as caught:
        require_same_epoch("e0", "e1", Scn(5), "the database was replaced", "bootstrap it", "src")
    assert caught.value.problem == "the database was replaced" and caught.value.fix == "bootstrap it"


def _column(name: str, row: tuple[Any, ...]) -> Column | str:
    declared = row[1]
    if declared == "INTEGER":
        return Column(name=name, type=ColumnType("long"), source_type=declared)
    return f"{name} {declared}"


DIALECT = CatalogDialect(
    label="Test", unmapped_fix="use INTEGER", container="database",
    tables="SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
    columns="SELECT name, type FROM pragma_table_info(:table_name) ORDER BY cid",
    unique="SELECT NULL, name FROM pragma_table_info(:table_name) WHERE pk UNION ALL SELECT i.name, c.name "
           "FROM pragma_index_list(:table_name) AS i, pragma_index_info(i.name) AS c WHERE i.\"unique\"",
    column=_column, quote=quote_ansi, first_row=" LIMIT 1")


class _Table:
    def __init__(self, name: str, key: tuple[str, ...]) -> None:
        self.name, self.primary_key = name, key


def _catalog(tmp_path: Any, *tables: _Table) -> SqlCatalog[sqlite3.Cursor]:
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript("CREATE TABLE a (id INTEGER PRIMARY KEY, n INTEGER UNIQUE, x INTEGER);"
                           "CREATE TABLE b (id INTEGER, t TEXT); INSERT INTO a VALUES (1, NULL, 2);")
    return SqlCatalog(DIALECT, "src", tables, lambda: sqlite3.connect(path), "the test database")


def test_the_catalog_reads_maps_and_checks_a_table_and_finds_no_null_key(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path, _Table("a", ("ID",)))
    schema = catalog.schemas()["a"]
    assert schema.primary_key == ("id",) and schema.column_names == ["id", "n", "x"]
    assert catalog.null_keys() == []


def test_the_catalog_refuses_a_missing_table_naming_the_tables_there_are(tmp_path: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        _catalog(tmp_path, _Table("c", ("id",))).preflight()
    assert "table 'c' does not exist in the test database" in str(caught.value)
    assert "use one of the database's tables: a, b" in str(caught.value)


def test_the_catalog_refuses_unmapped_columns_and_a_key_nothing_makes_unique(tmp_path: Any) -> None:
    with pytest.raises(UnsupportedTypeError, match=r"column\(s\) t TEXT .*docs/types.md lists the Test mapping"):
        _catalog(tmp_path, _Table("b", ("id",))).preflight()
    with pytest.raises(ConfigError, match="not the primary key of 'a' nor covered by a UNIQUE index"):
        _catalog(tmp_path, _Table("a", ("x",))).preflight()


def test_the_catalog_finds_a_null_key(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path, _Table("a", ("n",)))  # a UNIQUE column may hold NULL
    assert [p.split(":")[0] for p in catalog.null_keys()] == ["table 'a' has rows whose key (n) holds NULL"]
