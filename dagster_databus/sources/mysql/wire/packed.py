"""The binlog's length-encoded integers (``net_field_length``), and where a row event's row images start:
what the row decoder and the inflater of compressed row events both read."""

from __future__ import annotations

from dagster_databus.sources.mysql.wire.codes import ROWS_V2, UPDATE_ROWS

_SIZES = {252: 2, 253: 3, 254: 8}


def net_length(data: memoryview | bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer at ``pos``: (its value, the position after it)."""
    first = data[pos]
    if first < 251:
        return first, pos + 1
    size = _SIZES.get(first)
    if size is None:
        raise ValueError(f"byte {first} does not start a length-encoded integer")
    return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def rows_layout(code: int, body: memoryview) -> tuple[int, int, int]:
    """A row event's (column count, where its column bitmaps start, where its row images start): after the
    table id and flags, a v2 event's extra data, the column count, and one bitmap (two for an update)."""
    pos = 8
    if code in ROWS_V2:
        pos += int.from_bytes(body[8:10], "little")  # the extra data's length counts its own two bytes
    count, pos = net_length(body, pos)
    return count, pos, pos + (count + 7) // 8 * (2 if code in UPDATE_ROWS else 1)
