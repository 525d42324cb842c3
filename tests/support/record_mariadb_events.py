"""Records the binlog events a real MariaDB writes for a table of every column type and layout into
``tests/data/mariadb_events.json``: the table map and row events (inserts, an update, a delete) as the server
wrote them, the table's columns, the collation ids' character sets, and the rows as the bootstrap reads them
(the meaning ``tests/test_mysql_recorded_events.py`` decodes the events to). Run it again to regenerate:
``python -m tests.support.record_mariadb_events`` (the file names the server version it came from).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import struct
import tempfile
from pathlib import Path
from typing import Any

from tests.support.paths import DATA

OUT = DATA / "mariadb_events.json"
TABLE = "recorded"
# Every column type and layout: each integer signed and unsigned after YEAR, NOT NULL and nullable, CHAR past
# 255 bytes, text in latin1, utf16, ucs2, utf32, cp1251 and sjis, ENUM and SET members past ASCII.
COLUMNS = (
    "id INT NOT NULL PRIMARY KEY", "y YEAR", "ti TINYINT", "tiu TINYINT UNSIGNED NOT NULL", "si SMALLINT",
    "siu SMALLINT UNSIGNED", "y2 YEAR NOT NULL", "mi MEDIUMINT", "miu MEDIUMINT UNSIGNED", "i INT",
    "iu INT UNSIGNED", "bi BIGINT", "biu BIGINT UNSIGNED", "de DECIMAL(10,2)", "deu DECIMAL(65,30) UNSIGNED",
    "fl FLOAT", "flu FLOAT UNSIGNED", "do DOUBLE", "b1 BIT(1)", "b10 BIT(10)", "b64 BIT(64)", "d DATE",
    "dt DATETIME", "dt6 DATETIME(6)", "ts TIMESTAMP NULL", "ts3 TIMESTAMP(3) NULL", "t TIME", "t6 TIME(6)",
    "c CHAR(10)", "c255 CHAR(255) NOT NULL", "vc VARCHAR(20)", "vc300 VARCHAR(300)", "bin BINARY(4)",
    "vb VARBINARY(8)", "tt TINYTEXT", "tx TEXT", "mt MEDIUMTEXT", "lt LONGTEXT", "tb TINYBLOB", "bl BLOB",
    "mb MEDIUMBLOB", "lb LONGBLOB", "e ENUM('small','médium','large')", "s SET('a','b','c','ü')", "j JSON",
    "g GEOMETRY", "p POINT", "u UUID", "i6 INET6", "i4 INET4",
    "l1 VARCHAR(10) CHARACTER SET latin1", "u16 VARCHAR(10) CHARACTER SET utf16",
    "u2 TEXT CHARACTER SET ucs2", "u32 VARCHAR(10) CHARACTER SET utf32", "cy VARCHAR(10) CHARACTER SET cp1251",
    "el ENUM('é','€','\x81') CHARACTER SET latin1",
    "sl SET('ß','Ж') CHARACTER SET cp1251", "uc VARCHAR(10) COLLATE utf8mb4_uca1400_ai_ci",
)
ROWS = (
    "(1, 2155, -128, 255, -32768, 65535, 1901, -8388608, 16777215, -2147483648, 4294967295, "
    "-9223372036854775808, 18446744073709551615, -12345678.90, "
    "99999999999999999999999999999999999.999999999999999999999999999999, -1.5, 3.25, -1.7976931348623157e308, "
    "b'1', b'1010101010', b'1000000000000000000000000000000000000000000000000000000000000001', "
    "'1000-01-01', '9999-12-31 23:59:59', '2024-02-29 12:34:56.789012', '2038-01-19 03:14:07', "
    "'1970-01-01 00:00:01.5', '-838:59:59', '-00:00:01.500000', 'ab', REPEAT('é', 255), 'héllo ☃ 𝄞', "
    "REPEAT('x', 300), x'6100', x'00ff00', 'tiny', 'line 1\\nline 2', '', 'long', x'01', x'deadbeef', x'', x'ff', "
    "'médium', 'a,ü', '{\"a\": [1, 2.50]}', ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('POINT(-1.5 0)', 4326), "
    "'123e4567-e89b-12d3-a456-426614174000', '2001:db8::ff00:42:8329', '192.0.2.1', "
    "'é€\x81ÿ', '☃𝄞', 'é中', '𝄞x', 'Жя', '\x81', 'ß,Ж', 'ÅÄÖ')",
    "(2, 0, -1, 0, -1, 0, 2000, -1, 0, -1, 0, -1, 0, -0.01, 0, 0, 0, 0, b'0', b'0', b'0', '2024-02-29', "
    "'2024-02-29 00:00:00', '2024-02-29 00:00:00.000001', '2024-06-01 12:00:00', NULL, '00:00:00', "
    "'838:59:59.999999', '', '', '', '', x'', x'', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'small', '', "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(3, NULL, NULL, 7, NULL, NULL, 1999, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'x', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL)",
)
CHANGES = (f"UPDATE {TABLE} SET mi = -2, iu = 1, y = 1901, l1 = 'Ž', el = '€' WHERE id = 2",
           f"DELETE FROM {TABLE} WHERE id = 3")


def encode(value: Any) -> Any:
    """A canonical value as JSON (tagged where JSON has no such type; doubles by their hex form, exactly)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"timedelta_us": value // dt.timedelta(microseconds=1)}
    raise TypeError(f"no JSON form for {value!r}")


def decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    [(tag, text)] = value.items()
    return {"float": float.fromhex, "bytes": base64.b64decode, "decimal": decimal.Decimal,
            "datetime": dt.datetime.fromisoformat, "date": dt.date.fromisoformat,
            "timedelta_us": lambda us: dt.timedelta(microseconds=us)}[tag](text)


def _events(path: Path, table_ids: set[int] | None = None) -> list[bytes]:
    """The table map and row events of table ``TABLE`` in a binlog file, whole (header, body, CRC-32)."""
    data = path.read_bytes()
    pos, out, ours = 4, [], set()
    while pos + 19 <= len(data):
        _, code, _, size, _, _ = struct.unpack_from("<IBIIIH", data, pos)
        event = data[pos:pos + size]
        name = b"\x00" + bytes([len(TABLE)]) + TABLE.encode()  # after the database name: its NUL, the table's
        if code == 19 and event[19 + 8 + 1 + event[19 + 8]:].startswith(name):
            ours.add(int.from_bytes(event[19:25], "little"))
            out.append(event)
        elif code in (23, 24, 25) and int.from_bytes(event[19:25], "little") in ours:
            out.append(event)
        pos += size
    return out


def record() -> dict[str, Any]:
    import pyarrow as pa

    from dagster_databus.sources import open_source
    from dagster_databus.sources.mysql.charsets import read_charsets
    from tests.support.harness import MysqlHarness, make_config
    from tests.support.mariadb import MariaDBServer

    server = MariaDBServer()
    try:
        harness = MysqlHarness(server)
        harness.execute(["SET time_zone = '+00:00'", f"CREATE TABLE {TABLE} ({', '.join(COLUMNS)}) "
                         "DEFAULT CHARSET=utf8mb4"])
        harness.execute(["SET time_zone = '+00:00'", *(f"INSERT INTO {TABLE} VALUES {row}" for row in ROWS)])
        config = make_config(Path(tempfile.mkdtemp()) / "lake", harness.source_config("shop", [(TABLE, ["id"])]))
        source = open_source(config.source("shop"))
        schema = source.catalog.schemas()[TABLE]

        def rows() -> list[dict[str, Any]]:
            return [{k: encode(v) for k, v in row.items()} for b in source.reads.read_table(TABLE).batches
                    for row in schema.rows_from_arrow(pa.Table.from_batches([b]))]

        before = rows()
        harness.execute(["SET time_zone = '+00:00'", *CHANGES])
        after = rows()
        version = server.query("SELECT VERSION()")[0][0]
        collations = {int(i): c for i, c in server.query(
            "SELECT a.ID, a.CHARACTER_SET_NAME FROM information_schema.COLUMNS c JOIN "
            "information_schema.COLLATION_CHARACTER_SET_APPLICABILITY a ON a.FULL_COLLATION_NAME = c.COLLATION_NAME "
            f"WHERE c.TABLE_SCHEMA = '{harness.database}' AND c.TABLE_NAME = '{TABLE}'")}
        conn = server.connect()
        try:
            tables = {i: t for i, t in read_charsets(conn.cursor()).tables.items() if i in collations}
        finally:
            conn.close()
        server.execute("FLUSH BINARY LOGS")
        events = _events(server.datadir / "binlog.000001")
    finally:
        server.close()
    return {"server": version, "recorded_by": "tests/support/record_mariadb_events.py", "table": TABLE,
            "columns": [[c.name, str(c.type), c.source_type] for c in schema.columns],
            "primary_key": list(schema.primary_key),
            "collations": collations, "single_byte_tables": tables, "events": [e.hex() for e in events],
            "rows_inserted": before, "rows_after": after}


if __name__ == "__main__":
    recorded = record()
    OUT.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(recorded['events'])} events from {recorded['server']} written to {OUT}")
