"""Every character set and every collation a real MariaDB defines (SHOW COLLATION, and the uca1400 collations'
per-character-set ids), on both roads: the bootstrap (pymysql, text the server converts)
and capture (binlog bytes decoded by ``sources.mysql.charsets``). Single-byte character sets hold all 256
bytes; the others a sample of scripts. ENUM and SET members with characters past ASCII in other character sets
than UTF-8.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import CaptureNotInstalledError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.mysql import charsets
from dagster_databus.sources.mysql.charsets import ServerCharsets, read_charsets
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import MariaDBServer

# A sample of scripts for multi-byte character sets: what a character set cannot hold becomes '?' on insert.
SAMPLE = "aZ09 ~\\'\" é ß ü Ж я ά א ع ก 中文 繁體 日本語 ｶﾅ ¥ 한국어 € ☃ 𝄞"
_ALL_BYTES = bytes(range(256)).hex()
TABLE_COLUMNS = 250


def _collations(server: MariaDBServer) -> tuple[dict[str, str], dict[str, list[tuple[int, str]]]]:
    """Each character set's default collation, and every collation of each (SHOW COLLATION and the uca1400
    collations by their full names) with its id."""
    default: dict[str, str] = {}
    every: dict[str, list[tuple[int, str]]] = {}
    for name, charset, ident, is_default, *_ in server.query("SHOW COLLATION"):
        if ident is None:
            continue
        every.setdefault(charset, []).append((int(ident), name))
        if is_default == "Yes":
            default[charset] = name
    for name, charset, ident in server.query(
            "SELECT FULL_COLLATION_NAME, CHARACTER_SET_NAME, ID FROM "
            "information_schema.COLLATION_CHARACTER_SET_APPLICABILITY WHERE COLLATION_NAME LIKE 'uca1400%'"):
        every.setdefault(charset, []).append((int(ident), name))
    return default, every


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "''")


def _holds(server: MariaDBServer, charset: str, text: str) -> str:
    """The characters of ``text`` that ``charset`` has (storing the others is an error)."""
    held = []
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for ch in text:
                cur.execute(f"SELECT CONVERT(CONVERT(_utf8mb4 '{_quoted(ch)}' USING {charset}) USING utf8mb4)")
                row = cur.fetchone()
                if row is not None and row[0] == ch:
                    held.append(ch)
    finally:
        conn.close()
    return "".join(held)


def charset_table(server: MariaDBServer) -> tuple[list[str], list[str]]:
    """The columns of the tables: each character set's default collation (VARCHAR), each of its other collations
    (TEXT), and ENUM and SET columns of some character sets; and each column's value as SQL."""
    default, every = _collations(server)
    single = {name for name, maxlen in server.query("SELECT CHARACTER_SET_NAME, MAXLEN FROM "
                                                    "information_schema.CHARACTER_SETS") if maxlen == 1}
    columns, values = [], []
    for charset in sorted(default):
        if charset == "binary":
            continue
        if charset in single:
            value = f"CONVERT(UNHEX('{_ALL_BYTES}') USING {charset})"
        else:
            value = f"CONVERT(_utf8mb4 '{_quoted(_holds(server, charset, SAMPLE))}' USING {charset})"
        others = sorted(c for c in every[charset] if c[1] != default[charset])
        columns.append(f"c_{charset} VARCHAR(300) CHARACTER SET {charset} COLLATE {default[charset]}")
        values.append(value)
        for ident, name in others:
            columns.append(f"c{ident} TEXT CHARACTER SET {charset} COLLATE {name}")
            values.append(value)
    for charset, members in (("latin1", ["é", "ß", "€", "\x81"]), ("cp1251", ["Ж", "я"]), ("utf16", ["☃", "𝄞"]),
                             ("dec8", ["ä", "ö"]), ("ucs2", ["é", "中"]), ("sjis", ["日本", "カナ"])):
        listed = ",".join(f"'{m}'" for m in members)
        columns += [f"e_{charset} ENUM({listed}) CHARACTER SET {charset}",
                    f"s_{charset} SET({listed}) CHARACTER SET {charset}"]
        values += [f"'{members[-1]}'", f"'{','.join(members)}'"]
    return columns, values


def test_every_character_set_and_collation_reads_the_same_on_both_roads(
        mariadb: MariaDBServer, tmp_path: Path, lazy_spark: Callable[[], Any]) -> None:
    harness = MysqlHarness(mariadb)
    columns, values = charset_table(mariadb)
    # Tables of at most TABLE_COLUMNS columns: InnoDB holds some bytes of each in the row, which has a limit.
    tables = {f"texts{n}": (columns[at:at + TABLE_COLUMNS], values[at:at + TABLE_COLUMNS])
              for n, at in enumerate(range(0, len(columns), TABLE_COLUMNS))}
    assert len(columns) > 300  # every collation, not a sample
    for table, (own, _) in tables.items():
        harness.execute([f"CREATE TABLE {table} (id INT PRIMARY KEY, {', '.join(own)}) DEFAULT CHARSET=utf8mb4"])

    def insert(key: int) -> list[str]:
        return [sql for table, (own, vals) in tables.items() for sql in (
            f"INSERT INTO {table} (id, {', '.join(c.split()[0] for c in own)}) VALUES ({key}, {', '.join(vals)})",
            f"INSERT INTO {table} (id) VALUES ({key + 1})")]

    harness.execute(insert(1))  # by the bootstrap
    config = make_config(tmp_path / "lake", harness.source_config("shop", [(t, ["id"]) for t in tables]),
                         merge={"engine": "local"})
    cycle(config, lazy_spark)
    harness.execute(insert(11))  # by the binlog
    cycle(config, lazy_spark)

    log = ChangeLog(config.lake, "shop")
    stored: dict[int, dict[str, Any]] = {}
    for table in tables:
        for r in log.schemas.latest(table)[1].rows_from_arrow(DeltaSnapshot(config.lake, "shop", table).read()):
            stored.setdefault(r["id"], {}).update(r)
    logged: dict[int, dict[str, Any]] = {}
    for e in log.read():
        logged.setdefault(e.event.key[0], {}).update(e.event.row)
    assert sorted(logged) == [11, 12]
    for key in (11, 12):
        by_bootstrap, by_binlog = dict(stored[key - 10]), logged[key]
        assert by_bootstrap.pop("id") + 10 == by_binlog.pop("id")
        differs = {k: (v, by_binlog[k]) for k, v in by_bootstrap.items() if v != by_binlog[k]}
        assert not differs, f"bootstrap != binlog for {differs}"
    assert_snapshots_match(config)
    row = stored[1]
    # MySQL's latin1: cp1252, its five undefined bytes mapped through to U+0081, U+008D, U+008F, U+0090, U+009D.
    cp1252 = "".join(bytes([b]).decode("cp1252", "ignore") or chr(b) for b in range(0x80, 0xA0))
    assert row["c_latin1"][0x80:0xA0] == cp1252 and row["c_latin1"][0x81] == "\x81"
    assert row["e_latin1"] == "\x81" and row["s_latin1"] == "é,ß,€,\x81"
    assert row["c_utf16"] == row["c_utf32"] == row["c_utf16le"] == SAMPLE


def test_the_server_defines_the_collation_ids(mariadb: MariaDBServer) -> None:
    """The map is the server's: MariaDB's uca1400 ids, utf16/utf32/ucs2, and decoders built from its tables."""
    conn = mariadb.connect()
    try:
        check_collations(read_charsets(conn.cursor()))  # multi-byte ones are asked for on the open cursor
    finally:
        conn.close()


def check_collations(defined: ServerCharsets) -> None:
    assert defined.charset(2304) == "utf8mb4" and defined.charset(2048) == "utf8mb3"  # utf8mb*_uca1400_ai_ci
    assert {defined.charset(i) for i in (54, 35, 60, 101, 56)} == {"utf16", "ucs2", "utf32", "utf16le"}
    for name, expected in (("latin1", "€\x81"), ("dec8", None), ("swe7", None), ("armscii8", None),
                           ("geostd8", None), ("keybcs2", None), ("macce", None), ("hp8", None)):
        decoder = defined.charset_decoder(name)
        assert decoder is not None and len(decoder(bytes(range(256)))) == 256, name
        if expected is not None:
            assert decoder(b"\x80\x81") == expected
    latin1 = defined.decoder(8)
    assert latin1 is not None and latin1(bytes([0x81, 0x8D, 0x8F, 0x90, 0x9D])) == "\x81\x8d\x8f\x90\x9d"
    eucjpms = defined.decoder(next(i for i, c in defined.collations.items() if c == "eucjpms"))
    assert eucjpms is not None and eucjpms("日本".encode("euc_jp")) == "日本"  # Python has no eucjpms codec
    assert defined.decoder(99999) is None  # no such collation


def test_a_character_set_capture_cannot_decode_is_refused_by_validate_naming_the_column(
        mariadb: MariaDBServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every character set this MariaDB defines decodes; a server that does not answer the conversion of a
    multi-byte character set's sequences (the seam: its answer) leaves that one undecodable."""
    monkeypatch.setattr(charsets, "_CACHE", {})
    monkeypatch.setattr(charsets, "_sequences", lambda cur, charset: None)
    harness = MysqlHarness(mariadb)
    harness.execute(["CREATE TABLE jp (id INT PRIMARY KEY, name VARCHAR(20) CHARACTER SET eucjpms, "
                     "latin VARCHAR(20) CHARACTER SET latin1, wide TEXT CHARACTER SET utf16)"])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("jp", ["id"])]))
    problems = capture.validate(config).problems["shop"]
    assert len(problems) == 1 and "column jp.name is eucjpms text" in problems[0], problems
    assert "ALTER TABLE `jp` CONVERT TO CHARACTER SET utf8mb4" in problems[0]
    with pytest.raises(CaptureNotInstalledError, match=r"jp\.name is eucjpms"):
        capture.install(config, "shop")
