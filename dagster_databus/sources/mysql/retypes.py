"""MySQL / MariaDB column type changes proven to keep every stored value (``sync.evolve``'s allow-list).

``ALTER TABLE ... MODIFY`` converts each stored value to the new type with no row events, so a snapshot can
follow a change in place only when the conversion is the identity for every value the old type can hold. Each
rule below holds whatever the server's ``sql_mode`` (a permissive mode clamps, truncates and pads silently):

- integers: the new type's range holds the old one's (``int`` → ``bigint``, ``smallint unsigned`` → ``int``);
  an integer or DECIMAL into a DECIMAL with as many integer digits and no fewer decimals; FLOAT → DOUBLE;
- text: a longer VARCHAR or CHAR, or a TEXT type that holds the old type's longest value in bytes
  (4 a character: ``utf8mb4``, the widest character set); binary strings alike, but never into BINARY(n),
  which pads with zero bytes;
- ENUM and SET: members only appended (a member's number, and a SET's text order, are its position);
- DATETIME, TIMESTAMP and TIME: no fewer fractional digits.

Everything else (fewer fractional seconds, VARCHAR → CHAR, signedness, a narrower type, DATE ↔ DATETIME, a
character set, anything unknown) is not proven: the table is read again.
"""

from __future__ import annotations

from dagster_databus.sources.mysql.types import MysqlType

_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_DECIMALS = {"decimal", "numeric", "dec", "fixed"}
_CHARS = {"char", "varchar"}
_BYTES = {"binary", "varbinary"}
# The most bytes each TEXT / BLOB type holds.
_TEXTS = {"tinytext": 255, "text": 65_535, "mediumtext": 16_777_215, "longtext": 4_294_967_295}
_BLOBS = {"tinyblob": 255, "blob": 65_535, "mediumblob": 16_777_215, "longblob": 4_294_967_295}
_TIMES = {"datetime", "timestamp", "time"}
_MOST_BYTES_PER_CHAR = 4


def keeps_values(old: str, new: str) -> bool:
    """Whether changing a column's ``COLUMN_TYPE`` from ``old`` to ``new`` keeps every value it can hold."""
    a, b = MysqlType.parse(old), MysqlType.parse(new)
    if a.name in _INT_BITS:
        low, high = _int_range(a)
        if b.name in _INT_BITS:
            new_low, new_high = _int_range(b)
            return new_low <= low and high <= new_high
        if b.name in _DECIMALS:
            digits = len(str(max(abs(low), high)))
            return (not b.unsigned or a.unsigned) and b.int_arg(0, 10) - b.int_arg(1, 0) >= digits
        return False
    if a.name in _DECIMALS and b.name in _DECIMALS:
        p, s, q, t = a.int_arg(0, 10), a.int_arg(1, 0), b.int_arg(0, 10), b.int_arg(1, 0)
        return (not b.unsigned or a.unsigned) and t >= s and q - t >= p - s
    if a.name == "float" and not a.args and b.name in ("double", "real", "double precision"):
        return not b.unsigned or a.unsigned
    if a.name in _CHARS:
        longest = a.int_arg(0, 1)
        if b.name == a.name or (a.name == "char" and b.name == "varchar"):
            # CHAR drops trailing spaces when read and VARCHAR keeps what it was given: a CHAR's values read
            # the same from a VARCHAR (MySQL copies them without the padding).
            return b.int_arg(0, 1) >= longest
        return b.name in _TEXTS and _TEXTS[b.name] >= longest * _MOST_BYTES_PER_CHAR
    if a.name in _TEXTS:
        return b.name in _TEXTS and _TEXTS[b.name] >= _TEXTS[a.name]
    if a.name == "varbinary":
        longest = a.int_arg(0, 1)
        if b.name == "varbinary":
            return b.int_arg(0, 1) >= longest
        return b.name in _BLOBS and _BLOBS[b.name] >= longest
    if a.name == "binary":
        return b.name == "binary" and b.int_arg(0, 1) == a.int_arg(0, 1)
    if a.name in _BLOBS:
        return b.name in _BLOBS and _BLOBS[b.name] >= _BLOBS[a.name]
    if a.name in ("enum", "set"):
        return b.name == a.name and b.args[:len(a.args)] == a.args
    if a.name in _TIMES:
        return b.name == a.name and b.int_arg(0, 0) >= a.int_arg(0, 0)
    return a == b


def _int_range(t: MysqlType) -> tuple[int, int]:
    bits = _INT_BITS[t.name]
    return (0, 2**bits - 1) if t.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
