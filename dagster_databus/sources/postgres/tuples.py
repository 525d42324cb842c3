"""pgoutput's row data: TupleData (``read_tuple``), the bodies of Insert, Update and Delete, and the fields of the
messages most transactions are made of (Begin, a row change, Commit) outside a stream block (``*_fields``).

A one-row transaction is three messages. The stream's reader takes these by their fields (``stream``), making no
message object for them and skipping ``PgoutputDecoder.decode``'s dispatch; the decoder builds its messages from
the same functions. Each raises one of ``DECODE_ERRORS`` on a malformed message, which the decoder turns into the
error capture stops with (``PgoutputDecoder.failure``).
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

U16 = struct.Struct(">H").unpack_from
U32 = struct.Struct(">I").unpack_from
_BEGIN = struct.Struct(">QqI").unpack_from  # final LSN, commit time, xid
_COMMIT = struct.Struct(">BQQq").unpack_from  # flags, commit LSN, end LSN, commit time

_T, _N, _U, _B = ord("t"), ord("n"), ord("u"), ord("b")  # tuple value kinds
_NEW, _KEY, _OLD = ord("N"), ord("K"), ord("O")  # tuple markers in Insert / Update / Delete
BEGIN, COMMIT, INSERT, UPDATE, DELETE = (ord(k) for k in "BCIUD")  # message type bytes


class Unchanged:
    """The type of ``UNCHANGED``: a TOASTed value the change left as it was, whose bytes the server did
    not send. Only ``UNCHANGED`` exists (it survives pickling as itself)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = Unchanged()

Value: TypeAlias = str | bytes | Unchanged | None
Tuple: TypeAlias = tuple[Value, ...]


def read_tuple(data: bytes, pos: int) -> tuple[Tuple, int]:
    """TupleData at ``pos``: the values, and the offset after them."""
    (count,) = U16(data, pos)
    pos += 2
    values: list[Value] = [None] * count  # NULLs need no store
    for i in range(count):
        kind = data[pos]
        if kind == _T:
            start = pos + 5
            pos = start + U32(data, pos + 1)[0]
            values[i] = data[start:pos].decode()
        elif kind == _N:
            pos += 1
        elif kind == _U:
            values[i] = UNCHANGED
            pos += 1
        elif kind == _B:
            start = pos + 5
            pos = start + U32(data, pos + 1)[0]
            values[i] = data[start:pos]
        else:
            raise Malformed(f"tuple value kind {chr(kind)!r} (0x{kind:02x}) is none of 'n', 'u', 't', 'b'")
    if pos > len(data):  # a slice past the end is silently short: say the message is truncated
        raise Malformed(f"the tuple's values end {pos - len(data)} byte(s) past the message")
    return tuple(values), pos


class Malformed(Exception):
    """A message that does not parse (turned into ``PgoutputMessageError`` by the decoder)."""


# What decoding a malformed message raises: ``PgoutputDecoder.failure`` turns each into the error capture stops with.
DECODE_ERRORS: Final = (Malformed, struct.error, IndexError, ValueError)


def ended(data: bytes, end: int) -> None:
    if end != len(data):
        raise Malformed(f"{len(data) - end} byte(s) past the end of the message" if end < len(data)
                         else f"the message ends {end - len(data)} byte(s) early")


def inserted(data: bytes, pos: int) -> tuple[Tuple, int]:
    """An Insert's new tuple at ``pos`` (its 'N'), and the offset after it."""
    if data[pos] != _NEW:
        raise Malformed(f"expected 'N' before the new tuple, got {chr(data[pos])!r}")
    return read_tuple(data, pos + 1)


def updated(data: bytes, pos: int) -> tuple[Tuple, Tuple | None, Tuple | None, int]:
    """An Update's tuples at ``pos``: the new one, the old key ('K') or old row ('O') if sent, and the offset after."""
    marker = data[pos]
    old_key = old = None
    if marker == _KEY:
        old_key, pos = read_tuple(data, pos + 1)
        marker = data[pos]
    elif marker == _OLD:
        old, pos = read_tuple(data, pos + 1)
        marker = data[pos]
    if marker != _NEW:
        raise Malformed(f"expected 'K', 'O' or 'N' in an update, got {chr(marker)!r}")
    new, pos = read_tuple(data, pos + 1)
    return new, old_key, old, pos


def deleted(data: bytes, pos: int) -> tuple[Tuple | None, Tuple | None, int]:
    """A Delete's old key ('K') or old row ('O') at ``pos``, and the offset after it."""
    marker = data[pos]
    if marker == _KEY:
        key, pos = read_tuple(data, pos + 1)
        return key, None, pos
    if marker == _OLD:
        old, pos = read_tuple(data, pos + 1)
        return None, old, pos
    raise Malformed(f"expected 'K' or 'O' in a delete, got {chr(marker)!r}")


# -- the messages of most transactions, outside a stream block, as their fields ----------------------------------


def begin_fields(data: bytes) -> tuple[int, int, int]:
    """A Begin's final LSN, commit time and xid."""
    ended(data, 21)
    return _BEGIN(data, 1)


def commit_fields(data: bytes) -> tuple[int, int, int, int]:
    """A Commit's flags, commit LSN, end LSN and commit time."""
    ended(data, 26)
    return _COMMIT(data, 1)


def insert_fields(data: bytes) -> Tuple:
    """An Insert's new tuple."""
    new, end = inserted(data, 5)
    ended(data, end)
    return new


def relation_of(data: bytes) -> int:
    """The relation a row change (Insert, Update, Delete) outside a stream block is of."""
    return U32(data, 1)[0]  # type: ignore[no-any-return]


def update_fields(data: bytes) -> tuple[Tuple, Tuple | None, Tuple | None]:
    """An Update's new tuple, and old key or old row."""
    new, old_key, old, end = updated(data, 5)
    ended(data, end)
    return new, old_key, old


def delete_fields(data: bytes) -> tuple[Tuple | None, Tuple | None]:
    """A Delete's old key or old row."""
    old_key, old, end = deleted(data, 5)
    ended(data, end)
    return old_key, old
