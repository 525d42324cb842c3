"""The character sets of a MySQL or MariaDB server as the server defines them, for decoding binlog text.

The binlog gives a character column's (and an ENUM or SET column's) collation id; the bootstrap reads the same
text converted by the server to utf8mb4. So capture decodes as the server converts:

- the collation id → character set map is the server's own (``information_schema.COLLATIONS``, and MariaDB
  10.10+'s per-character-set ids of its shared collations: utf8mb4_uca1400_ai_ci is 2304);
- every single-byte collation is decoded by a table the server converts itself, all 256 bytes: latin1 is
  MySQL's (cp1252 with its five undefined bytes mapped through to U+0081 ...), dec8, swe7, armscii8, geostd8,
  keybcs2, macce, hp8 (which Python has no codec for) are exact, and a byte the server does not map is '?',
  as the bootstrap reads it. Tables are per collation: latin2_czech_cs maps bytes its character set maps not;
- utf16 and ucs2 are UTF-16BE, utf16le UTF-16LE, utf32 UTF-32BE, utf8mb3/utf8mb4 UTF-8;
- another multi-byte character set is Python's codec of the same name, checked when first needed against the
  server's conversion of every one-, two- (and for ujis three-) byte sequence, with the characters where they
  differ translated (MySQL's sjis reads 0x815F as U+005C, Python's as U+FF3C); one Python lacks (eucjpms) or
  that cannot be made the server's is refused (``decoder`` is None; ``validate`` names the column).

Read once per process and server (``server_charsets``); decoders are chosen when a table map's shape is first
seen, never per event.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial

from dagster_databus.sources import sqlfiles
from dagster_databus.sources.mysql.connect import Cursor

Decoder = Callable[[bytes], str]
# The server's conversion of a multi-byte character set's sequences (``_sequences``), or None.
Converter = Callable[[str], list[str] | None]
# Character sets whose text is UTF-8: decoded by Arrow, a column at a time.
UTF8 = frozenset(("utf8mb4", "utf8mb3", "utf8"))
_UNICODE = {"ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be"}
# Multi-byte character sets Python has a codec of (MySQL's names → Python's), checked against the server.
_CODECS = {"big5": "big5", "cp932": "cp932", "euckr": "euc_kr", "gb2312": "gb2312", "gbk": "gbk",
           "sjis": "shift_jis", "ujis": "euc_jp", "gb18030": "gb18030"}
_THREE_BYTES = {"ujis": 0x8F, "eucjpms": 0x8F}  # EUC-JP's JIS X 0212 sequences: 0x8F and two bytes 0xA1-0xFE
_ALL_BYTES = bytes(range(256)).hex()
_ASCII = "".join(map(chr, range(0x80)))
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(slots=True)
class ServerCharsets:
    """A server's collation ids and how capture decodes each one's bytes."""

    collations: Mapping[int, str]  # collation id → character set name
    tables: Mapping[int, str]  # single-byte collation id → its 256 characters, as the server converts them
    converter: Converter | None = None  # how to ask the server about a multi-byte character set
    _checked: dict[str, Decoder | None] = field(default_factory=dict)

    def charset(self, collation: int) -> str | None:
        """The character set of a collation id; None when the server does not define it."""
        return self.collations.get(collation)

    def utf8(self, collation: int) -> bool:
        """Whether text of this collation is UTF-8 (0, no collation in the table map, is taken as UTF-8)."""
        return collation == 0 or self.charset(collation) in UTF8

    def ascii_same(self, collation: int) -> bool:
        """Whether a single-byte collation reads bytes 0x00-0x7F as ASCII: text of such bytes only is the same
        in UTF-8 (a column of them is decoded by Arrow, not a value at a time)."""
        table = self.tables.get(collation)
        return table is not None and table[:0x80] == _ASCII

    def decoder(self, collation: int) -> Decoder | None:
        """bytes → text as the server converts this collation's; None when capture cannot."""
        if collation in self.tables:
            return partial(_charmap, table=self.tables[collation])
        charset = "utf8mb4" if collation == 0 else self.charset(collation)
        return None if charset is None else self.charset_decoder(charset)

    def charset_decoder(self, charset: str) -> Decoder | None:
        """bytes → text of a character set (of any of its collations but single-byte ones with a table of
        their own); None when capture cannot decode it as the server does."""
        if charset in UTF8:
            return partial(_decode, encoding="utf-8")
        if charset in _UNICODE:
            return partial(_decode, encoding=_UNICODE[charset])
        single = [c for c, name in self.collations.items() if name == charset and c in self.tables]
        if single:
            return partial(_charmap, table=self.tables[single[0]])
        if charset not in self._checked:
            self._checked[charset] = _checked_codec(charset, self.converter)
        return self._checked[charset]


def _decode(value: bytes, encoding: str) -> str:
    return value.decode(encoding)


def _charmap(value: bytes, table: str) -> str:
    return codecs.charmap_decode(value, "strict", table)[0]


def _translated(value: bytes, encoding: str, table: dict[int, int]) -> str:
    return value.decode(encoding).translate(table)


def _sequence_list(charset: str) -> list[bytes]:
    """Every byte (but the newline that separates them) and every pair of a lead byte (0x80-0xFF) and a
    trail byte (0x40-0xFF); for ujis the three-byte sequences too."""
    out = [bytes([b]) for b in range(256) if b != 0x0A]
    out += [bytes([lead, trail]) for lead in range(0x80, 0x100) for trail in range(0x40, 0x100)]
    if charset in _THREE_BYTES:
        out += [bytes([_THREE_BYTES[charset], a, b]) for a in range(0xA1, 0xFF) for b in range(0xA1, 0xFF)]
    return out


def _checked_codec(charset: str, converter: Converter | None) -> Decoder | None:
    """How a multi-byte character set's bytes become the server's text: Python's codec when it reads every
    sequence as the server does (with the characters where they differ translated), else a table of every
    sequence the server converts (slower, exact); None when the server cannot be asked."""
    server = None if converter is None or not _NAME.match(charset) else converter(charset)
    sequences = _sequence_list(charset)
    if server is None or len(server) != len(sequences):
        return None
    encoding = _CODECS.get(charset)
    codec = None if encoding is None else _codec(encoding, sequences, server)
    if codec is not None:
        return codec
    singles = "".join(server[:0x0A]) + "\n" + "".join(server[0x0A:0xFF])
    if len(singles) != 256:
        return None
    # A sequence the server reads as one character (or '?' for all its bytes: well formed but unmapped).
    longer = {seq: text for seq, text in zip(sequences[0xFF:], server[0xFF:], strict=True) if len(text) == 1}
    return partial(_by_table, singles=singles, longer=longer, three=charset in _THREE_BYTES)


def _codec(encoding: str, sequences: list[bytes], server: list[str]) -> Decoder | None:
    """Python's codec, with characters translated where it reads a sequence otherwise than the server; None
    when a translation cannot make it the server's."""
    mapping: dict[str, str] = {}
    for seq, theirs in zip(sequences, server, strict=True):
        try:
            ours: str | None = seq.decode(encoding)
        except UnicodeDecodeError:
            ours = None
        if ours is None:
            if "?" not in theirs or b"?" in seq:  # text the server holds that Python cannot read
                return None
            continue
        if len(ours) != len(theirs):
            return None
        for a, b in zip(ours, theirs, strict=True):
            if mapping.setdefault(a, b) != b:
                return None
    table = {ord(a): ord(b) for a, b in mapping.items() if a != b}
    if not table:
        return partial(_decode, encoding=encoding)
    return partial(_translated, encoding=encoding, table=table)


def _by_table(value: bytes, singles: str, longer: Mapping[bytes, str], three: bool) -> str:
    out = []
    i, n = 0, len(value)
    while i < n:
        b = value[i]
        if b < 0x80:
            out.append(singles[b])
            i += 1
            continue
        if three and value[i:i + 3] in longer:
            out.append(longer[value[i:i + 3]])
            i += 3
        elif value[i:i + 2] in longer:
            out.append(longer[value[i:i + 2]])
            i += 2
        else:
            out.append(singles[b])
            i += 1
    return "".join(out)


def _sequences(cur: Cursor, charset: str) -> list[str] | None:
    """The server's conversion of ``_sequence_list(charset)``, one text per sequence."""
    if not _NAME.match(charset):
        return None
    joined = b"".join(seq + b"\n" for seq in _sequence_list(charset))
    cur.execute(sqlfiles.load("mysql", "charset_sequences.sql").format(charset=charset), (joined.hex(),))
    row = cur.fetchone()
    if row is None or row[0] is None:
        return None
    return bytes.fromhex(str(row[0])).decode("utf-8").split("\n")[:-1]


def read_charsets(cur: Cursor, converter: Converter | None = None) -> ServerCharsets:
    """The server's collation ids and single-byte tables (a few queries); multi-byte character sets are
    checked when first needed, with ``converter`` (by default on ``cur``, which must then stay open)."""
    cur.execute(sqlfiles.load("mysql", "collations.sql"))
    collations = {int(i): str(name) for i, name in cur.fetchall()}
    cur.execute(sqlfiles.load("mysql", "has_full_collations.sql"))
    row = cur.fetchone()
    if row is not None and int(row[0]):
        cur.execute(sqlfiles.load("mysql", "collations_full.sql"))
        collations.update((int(i), str(name)) for i, name in cur.fetchall())
    cur.execute(sqlfiles.load("mysql", "single_byte_collations.sql"))
    single = [(int(i), str(name), str(charset)) for i, name, charset in cur.fetchall()
              if _NAME.match(str(name)) and _NAME.match(str(charset))]
    tables: dict[int, str] = {}
    if single:
        template = sqlfiles.load("mysql", "charset_table.sql").strip()
        cur.execute("SELECT " + ", ".join(template.format(charset=charset, collation=name)
                                          for _, name, charset in single), [_ALL_BYTES] * len(single))
        converted = cur.fetchone()
        assert converted is not None  # a SELECT without FROM returns its one row
        for (ident, _, _), text in zip(single, converted, strict=True):
            table = bytes.fromhex(str(text)).decode("utf-8") if text is not None else ""
            if len(table) == 256:  # else not a byte for a character: refused
                tables[ident] = table
    return ServerCharsets(collations, tables, converter or partial(_sequences, cur))


_CACHE: dict[tuple[str, int, str], ServerCharsets] = {}


def server_charsets(cur: Cursor, host: str, port: int, version: str,
                    connect: Callable[[], AbstractContextManager[Cursor]]) -> ServerCharsets:
    """``read_charsets`` of the server at host:port, read once per process and server version; its multi-byte
    character sets are checked, when first needed, on a cursor of a connection ``connect`` opens."""
    key = (host, port, version)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _CACHE[key] = read_charsets(cur, partial(_sequences_on, connect))
    return cached


def _sequences_on(connect: Callable[[], AbstractContextManager[Cursor]], charset: str) -> list[str] | None:
    with connect() as cur:
        return _sequences(cur, charset)
