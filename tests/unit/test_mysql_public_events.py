"""The binlog decoder on bytes real MySQL 8.0 and MariaDB 10.5 servers wrote (``tests/mysql_public_events.py``:
public projects' test data, each with its origin), decoded to the values the origin asserts: table maps'
signedness (YEAR's bit: 0 from MySQL, 1 from MariaDB), character sets, names and ENUM/SET members; v2 row
events of ENUM and SET columns through the same poll as a server's stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_databus.config import parse_config
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.sources.mysql.source import MysqlSource
from dagster_databus.sources.mysql.types import mysql_column_type
from dagster_databus.sources.mysql.wire.tablemap import parse_table_map
from tests.support import mysql_event_fixtures as fx
from tests.support import mysql_public_events as pub
from tests.unit.test_mysql_events import FIXTURE_CHARSETS, poll


@pytest.mark.parametrize("public", pub.TABLE_MAPS, ids=lambda p: p.name)
def test_a_table_map_a_server_wrote_decodes_as_its_origin_says(public: pub.PublicEvent) -> None:
    table_map = parse_table_map(memoryview(public.body), public.server.startswith("MariaDB"), public.name)
    columns = {c.name: c for c in table_map.columns}
    meaning = public.meaning
    if "names" in meaning:
        assert tuple(columns) == meaning["names"]
    for name, unsigned in meaning.get("unsigned", {}).items():
        assert columns[name].unsigned is unsigned, name
    for name, collation in {**meaning.get("collations", {}), **meaning.get("enum_set_collations", {})}.items():
        assert columns[name].collation == collation, name
    assert {n: c.members for n, c in columns.items() if c.members} == meaning["members"]


def source_of(database: str, table: str, declared: tuple[tuple[str, str], ...]) -> MysqlSource:
    """A source whose table is declared as the origin says (its table map names no column)."""
    config = parse_config({"lake": "/nonexistent", "sources": [{
        "name": "shop", "kind": "mysql", "user": "u", "database": database,
        "tables": [{"name": table, "primary_key": ["id"]}]}]}, base=Path("/"))
    source = MysqlSource(config.source("shop"))  # type: ignore[arg-type]
    columns = tuple(Column(name, mysql_column_type(text), text) for name, text in declared)  # type: ignore[arg-type]
    source.catalog.adopt({table: TableSchema("shop", table, columns, ("id",))})
    source.stream.charsets = FIXTURE_CHARSETS
    return source


@pytest.mark.parametrize("events", pub.ROW_EVENTS, ids=lambda e: e[1].name)
def test_enum_and_set_rows_a_server_wrote_decode_to_their_members(
        events: tuple[pub.PublicEvent, pub.PublicEvent]) -> None:
    table_map, rows = events
    described = parse_table_map(memoryview(table_map.body), False, table_map.name)
    source = source_of(described.database, described.table, table_map.meaning["columns"])
    wrapped = [fx.EventFixture(table_map.name, fx.event(fx.TABLE_MAP, table_map.body, log_pos=1000), True,
                               table_map.origin),
               fx.EventFixture(rows.name, fx.event(fx.WRITE_ROWS, rows.body, log_pos=2000), True, rows.origin),
               fx.EventFixture("XID", fx.event(fx.XID, fx.xid_body(7), log_pos=3000), True, "built")]
    [(_, changes)] = poll(source, wrapped)
    assert [row for _, _, row, _ in changes] == list(rows.meaning["rows"])
