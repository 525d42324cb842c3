"""The replication protocol's binlog dump: a connection asks the server for its binlog from a position
(``COM_BINLOG_DUMP``) and reads it back one event a packet, until the end the server had when asked
(non-blocking). Each event's header is parsed and its CRC-32 checked; nothing here knows what an event
means (``codes`` and ``reader`` do).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from pymysql.constants import CR  # type: ignore[import-untyped]  # no stubs (see connect.py)
from pymysql.err import InternalError, OperationalError, raise_mysql_exception  # type: ignore[import-untyped]

from dagster_databus.errors import BinlogEventError
from dagster_databus.sources.mysql.wire.codes import event_type

COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, end position, flags
HEADER_SIZE = HEADER.size  # 19
LOG_EVENT_BINLOG_IN_USE_F = 0x01
FORMAT_DESCRIPTION = 15
ROTATE = 4
CHECKSUM_SIZE = 4
# What a replica tells MariaDB it understands: GTID events (MARIA_SLAVE_CAPABILITY_GTID). Below it,
# MariaDB rewrites GTID events into BEGIN queries and dummy events.
MARIADB_SLAVE_CAPABILITY = 4


class Event(NamedTuple):
    """One binlog event: its header's fields and its body (after the header, without the checksum). A tuple:
    a one-row transaction is four events, and a frozen dataclass costs a microsecond each to build."""

    type: int
    timestamp: int
    server_id: int
    log_pos: int  # where the event ends in its file; 0 for artificial events and events inside a payload
    flags: int
    body: memoryview


def parse_event(data: memoryview, checksum: bool, file: str) -> Event:
    """An event from its bytes (header, body and, with ``checksum``, a CRC-32 of both). ``file`` is where
    it was read, for messages: the binlog file (its end position is in its header), or for an event inside a
    transaction payload, the payload's place."""
    if len(data) < HEADER_SIZE:
        raise BinlogEventError(f"a binlog event of {len(data)} bytes at {file} is shorter than its header",
                               "the stream was cut or damaged: run capture again", position=file)
    timestamp, code, server_id, size, log_pos, flags = HEADER.unpack_from(data)
    if size != len(data):
        where = _where(file, log_pos)
        raise BinlogEventError(f"a binlog event at {where} says it is {size} bytes but {len(data)} arrived",
                               "the stream was cut or damaged: run capture again", position=where)
    if code == FORMAT_DESCRIPTION:  # says itself whether it carries a checksum: its algorithm byte
        checksum = _format_checksum(data)
    end = size
    if checksum:
        end -= CHECKSUM_SIZE
        covered: memoryview | bytearray = data[:end]
        if code == FORMAT_DESCRIPTION and flags & LOG_EVENT_BINLOG_IN_USE_F:
            # A binlog file's header is checksummed with its in-use flag clear (servers clear it when sending).
            covered = bytearray(covered)
            covered[17] &= ~LOG_EVENT_BINLOG_IN_USE_F
        if zlib.crc32(covered) != _CRC.unpack_from(data, end)[0]:
            where = _where(file, log_pos)
            raise BinlogEventError(
                f"binlog event {event_type(code)} ending at {where} fails its CRC-32 check: it was damaged on "
                "disk or on the way", "run capture again; if it fails at the same position, the server's binlog "
                "is damaged there: run `mysqlbinlog --verify-binlog-checksum` on it and bootstrap the source",
                position=where)
    return Event(code, timestamp, server_id, log_pos, flags, data[HEADER_SIZE:end])


_CRC = struct.Struct("<I")


def _where(file: str, log_pos: int) -> str:
    return f"{file}:{log_pos}" if log_pos else file


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
        conn = self.conn
        if conn._current_timeout != conn._read_timeout:
            conn._sock.settimeout(conn._read_timeout)
            conn._current_timeout = conn._read_timeout
        checksum = self.checksum
        tail = CHECKSUM_SIZE if checksum else 0
        read, unpack, crc, crc32 = conn._rfile.read, HEADER.unpack_from, _CRC.unpack_from, zlib.crc32
        new = tuple.__new__
        # The packets are read here, as pymysql reads them but without the packet object it builds for each
        # (which cost more than a one-row event's whole decoding): a 4-byte header (payload size, sequence
        # number), then the payload. A packet out of the ordinary goes to _packet.
        try:
            while True:
                header = read(4)
                size = header[0] | header[1] << 8 | header[2] << 16 if len(header) == 4 else -1
                data = read(size) if size >= 0 else b""
                if size <= 0 or len(data) < size or header[3] != conn._next_seq_id or size == _MAX_PACKET:
                    data = self._packet(header, data)
                conn._next_seq_id = (conn._next_seq_id + 1) % 256
                first = data[0]
                if first == 0xFE and len(data) < 9:  # EOF: the end the server had when asked
                    return
                if first == 0xFF:
                    raise_mysql_exception(data)
                # An event's packet is an OK byte, then the event. Most are whole and checked in these few
                # lines; parse_event reads the rest (a format description) or says what is wrong with them.
                view = memoryview(data)
                if len(data) > HEADER_SIZE:
                    timestamp, code, server_id, size, log_pos, flags = unpack(data, 1)
                    end = size + 1 - tail
                    if size + 1 == len(data) and code != FORMAT_DESCRIPTION and (
                            not tail or crc32(view[1:end]) == crc(data, end)[0]):
                        event = new(Event, (code, timestamp, server_id, log_pos, flags, view[HEADER_SIZE + 1:end]))
                        if code == ROTATE:
                            self.file = bytes(event.body[8:]).decode()
                        yield event
                        continue
                event = parse_event(view[1:], checksum, self.file)
                if event.type == FORMAT_DESCRIPTION:
                    checksum = _format_checksum(view[1:])
                    tail = CHECKSUM_SIZE if checksum else 0
                yield event
        except OSError as exc:  # EINTR is retried by Python itself (PEP 475)
            conn._force_close()
            raise OperationalError(CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})") from None

    def _packet(self, header: bytes, payload: bytes, first: bool = True) -> bytes:
        """A packet the reading loop does not take as it is: the connection lost, a sequence number out of
        order (raised as pymysql raises them), or a payload of 16 MiB or more, which goes on in the packets
        after it (joined here)."""
        conn = self.conn
        size = _payload_size(header)
        if size < 0 or len(payload) < size:
            conn._force_close()
            raise OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
        if not size and first:  # (the last of a long payload's packets may be empty)
            conn._force_close()
            raise InternalError("an empty packet in the binlog stream, where each packet holds an event")
        if header[3] != conn._next_seq_id:
            conn._force_close()
            if header[3] == 0:  # MariaDB sends its shutdown error with sequence number 0
                raise OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
            raise InternalError(f"Packet sequence number wrong - got {header[3]} expected {conn._next_seq_id}")
        if size < _MAX_PACKET:
            return payload
        conn._next_seq_id = (conn._next_seq_id + 1) % 256
        rest = conn._rfile.read(4)
        more = _payload_size(rest)
        return payload + self._packet(rest, conn._rfile.read(more) if more >= 0 else b"", first=False)


_MAX_PACKET = 0xFFFFFF  # a payload this long continues in the next packet


def _payload_size(header: bytes) -> int:
    """A packet header's payload size (3 bytes, little-endian), -1 for a header cut short. The reading loop
    writes the same expression inline: a call there costs each event."""
    return header[0] | header[1] << 8 | header[2] << 16 if len(header) == 4 else -1
