"""MySQL-only binlog events, decoded from byte fixtures (``tests/mysql_event_fixtures.py``: built from MySQL's
documented formats, or recorded here from MariaDB; each names its origin), since no MySQL server can run here:
GTIDs (tagged too), v2 row events of every type, transaction payloads (zstd and uncompressed), binary JSON,
partial JSON updates (a stop) and the events capture ignores. The transactions go through the same poll as a
server's stream, from a stream of the fixtures' bytes.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dagster_databus.config import parse_config
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import BinlogEventError, UnsupportedTypeError
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.mysql.charsets import ServerCharsets
from dagster_databus.sources.mysql.source import MysqlSource
from dagster_databus.sources.mysql.stream import _Poll
from dagster_databus.sources.mysql.wire.gtid import gtid_text
from dagster_databus.sources.mysql.wire.json_binary import json_text
from dagster_databus.sources.mysql.wire.stream import Event, parse_event
from dagster_databus.sources.mysql.wire.tablemap import parse_table_map
from dagster_databus.sources.mysql.wire.unpack import payload_events
from dagster_databus.sources.mysql.wire.values import column_type, source_type
from tests.support import mysql_event_fixtures as fx

FILE = "binlog.000001"


def parsed(fixture: fx.EventFixture) -> Event:
    return parse_event(memoryview(fixture.data), fixture.checksum, FILE)


@pytest.mark.parametrize("fixture", [*fx.MYSQL_GTIDS, *fx.TAGGED_GTIDS, *fx.MARIADB_GTIDS], ids=lambda f: f.name)
def test_gtids_read_as_the_server_writes_them(fixture: fx.EventFixture) -> None:
    event = parsed(fixture)
    assert gtid_text(event.type, event) == fixture.meaning["gtid"]


@pytest.mark.parametrize("fixture", fx.JSON_FIXTURES, ids=lambda f: f.name)
def test_binary_json_prints_as_mysql_prints_it(fixture: fx.JsonFixture) -> None:
    assert json_text(fixture.data) == fixture.text


def test_a_large_json_document_prints_whole() -> None:
    document = fx.large_json_document()
    assert json_text(document.data) == document.text


@pytest.mark.parametrize("payload", fx.PAYLOADS, ids=lambda f: f.name)
def test_a_payload_holds_its_transactions_events_in_order(payload: fx.EventFixture) -> None:
    inner = list(payload_events(parsed(payload), "payload"))
    assert [e.type for e in inner] == list(payload.meaning["inner"])
    assert all(e.log_pos == 0 for e in inner)  # positioned by the payload's end, not their own
    assert [bytes(e.body) for e in inner] == [data[19:] for data in payload.meaning["inner_events"]]


def test_a_damaged_payload_stops_with_its_position() -> None:
    good = fx.ITEMS_COMPRESSED[1]
    broken = bytearray(good.data)
    broken[-20] ^= 0xFF  # inside the zstd frame
    damaged = fx.EventFixture("broken", fx.restamp(bytes(broken), checksum=True), True, "test")
    with pytest.raises(BinlogEventError, match="does not decompress"):
        list(payload_events(parsed(damaged), f"{FILE}:999"))


# -- whole transactions through the poll ------------------------------------------------------------------------


def source_for(table_map: fx.EventFixture, key: Sequence[str]) -> MysqlSource:
    """A source whose table is the one ``table_map`` describes, known without a server (its schema as the
    server's information_schema would give it)."""
    described = parse_table_map(memoryview(table_map.body), False, "fixture")
    config = parse_config({"lake": "/nonexistent", "sources": [{
        "name": "shop", "kind": "mysql", "user": "u", "database": described.database,
        "tables": [{"name": described.table, "primary_key": list(key)}]}]}, base=Path("/"))
    source = MysqlSource(config.source("shop"))  # type: ignore[arg-type]
    columns = tuple(Column(c.name, column_type(c), source_type(c)) for c in described.columns)  # type: ignore[arg-type]
    source.catalog.adopt({described.table: TableSchema("shop", described.table, columns, tuple(key))})
    source.stream.charsets = FIXTURE_CHARSETS  # what a poll reads from the server
    return source


START = Scn.from_binlog(1, 4, 0)
FIXTURE_CHARSETS = ServerCharsets(fx.FIXTURE_COLLATIONS, {})


def poll(source: MysqlSource, events: Iterable[fx.EventFixture], since: Scn = START,
         mariadb: bool = False) -> list[Any]:
    """The windows a poll makes of ``events`` (as a dump stream from a MySQL server, or a MariaDB, would send
    them)."""

    class Fixtures(_Poll):
        def open_stream(self, file: str, position: int) -> Iterable[Event]:
            return [parsed(e) for e in events]

    stats = PollStats(until=since)
    bound = Scn.from_binlog(1, 2**32 - 1, 0)
    batches = list(Fixtures(source.stream, FILE, since, bound, stats, {}, mariadb=mariadb).read())
    windows = [w for batch in batches for w in batch.to_windows(source.catalog.schemas())]
    return [(w.scn, [(e.op.value, e.key, dict(e.row), e.seq) for e in w.events]) for w in windows]


def _canonical(row: dict[str, Any] | None, schema: TableSchema) -> dict[str, Any] | None:
    """An expected row in the product's canonical values (BIGINT UNSIGNED is a decimal)."""
    if row is None:
        return None
    return {k: decimal.Decimal(v) if schema.column(k).type.kind == "decimal" and isinstance(v, int) else v
            for k, v in row.items()}


def test_a_transaction_is_the_same_plain_compressed_or_in_an_uncompressed_payload() -> None:
    source = source_for(fx.ITEMS_PLAIN[2], ["id"])
    schema = source.catalog.schemas()["items"]
    write, update, delete = (fx.ITEMS_ROWS[k] for k in ("write", "update", "delete"))
    expected = [("i", (row["id"],), _canonical(row, schema)) for _, row in write]
    (apple, apple_10), (_, pear_priced) = update
    expected += [("d", (1,), _canonical(apple, schema)), ("i", (10,), _canonical(apple_10, schema)),
                 ("u", (2,), _canonical(pear_priced, schema))]
    expected += [("d", (3,), _canonical(delete[0][0], schema))]
    for name, events in fx.TRANSACTIONS.items():
        [(scn, changes)] = poll(source_for(fx.ITEMS_PLAIN[2], ["id"]), events)
        assert [(op, key, row) for op, key, row, _ in changes] == expected, name
        assert [seq for *_, seq in changes] == list(range(len(expected))), name
        assert scn == Scn.from_binlog(1, parsed(events[-1]).log_pos, 0), f"{name}: the window ends at its commit"
    del source


def test_every_column_type_of_a_v2_row_event_decodes_to_its_value() -> None:
    table_map, (rows,) = fx.TABLES[0]
    source = source_for(table_map, ["c_int"])
    schema = source.catalog.schemas()["all_types"]
    commit = fx.EventFixture("XID", fx.event(fx.XID, fx.xid_body(7), log_pos=3000), True, "built")
    [(_, changes)] = poll(source, [table_map, rows, commit])
    decoded = [row for _, _, row, _ in changes]
    expected = [_canonical(row, schema) for _, row in fx.TYPES_ROWS]
    for got, want in zip(decoded, expected, strict=True):
        assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}  # type: ignore[index]


def test_a_partial_json_update_of_a_captured_table_stops_capture() -> None:
    table_map, update = fx.PARTIAL_TABLES[0]
    with pytest.raises(BinlogEventError, match=r"(?s)PARTIAL_UPDATE_ROWS_EVENT \(39\).*binlog_row_value_options"):
        poll(source_for(table_map, ["id"]), [table_map, update])


def test_a_partial_json_update_of_another_table_is_not_ours_to_stop_for() -> None:
    table_map, update = fx.PARTIAL_TABLES[0]
    items = source_for(fx.ITEMS_PLAIN[2], ["id"])
    assert poll(items, [table_map, update, *fx.ITEMS_PLAIN])[0][1][0][0] == "i"


def test_events_capture_ignores_change_nothing() -> None:
    source = source_for(fx.ITEMS_PLAIN[2], ["id"])
    plain = poll(source, fx.ITEMS_PLAIN)
    with_ignored = poll(source_for(fx.ITEMS_PLAIN[2], ["id"]), [*fx.IGNORED_EVENTS, *fx.ITEMS_PLAIN])
    assert with_ignored == plain


def test_a_transaction_at_or_before_the_checkpoint_is_not_read_again() -> None:
    commit = parsed(fx.ITEMS_PLAIN[-1]).log_pos
    source = source_for(fx.ITEMS_PLAIN[2], ["id"])
    assert poll(source, fx.ITEMS_PLAIN, since=Scn.from_binlog(1, commit, 0)) == []


def test_every_fixture_is_well_formed_and_decodes_to_its_meaning() -> None:
    """The fixtures module's own check (its ``__main__``), and no disagreement of the decoder with a meaning."""
    fx.check_fixtures()
    assert list(fx.decoder_disagreements()) == []


def test_text_of_a_collation_the_server_does_not_define_stops_capture_naming_the_column() -> None:
    cols = (fx.Col("id", fx.LONG, nullable=False), fx.Col("name", fx.VARCHAR, collation=4000, max_length=80))
    table_map = fx.EventFixture("MAP", fx.event(fx.TABLE_MAP, fx.table_map_body(
        9, "shop", "names", cols, fx.optional_metadata(cols, primary_key=[0])), log_pos=1000), True, "built")
    write = fx.EventFixture("WRITE", fx.event(fx.WRITE_ROWS, fx.rows_body(
        9, cols, [fx.row_image(cols, {"id": 1, "name": "x"})], update=False), log_pos=2000), True, "built")
    with pytest.raises(UnsupportedTypeError, match=r"(?s)column name holds collation id 4000 text.*CONVERT TO "
                                                   r"CHARACTER SET utf8mb4"):
        poll(source_for(table_map, ["id"]), [table_map, write])
