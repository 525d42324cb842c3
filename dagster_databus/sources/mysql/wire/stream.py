"""The replication protocol's binlog dump: a connection asks the server for its binlog from a position
(``COM_BINLOG_DUMP``) and reads it back one event a packet, until the end the server had when asked
(non-blocking). Each event's header is parsed and its CRC-32 checked; nothing here knows what an event
means (``codes`` and ``reader`` do).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dagster_databus.errors import BinlogEventError
from dagster_databus.sources.mysql.wire.codes import event_type

COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, end position, flags
HEADER_SIZE = HEADER.size  # 19
LOG_EVENT_ARTIFICIAL_F = 0x20
LOG_EVENT_BINLOG_IN_USE_F = 0x01
FORMAT_DESCRIPTION = 15
ROTATE = 4
CHECKSUM_SIZE = 4
# What a replica tells MariaDB it understands: GTID events (MARIA_SLAVE_CAPABILITY_GTID). Below it,
# MariaDB rewrites GTID events into BEGIN queries and dummy events.
MARIADB_SLAVE_CAPABILITY = 4


@dataclass(frozen=True, slots=True)
class Event:
    """One binlog event: its header's fields and its body (after the header, without the checksum)."""

    type: int
    timestamp: int
    server_id: int
    log_pos: int  # where the event ends in its file; 0 for artificial events and events inside a payload
    flags: int
    body: memoryview

    @property
    def artificial(self) -> bool:
        return bool(self.flags & LOG_EVENT_ARTIFICIAL_F)


def parse_event(data: memoryview, checksum: bool, file: str) -> Event:
    """An event from its bytes (header, body and, with ``checksum``, a CRC-32 of both). ``file`` is where
    it was read, for messages: the binlog file (its end position is in its header), or for an event inside a
    transaction payload, the payload's place."""
    where = file
    if len(data) < HEADER_SIZE:
        raise BinlogEventError(f"a binlog event of {len(data)} bytes at {where} is shorter than its header",
                               "the stream was cut or damaged: run capture again", position=where)
    timestamp, code, server_id, size, log_pos, flags = HEADER.unpack_from(data)
    if log_pos:
        where = f"{file}:{log_pos}"
    if size != len(data):
        raise BinlogEventError(f"a binlog event at {where} says it is {size} bytes but {len(data)} arrived",
                               "the stream was cut or damaged: run capture again", position=where)
    if code == FORMAT_DESCRIPTION:  # says itself whether it carries a checksum: its algorithm byte
        checksum = _format_checksum(data)
    end = size
    if checksum:
        end -= CHECKSUM_SIZE
        (crc,) = struct.unpack_from("<I", data, end)
        covered: memoryview | bytearray = data[:end]
        if code == FORMAT_DESCRIPTION and flags & LOG_EVENT_BINLOG_IN_USE_F:
            # A binlog file's header is checksummed with its in-use flag clear (servers clear it when sending).
            covered = bytearray(covered)
            covered[17] &= ~LOG_EVENT_BINLOG_IN_USE_F
        if zlib.crc32(covered) != crc:
            raise BinlogEventError(
                f"binlog event {event_type(code)} ending at {where} fails its CRC-32 check: it was damaged on "
                "disk or on the way", "run capture again; if it fails at the same position, the server's binlog "
                "is damaged there: run `mysqlbinlog --verify-binlog-checksum` on it and bootstrap the source",
                position=where)
    return Event(code, timestamp, server_id, log_pos, flags, data[HEADER_SIZE:end])


def _format_checksum(data: memoryview) -> bool:
    """Whether a format description event (and the events after it in its file) carries a CRC-32: the
    byte before the checksum is the algorithm (0 off, 1 CRC-32); servers before 5.6.1 write none."""
    size = len(data)
    return size >= HEADER_SIZE + 57 + CHECKSUM_SIZE + 1 and data[size - CHECKSUM_SIZE - 1] == 1


class DumpStream:
    """The binlog from ``file``:``position`` to the server's end at the time of the request, as events.

    ``conn`` is a pymysql connection dedicated to the stream (the protocol takes it over); ``checksum``
    is whether the server writes CRC-32s (``@@binlog_checksum``), which the replica must acknowledge.
    """

    def __init__(self, conn: Any, server_id: int, file: str, position: int) -> None:
        self.conn = conn
        self.file = file
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.binlog_checksum")
            row = cur.fetchone()
            self.checksum = row is not None and str(row[0]).upper() not in ("NONE", "")
            if self.checksum:
                # MySQL 8.0.26+ reads @source_binlog_checksum, earlier servers and MariaDB @master_...
                cur.execute("SET @master_binlog_checksum = @@GLOBAL.binlog_checksum, "
                            "@source_binlog_checksum = @@GLOBAL.binlog_checksum")
            cur.execute(f"SET @mariadb_slave_capability = {MARIADB_SLAVE_CAPABILITY}")
        conn._next_seq_id = 0
        conn.write_packet(bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", position, BINLOG_DUMP_NON_BLOCK, server_id)
                          + file.encode())

    def __iter__(self) -> Iterator[Event]:
        read = self.conn._read_packet
        checksum = self.checksum
        while True:
            data = read().get_all_data()
            if data[0] == 0xFE and len(data) < 9:  # EOF: the end the server had when asked
                return
            event = parse_event(memoryview(data)[1:], checksum, self.file)
            if event.type == FORMAT_DESCRIPTION:
                checksum = _format_checksum(memoryview(data)[1:])
            if event.type == ROTATE:
                self.file = bytes(event.body[8:]).decode()
            yield event
