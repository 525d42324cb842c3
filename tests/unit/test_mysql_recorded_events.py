"""The binlog decoder on events a real MariaDB wrote for a table of every column type and layout
(``tests/data/mariadb_events.json``, made by ``python -m tests.support.record_mariadb_events``, which names the server
version): inserts, an update and a delete decode to the rows the bootstrap read from that server, without a
server (the collations and single-byte tables it defines are recorded with the events).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from dagster_databus.config import parse_config
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.sources.mysql.charsets import ServerCharsets
from dagster_databus.sources.mysql.source import MysqlSource
from tests.support import mysql_event_fixtures as fx
from tests.support.record_mariadb_events import OUT, decode
from tests.unit.test_mysql_events import poll


def recorded() -> dict[str, Any]:
    return json.loads(OUT.read_text())


def source_of(data: dict[str, Any]) -> MysqlSource:
    """A source whose table and server are the recorded ones."""
    config = parse_config({"lake": "/nonexistent", "sources": [{
        "name": "shop", "kind": "mysql", "user": "u", "database": "db1",
        "tables": [{"name": data["table"], "primary_key": data["primary_key"]}]}]}, base=Path("/"))
    source = MysqlSource(config.source("shop"))  # type: ignore[arg-type]
    columns = tuple(Column(name, ColumnType.parse(ctype), source_type) for name, ctype, source_type in data["columns"])
    source.catalog.adopt({data["table"]: TableSchema("shop", data["table"], columns, tuple(data["primary_key"]))})
    source.stream.charsets = ServerCharsets({int(k): v for k, v in data["collations"].items()},
                                            {int(k): v for k, v in data["single_byte_tables"].items()})
    return source


def test_events_mariadb_wrote_decode_to_the_rows_it_holds() -> None:
    data = recorded()
    assert data["server"].startswith("10.11.") and "MariaDB" in data["server"]
    events = [bytes.fromhex(e) for e in data["events"]]
    assert [e[4] for e in events] == [19, 23, 19, 23, 19, 23, 19, 24, 19, 25]  # MariaDB writes v1 row events
    fixtures = [fx.EventFixture(f"recorded {i}", e, True, data["server"]) for i, e in enumerate(events)]

    def commit(after: bytes) -> fx.EventFixture:
        log_pos = struct.unpack_from("<I", after, 13)[0]
        return fx.EventFixture("XID", fx.event(fx.XID, fx.xid_body(1), log_pos=log_pos + 1), True, "built")

    stream = [*fixtures[:6], commit(events[5]), *fixtures[6:], commit(events[-1])]
    windows = poll(source_of(data), stream, mariadb=True)
    changes = [(op, key, row) for _, window in windows for op, key, row, _ in window]
    inserted = [{k: decode(v) for k, v in row.items()} for row in data["rows_inserted"]]
    after = {row["id"]: {k: decode(v) for k, v in row.items()} for row in data["rows_after"]}
    assert changes[:3] == [("i", (row["id"],), row) for row in inserted]
    (op, key, row), (delete_op, delete_key, deleted) = changes[3:]
    assert (op, key, delete_op, delete_key) == ("u", (2,), "d", (3,))
    differs = {k: (v, after[2][k]) for k, v in row.items() if v != after[2][k]}
    assert not differs, differs
    assert deleted == inserted[2]
