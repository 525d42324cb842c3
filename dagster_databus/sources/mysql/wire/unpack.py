"""Compressed events made plain: MariaDB's ``log_bin_compress`` events, whose row images or statement
are zlib-compressed, and MySQL's transaction payloads (``binlog_transaction_compression``), whose zstd
body holds the whole transaction's events.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from dagster_databus.errors import BinlogEventError
from dagster_databus.sources.mysql.wire.codes import COMPRESSED_ROWS, event_type
from dagster_databus.sources.mysql.wire.packed import net_length, rows_layout
from dagster_databus.sources.mysql.wire.stream import HEADER_SIZE, Event, parse_event

QUERY_POST_HEADER = 13  # thread id 4, exec time 4, database length 1, error code 2, status length 2


def inflate(data: memoryview, where: str) -> bytes:
    """MariaDB's compressed form (``binlog_buf_compress``): a byte 0x80 | n, the uncompressed length in n
    bytes big-endian, then a zlib stream."""
    # The first byte: 0x80, the algorithm in bits 4-6 (0: zlib, the only one), the length's size in 0-2.
    if not data or not data[0] & 0x80 or (data[0] >> 4) & 0x07 or not 1 <= data[0] & 0x07 <= 4:
        raise BinlogEventError(f"the compressed event ending at {where} does not start with a compression header",
                               "the binlog is damaged there: run capture again, and bootstrap the source if it "
                               "fails at the same position", position=where)
    size = data[0] & 0x07
    length = int.from_bytes(data[1:1 + size], "big")
    try:
        plain = zlib.decompress(data[1 + size:])
    except zlib.error as exc:
        raise BinlogEventError(f"the compressed event ending at {where} does not inflate: {exc}",
                               "the binlog is damaged there: run capture again, and bootstrap the source if it "
                               "fails at the same position", position=where) from None
    if len(plain) != length:
        raise BinlogEventError(f"the compressed event ending at {where} inflates to {len(plain)} bytes, not the "
                               f"{length} its header says", "the binlog is damaged there: bootstrap the source",
                               position=where)
    return plain


def plain_rows(code: int, body: memoryview, where: str) -> memoryview:
    """A compressed row event's body with its row images inflated (the post-header, the column count and
    the bitmaps are not compressed): the body of the plain event of the same kind."""
    if code not in COMPRESSED_ROWS:
        return body
    _, _, images = rows_layout(code, body)
    return memoryview(bytes(body[:images]) + inflate(body[images:], where))


def query_text(body: memoryview, compressed: bool, where: str) -> str:
    """The statement of a query event (a compressed one's inflated)."""
    database_length = body[8]
    status_length = int.from_bytes(body[11:13], "little")
    start = QUERY_POST_HEADER + status_length + database_length + 1
    raw = inflate(body[start:], where) if compressed else bytes(body[start:])
    return raw.decode("utf-8", "surrogateescape")


def query_database(body: memoryview) -> str:
    """The default database a query event ran in."""
    database_length = body[8]
    status_length = int.from_bytes(body[11:13], "little")
    start = QUERY_POST_HEADER + status_length
    return bytes(body[start:start + database_length]).decode("utf-8", "surrogateescape")


def payload_events(event: Event, where: str) -> Iterator[Event]:
    """The events inside a MySQL transaction payload, in order. They carry no checksum of their own
    (the payload's covers them)."""
    import zstandard

    fields, pos = {}, 0
    body = event.body
    while True:
        kind, pos = net_length(body, pos)
        if kind == _END_MARK:
            break
        length, pos = net_length(body, pos)
        value, _ = net_length(body, pos) if length else (0, pos)
        fields[kind] = value
        pos += length
    compression = fields.get(_COMPRESSION_TYPE, _NONE)
    data = body[pos:]
    if compression == _ZSTD:
        try:
            plain = zstandard.ZstdDecompressor().decompress(
                bytes(data), max_output_size=fields.get(_UNCOMPRESSED_SIZE, 0) or 0)
        except zstandard.ZstdError as exc:
            raise BinlogEventError(f"the transaction payload ending at {where} does not decompress: {exc}",
                                   "the binlog is damaged there: bootstrap the source", position=where) from None
    elif compression == _NONE:
        plain = bytes(data)
    else:
        raise BinlogEventError(
            f"the transaction payload ending at {where} is compressed with algorithm {compression}, which this "
            "version does not read", "report the server version; set binlog_transaction_compression = OFF until "
            "it is supported", position=where)
    view = memoryview(plain)
    pos = 0
    while pos < len(view):
        if pos + HEADER_SIZE > len(view):
            raise BinlogEventError(f"the transaction payload ending at {where} ends inside an event header",
                                   "the binlog is damaged there: bootstrap the source", position=where)
        size = int.from_bytes(view[pos + 9:pos + 13], "little")
        inner = parse_event(view[pos:pos + size], False, where)
        if inner.type == 40:
            raise BinlogEventError(f"{event_type(40)} nested inside another at {where}",
                                   "the binlog is damaged there: bootstrap the source", position=where)
        yield inner
        pos += size


# The payload header's fields (Transaction_payload_event, ``OTW_PAYLOAD_*``), and compression types.
_END_MARK, _PAYLOAD_SIZE, _COMPRESSION_TYPE, _UNCOMPRESSED_SIZE = 0, 1, 2, 3
_ZSTD, _NONE = 0, 255
