"""MySQL's ``mysql::serialization`` messages (8.3+), as the tagged GTID event writes them
(``libs/mysql/serialization``: ``variable_length_integers.h``, ``serializer_default_impl.hpp``).

A message is: format version, its size in bytes (from the version on), the last field id a reader
must understand, then (field id, value) pairs in ascending id order, until the size is used up.
Integers are variable-length: the first byte's trailing one-bits + 1 say how many bytes follow, the
value sits above them; nine bytes when the first is 0xFF. Signed integers are zig-zag encoded.
"""

from __future__ import annotations

import uuid

from dagster_databus.errors import BinlogEventError

# Gtid_event::define_fields: the ids of the fields the GTID text needs.
_FLAGS, _UUID, _GNO, _TAG = 0, 1, 2, 3
_LAST_KNOWN = 11  # commit_group_ticket; the fields after the tag are numbers


def varuint(data: memoryview | bytes, pos: int) -> tuple[int, int]:
    """An unsigned variable-length integer at ``pos``: (value, position after it)."""
    first = data[pos]
    size = 1
    while size < 9 and (first >> (size - 1)) & 1:
        size += 1
    if size == 9:
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    if pos + size > len(data):
        raise IndexError("a variable-length integer runs past the message")
    return int.from_bytes(data[pos:pos + size], "little") >> size, pos + size


def varint(data: memoryview | bytes, pos: int) -> tuple[int, int]:
    """A signed (zig-zag) variable-length integer."""
    value, pos = varuint(data, pos)
    return (-(value >> 1) - 1 if value & 1 else value >> 1), pos


def tagged_gtid(body: memoryview) -> tuple[str, str, int]:
    """(source uuid, tag, number) of a GTID_TAGGED_LOG_EVENT body."""
    try:
        return _tagged(body)
    except (IndexError, ValueError) as exc:
        raise BinlogEventError(f"a tagged GTID event cannot be read: {exc}",
                               "the binlog is damaged there, or written by a newer server; report the server "
                               "version") from None


def _tagged(body: memoryview) -> tuple[str, str, int]:
    _, pos = varuint(body, 0)  # format version
    size, pos = varuint(body, pos)
    last_needed, pos = varuint(body, pos)
    if last_needed > _LAST_KNOWN:
        raise ValueError(f"its fields up to {last_needed} must be understood; this version knows up to {_LAST_KNOWN}")
    end = min(size, len(body))
    source, tag, number = uuid.UUID(int=0), "", 0
    while pos < end:
        field, pos = varuint(body, pos)
        if field == _UUID:
            raw = bytearray()
            for _ in range(16):
                byte, pos = varuint(body, pos)
                raw.append(byte)
            source = uuid.UUID(bytes=bytes(raw))
        elif field == _GNO:
            number, pos = varint(body, pos)
        elif field == _TAG:
            length, pos = varuint(body, pos)
            tag = bytes(body[pos:pos + length]).decode("ascii")
            pos += length
        elif field <= _LAST_KNOWN:
            _, pos = varuint(body, pos)  # a number the GTID text does not need
        else:
            break  # fields past the last one a reader must know can be left unread
        if field == _TAG:
            break  # what follows (commit order, timestamps, lengths) is not part of the GTID
    return str(source), tag, number
