"""The key-range reads written once over each kind's ``ReadDialect`` (``sources.generic.reads``): the SQL a dialect
gives them, with no server (a cursor that records what it is asked), and the typed range specs that travel to tasks."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConfigError
from dagster_databus.sources.base import KeyRange, RangeRead, RowSelection
from dagster_databus.sources.generic.reads import KeyedReads, KeyedTable, page_rows, spec_of
from dagster_databus.sources.mysql.reads import MysqlRangeSpec
from dagster_databus.sources.oracle.dialect import READS as ORACLE
from dagster_databus.sources.oracle.reads import OracleRangeSpec, oracle_filter
from dagster_databus.sources.sqlite.dialect import READS as SQLITE
from dagster_databus.sources.sqlite.reads import SqliteRangeSpec


class Recording:
    """A DB-API cursor that records each query and answers ``keys`` in turn to ``fetchone``."""

    def __init__(self, keys: list[tuple[Any, ...] | None], fail: Exception | None = None) -> None:
        self.queries: list[tuple[str, Any]] = []
        self.keys = keys
        self.fail = fail

    def execute(self, query: str, params: Any) -> None:
        self.queries.append((query, params))
        if self.fail is not None:
            raise self.fail

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.keys.pop(0) if self.keys else None

    def fetchall(self) -> list[Any]:
        return []


def test_oracle_reads_as_of_one_scn_with_named_binds_and_offset_fetch() -> None:
    chosen = oracle_filter('"ORDERS"', {"id": '"ID"', "status": '"STATUS"'}, "status = 'new'")
    cursor = Recording([(5,), None, (6,)])  # a cut at 5, no second cut, a key after 5: two ranges
    table = KeyedTable("orders", '"ORDERS" AS OF SCN :scn', ('"ID"',), chosen, binds={"scn": 77}, shown='"ORDERS"')
    keyed = KeyedReads(ORACLE, cursor, table)
    assert keyed.ranges(10, KeyRange((1,), (100,))) == (KeyRange((1,), (5,)), KeyRange((5,), (100,)))
    assert cursor.queries[0] == (
        'SELECT "ID" FROM "ORDERS" AS OF SCN :scn WHERE (("ID" > :a0)) AND NOT (("ID" > :t0)) AND (("STATUS" = :w0)) '
        'ORDER BY "ID" OFFSET :n ROWS FETCH NEXT 1 ROWS ONLY', {"scn": 77, "a0": 1, "t0": 100, "w0": "new", "n": 9})
    keyed.fetch('"ID"', 3)(KeyRange((4,), None))
    assert cursor.queries[-1] == (
        'SELECT "ID" FROM "ORDERS" AS OF SCN :scn WHERE (("ID" > :a0)) AND (("STATUS" = :w0)) ORDER BY "ID" '
        'FETCH FIRST :n ROWS ONLY', {"scn": 77, "a0": 4, "w0": "new", "n": 3})


def test_sqlite_reads_page_by_row_values_with_question_marks() -> None:
    cursor = Recording([])
    keyed = KeyedReads(SQLITE, cursor, KeyedTable("t", '"t"', ('"a"', '"b"')))
    keyed.fetch('"a", "b", "v"', 2)(KeyRange((1, "x"), (3, "z")))
    assert cursor.queries == [('SELECT "a", "b", "v" FROM "t" WHERE ("a", "b") > (?, ?) AND ("a", "b") <= (?, ?) '
                               'ORDER BY "a", "b" LIMIT ?', [1, "x", 3, "z", 2])]
    assert keyed.ranges(5) == (KeyRange(None, None),)  # no key at all: one open range


def test_a_refused_selection_names_the_dialect_and_the_table() -> None:
    import sqlite3

    cursor = Recording([], fail=sqlite3.OperationalError("no such column: nope"))
    keyed = KeyedReads(SQLITE, cursor, KeyedTable("t", '"t"', ('"id"',), SQLITE.filter("t", {"id": '"id"'}, "id > 1")))
    with pytest.raises(ConfigError, match=r"SQLite cannot select rows where id > 1 of 't': no such column: nope"):
        keyed.check(RowSelection(where="id > 1"))
    assert cursor.queries == [('SELECT 1 FROM "t" WHERE (("id" > 1)) LIMIT 0', [])]
    other = KeyedReads(SQLITE, Recording([], fail=ValueError("not the driver's")), KeyedTable("t", '"t"', ('"id"',)))
    with pytest.raises(ValueError, match="not the driver's"):
        other.check(RowSelection())


def test_range_specs_are_typed_picklable_and_each_readers_own() -> None:
    schema = TableSchema("s", "t", (Column("id", ColumnType("long"), "INTEGER"),), ("id",))
    specs = [SqliteRangeSpec(page_rows=page_rows(50_000), path="/db", busy_timeout_s=5.0),
             MysqlRangeSpec(page_rows=page_rows(7), connection={"password": "pw"}, zero_dates="error", era=0,
                            reads="snapshot"),
             OracleRangeSpec(page_rows=10, connection={"password": "pw"}, table='"T"', key=('"ID"',),
                             columns=(('"ID"', "NUMBER"),))]
    assert [s.page_rows for s in specs[:2]] == [10_000, 7]
    for spec in specs:
        assert pickle.loads(pickle.dumps(spec)) == spec
        assert "pw" not in repr(spec)
    read = RangeRead("sqlite", "s", schema, specs[0], (KeyRange(None, None),), None)
    assert spec_of(read, SqliteRangeSpec) is specs[0]
    with pytest.raises(TypeError, match="carries a SqliteRangeSpec, not a MysqlRangeSpec"):
        spec_of(read, MysqlRangeSpec)
