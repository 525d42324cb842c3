"""Every event of a real MariaDB binlog reaches the change log or stops capture with the reason: compressed
binlogs (log_bin_compress) give the same log as plain ones; unknown, damaged and statement-logged events,
partial row images and prepared XA transactions of captured tables stop capture before anything past them
is committed; the event table names every type code servers write.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import BinlogEventError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.mysql.wire import codes
from dagster_databus.sources.mysql.wire.codes import EVENT_TYPES, Disposition, event_type
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import MariaDBServer

# The type codes MySQL 5.7 to 9.x (0-43) and MariaDB 10.x to 12.x (160-172) write: MySQL's Log_event_type
# (libs/mysql/binlog/event/binlog_event.h) and MariaDB's (sql/log_event.h).
MYSQL_CODES = range(44)
MARIADB_CODES = range(160, 173)
# What the reader dispatches on: every code the table calls decoded.
DISPATCHED = {codes.QUERY, codes.QUERY_COMPRESSED, codes.ROTATE, codes.FORMAT_DESCRIPTION, codes.XID,
              codes.TABLE_MAP, codes.GTID, codes.ANONYMOUS_GTID, codes.GTID_TAGGED, codes.MARIADB_GTID,
              codes.TRANSACTION_PAYLOAD, *codes.ROWS}


def test_every_type_code_is_decoded_ignored_or_a_stop_with_its_reason() -> None:
    for code in [*MYSQL_CODES, *MARIADB_CODES]:
        assert code in EVENT_TYPES, f"type code {code} is written by a server but not in the event table"
    for code in range(256):
        entry = event_type(code)
        assert entry.disposition in (Disposition.DECODE, Disposition.IGNORE, Disposition.STOP), code
        assert entry.why.strip(), f"{entry} says nothing about why"
        if entry.disposition is Disposition.STOP:
            fix = entry.why.format(source="shop")
            assert "{" not in fix and any(w in fix for w in ("run", "set", "SET", "upgrade", "raise", "stop")), fix
        if code not in EVENT_TYPES:
            assert entry.disposition is Disposition.STOP and "does not know binlog event type" in entry.why
            assert event_type(code, codes.LOG_EVENT_IGNORABLE_F).disposition is Disposition.IGNORE
    decoded = {code for code, entry in EVENT_TYPES.items() if entry.disposition is Disposition.DECODE}
    assert decoded == DISPATCHED


# -- a source on a real server -----------------------------------------------------------------


def shop(server: MariaDBServer, tmp_path: Path, **options: Any) -> tuple[MysqlHarness, DatabusConfig]:
    harness = MysqlHarness(server)
    harness.execute(["CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), note TEXT, price DECIMAL(10,2))",
                     "CREATE TABLE other (id INT PRIMARY KEY, v INT)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("items", ["id"])], **options),
                         merge={"engine": "local"})
    capture.install(config, "shop")
    return harness, config


def logged(config: DatabusConfig) -> list[tuple[Any, ...]]:
    """The change log's events as (table, op, key, row, seq within the window)."""
    return [(e.event.table, e.event.op.value, e.event.key, dict(e.event.row), e.event.seq)
            for e in ChangeLog(config.lake, "shop").read()]


def workload(harness: MysqlHarness, server: MariaDBServer) -> None:
    """Inserts, updates, deletes, key changes, a long text, DDL and a rotation, in several transactions."""
    harness.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (i, f"item {i}", "x" * (i * 37), f"{i}.25"))
                     for i in range(1, 60)])
    harness.execute(["UPDATE items SET name = CONCAT(name, ' (new)') WHERE id % 3 = 0",
                     "UPDATE items SET id = id + 1000 WHERE id % 7 = 0", "DELETE FROM items WHERE id % 5 = 0",
                     "INSERT INTO other VALUES (1, 1)"])
    server.execute("FLUSH BINARY LOGS")
    harness.execute(["ALTER TABLE items ADD COLUMN qty INT"])
    harness.execute([("INSERT INTO items VALUES (?, ?, ?, ?, ?)", (5000 + i, "é" * i, None, None, i))
                     for i in range(40)])
    harness.execute(["UPDATE items SET qty = 7, note = REPEAT('long text ', 500) WHERE id < 30"])


def test_a_compressed_binlog_gives_the_same_change_log_as_a_plain_one(
        mariadb: MariaDBServer, mariadb_compressed: MariaDBServer, tmp_path: Path, lazy_spark: Callable[[], Any]
) -> None:
    logs = []
    for server in (mariadb, mariadb_compressed):
        harness, config = shop(server, tmp_path / str(server.port))
        workload(harness, server)
        result = capture.run(config, "shop")
        assert result.events > 100
        sync_source(lazy_spark, config, "shop")
        assert_snapshots_match(config)
        logs.append(logged(config))
    assert logs[0] == logs[1]
    kinds = {row[2] for row in mariadb_compressed.query("SHOW BINLOG EVENTS")} | {
        row[2] for file in mariadb_compressed.query("SHOW BINARY LOGS")
        for row in mariadb_compressed.query(f"SHOW BINLOG EVENTS IN '{file[0]}'")}
    assert {"Query_compressed", "Write_rows_compressed_v1", "Update_rows_compressed_v1",
            "Delete_rows_compressed_v1"} <= kinds, kinds


# -- events that must stop capture ---------------------------------------------------------------


def _events_in(server: MariaDBServer, file: str) -> Iterator[tuple[int, int, int]]:
    """(start offset, type code, size) of each event in a binlog file (CRC-32 checksums on)."""
    data = (server.datadir / file).read_bytes()
    pos = 4
    while pos + 19 <= len(data):
        _, code, _, size, _, _ = struct.unpack_from("<IBIIIH", data, pos)
        yield pos, code, size
        pos += size


def patch_event(server: MariaDBServer, file: str, code: int, new_code: int, flags: int | None = None) -> int:
    """Rewrite the first event of type ``code`` in ``file`` (a closed binlog) as type ``new_code`` (and header
    ``flags``), its CRC-32 recomputed: what a server that writes an event this reader does not know sends.
    Returns the event's end position."""
    path = server.datadir / file
    data = bytearray(path.read_bytes())
    for pos, found, size in _events_in(server, file):
        if found == code:
            data[pos + 4] = new_code
            if flags is not None:
                struct.pack_into("<H", data, pos + 17, flags)
            struct.pack_into("<I", data, pos + size - 4, zlib.crc32(data[pos:pos + size - 4]))
            path.write_bytes(bytes(data))
            return pos + size
    raise AssertionError(f"no event of type {code} in {file}")


def closed_binlog_with_rows(server: MariaDBServer, harness: MysqlHarness) -> str:
    """Two transactions of captured rows in a binlog of their own, which is then closed."""
    server.execute("FLUSH BINARY LOGS")
    file = server.query("SHOW MASTER STATUS")[0][0]
    harness.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (1, "one", None, "1.00"))])
    harness.execute([("INSERT INTO items VALUES (?, ?, ?, ?)", (2, "two", None, "2.00"))])
    server.execute("FLUSH BINARY LOGS")
    return str(file)


def test_an_unknown_event_stops_capture_naming_it_and_commits_nothing_past_it(own_server: MariaDBServer,
                                                                             tmp_path: Path) -> None:
    harness, config = shop(own_server, tmp_path, poll={"chunk_rows": 1})
    file = closed_binlog_with_rows(own_server, harness)
    xids = [pos + size for pos, code, size in _events_in(own_server, file) if code == codes.XID]
    end = patch_event(own_server, file, codes.XID, 99)  # the first transaction's commit, as a new kind of event
    log = ChangeLog(config.lake, "shop")
    before = log.checkpoint().scn
    with pytest.raises(BinlogEventError) as raised:
        capture.run(config, "shop")
    message = str(raised.value)
    assert f"unknown type (99) at {file}:{end}" in message and "upgrade dagster-databus" in message
    assert log.checkpoint().scn == before and not list(log.read())
    assert end == xids[0]
    with pytest.raises(BinlogEventError, match=r"unknown type \(99\)"):
        capture.run(config, "shop")  # a second run stops at the same event: nothing was skipped


def test_an_unknown_event_the_server_flags_ignorable_is_skipped(own_server: MariaDBServer, tmp_path: Path) -> None:
    harness, config = shop(own_server, tmp_path)
    file = closed_binlog_with_rows(own_server, harness)
    patch_event(own_server, file, 161, 99, flags=codes.LOG_EVENT_IGNORABLE_F)  # the binlog checkpoint event
    capture.run(config, "shop")
    assert [row[2] for row in logged(config)] == [(1,), (2,)]


def test_an_incident_event_stops_capture_with_bootstrap_advice(own_server: MariaDBServer, tmp_path: Path) -> None:
    harness, config = shop(own_server, tmp_path)
    file = closed_binlog_with_rows(own_server, harness)
    patch_event(own_server, file, 161, 26)
    with pytest.raises(BinlogEventError, match=r"(?s)INCIDENT_EVENT \(26\).*changes may be missing.*databus "
                                               r"bootstrap --source shop"):
        capture.run(config, "shop")


def test_a_damaged_event_fails_its_checksum(own_server: MariaDBServer, tmp_path: Path) -> None:
    harness, config = shop(own_server, tmp_path)
    file = closed_binlog_with_rows(own_server, harness)
    path = own_server.datadir / file
    data = bytearray(path.read_bytes())
    pos, _, size = next(e for e in _events_in(own_server, file) if e[1] == 23)  # a write rows event
    data[pos + size - 6] ^= 0xFF  # a byte of its row image, the CRC-32 left as it was
    path.write_bytes(bytes(data))
    with pytest.raises(BinlogEventError, match=rf"(?s)WRITE_ROWS_EVENT_V1 \(23\) ending at {file}:{pos + size} fails "
                                               "its CRC-32 check.*verify-binlog-checksum"):
        capture.run(config, "shop")
    assert not list(ChangeLog(config.lake, "shop").read())


def test_a_change_logged_as_a_statement_stops_capture(mariadb: MariaDBServer, tmp_path: Path) -> None:
    harness, config = shop(mariadb, tmp_path)
    harness.execute(["INSERT INTO items VALUES (1, 'row', NULL, NULL)"])
    mariadb.execute("SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO items VALUES (2, 'stmt', NULL, NULL)",
                    database=harness.database)
    with pytest.raises(BinlogEventError, match=r"(?s)changes a captured table as a statement.*binlog_format=ROW"):
        capture.run(config, "shop")


def test_a_partial_row_image_stops_capture(mariadb: MariaDBServer, tmp_path: Path) -> None:
    harness, config = shop(mariadb, tmp_path)
    harness.execute(["INSERT INTO items VALUES (1, 'row', 'note', '1.00')"])
    harness.execute(["SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE items SET name = 'changed' WHERE id = 1"])
    with pytest.raises(BinlogEventError, match=r"(?s)binlog_row_image other than FULL.*binlog_row_image = 'FULL'"):
        capture.run(config, "shop")
    assert [row[2] for row in logged(config)] == [], "the first transaction shares the poll's batch: nothing lands"


def test_prepared_xa_transactions_stop_capture_only_when_they_change_captured_tables(
        mariadb: MariaDBServer, tmp_path: Path) -> None:
    harness, config = shop(mariadb, tmp_path)
    mariadb.execute("XA START 'theirs'", "INSERT INTO other VALUES (1, 1)", "XA END 'theirs'", "XA PREPARE 'theirs'",
                    "XA COMMIT 'theirs'", database=harness.database)
    mariadb.execute("XA START 'one'", "INSERT INTO items VALUES (1, 'one phase', NULL, NULL)", "XA END 'one'",
                    "XA COMMIT 'one' ONE PHASE", database=harness.database)
    capture.run(config, "shop")
    assert [row[2] for row in logged(config)] == [(1,)]
    mariadb.execute("XA START 'ours'", "INSERT INTO items VALUES (2, 'prepared', NULL, NULL)", "XA END 'ours'",
                    "XA PREPARE 'ours'", database=harness.database)
    try:
        with pytest.raises(BinlogEventError, match=r"XA_PREPARE_LOG_EVENT \(38\)"):
            capture.run(config, "shop")
    finally:
        mariadb.execute("XA COMMIT 'ours'")


def test_non_transactional_changes_of_a_rolled_back_transaction_are_captured(
        mariadb: MariaDBServer, tmp_path: Path, lazy_spark: Callable[[], Any]) -> None:
    harness = MysqlHarness(mariadb)
    harness.execute(["CREATE TABLE kept (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
                     "CREATE TABLE undone (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("kept", ["id"]), ("undone", ["id"])]),
                         merge={"engine": "local"})
    capture.install(config, "shop")
    harness.execute(["INSERT INTO undone VALUES (1, 1)", "INSERT INTO kept VALUES (1, 1)"], commit=False)
    harness.execute(["INSERT INTO undone VALUES (2, 2)", "SAVEPOINT s", "INSERT INTO undone VALUES (3, 3)",
                     "ROLLBACK TO SAVEPOINT s", "INSERT INTO undone VALUES (4, 4)"])
    capture.run(config, "shop")
    assert sorted((row[0], row[2]) for row in logged(config)) == [("kept", (1,)), ("undone", (2,)), ("undone", (4,))]
    windows = list(ChangeLog(config.lake, "shop").read_windows())
    assert [sorted(e.key for e in w.events) for w in windows] == [[(1,)], [(2,), (4,)]]
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_key_change_of_case_only_replaces_the_row(mariadb: MariaDBServer, tmp_path: Path, engine: str,
                                                    lazy_spark: Callable[[], Any]) -> None:
    """MySQL's default collations compare 'a' and 'A' equal, but they are different keys in the snapshot: the
    stored bytes decide."""
    harness = MysqlHarness(mariadb)
    harness.execute(["CREATE TABLE names (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
                     "INSERT INTO names VALUES ('a', 1), ('b', 2)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("names", ["k"])]),
                         merge={"engine": engine})
    capture.install(config, "shop")
    sync_source(lazy_spark, config, "shop")  # bootstrap
    harness.execute(["UPDATE names SET k = 'A' WHERE k = 'a'", "UPDATE names SET v = 3 WHERE k = 'B'"])
    capture.run(config, "shop")
    assert [(row[1], row[2]) for row in logged(config)] == [("d", ("a",)), ("i", ("A",)), ("u", ("b",))]
    sync_source(lazy_spark, config, "shop")
    assert_snapshots_match(config)
    rows = sorted((r["k"], r["v"]) for r in DeltaSnapshot(config.lake, "shop", "names").read().to_pylist())
    assert rows == [("A", 1), ("b", 3)]
