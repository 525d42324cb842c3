"""A decoder of ``pgoutput``'s logical replication messages (protocol versions 1 and 2).

The formats are PostgreSQL's "Logical Replication Message Formats" (``proto.c``). Every integer is
big-endian; strings are NUL-terminated; tuple values come as text (``'t'``, what the type's output
function prints, in the session's client encoding, which the reader sets to UTF8), binary (``'b'``, only
with the ``binary`` option), NULL (``'n'``) or ``UNCHANGED`` (``'u'``: a TOASTed value the change did
not touch, which the server leaves out). Inside a protocol 2 stream block (Stream Start .. Stream Stop)
Relation, Type, Insert, Update, Delete, Truncate and Message carry the streamed transaction's xid first.

Decoding is on capture's hot path, so the tuple loop reads a ``bytes`` payload by offsets with
precompiled ``struct`` unpackers and builds nothing but the values themselves. A message the decoder
does not know stops capture with ``PgoutputMessageError``: skipping one could lose changes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from dagster_databus.errors import DatabusError
from dagster_databus.sources.postgres.tuples import (
    DECODE_ERRORS,
    U16,
    U32,
    Malformed,
    Tuple,
    begin_fields,
    commit_fields,
    deleted,
    ended,
    inserted,
    updated,
)
from dagster_databus.sources.postgres.tuples import UNCHANGED as UNCHANGED  # re-exported: a value a message holds

PG_EPOCH_UNIX_MICROS: Final = 946_684_800_000_000  # 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch

# Replica identity as Relation messages send it (pg_class.relreplident).
REPLICA_IDENTITY_DEFAULT: Final = "d"
REPLICA_IDENTITY_NOTHING: Final = "n"
REPLICA_IDENTITY_FULL: Final = "f"
REPLICA_IDENTITY_INDEX: Final = "i"

_STREAM_COMMIT = struct.Struct(">IBQQq").unpack_from  # xid, flags, commit LSN, end LSN, commit time
_ATTR = struct.Struct(">Ii").unpack_from  # type oid, type modifier
_XID_OID = struct.Struct(">II").unpack_from  # a streamed change's xid, then its relation


def lsn_of(text: str) -> int:
    """A ``pg_lsn`` as text (``16/B374D848``) as the integer SCN it is."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL prints it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def pg_micros_to_unix_ms(micros: int) -> int:
    """A pgoutput timestamp (microseconds since 2000-01-01 UTC) as milliseconds since the Unix epoch."""
    return (micros + PG_EPOCH_UNIX_MICROS) // 1000


class PgoutputMessageError(DatabusError):
    """A pgoutput message capture must not read past: of a type it does not decode, out of place (a
    stream block not closed), truncated, or text that is not UTF-8. The message names the type byte and
    the LSN; capture stops there rather than skip a change."""


# -- messages ----------------------------------------------------------------------------------------
# A one-row transaction's three messages (Begin, the change, Commit) are plain slotted records, not frozen: a frozen
# dataclass sets each field through object.__setattr__, about a microsecond for the three, a tenth of what capture
# spends on the transaction. The other _Streamable messages follow their base (a dataclass cannot be frozen on a
# base that is not). Nothing changes a message once it is decoded.


class _CommitTime:
    """The commit time of a message that carries one (``commit_ts``, as the server sends it) in Unix
    milliseconds."""

    __slots__ = ()
    commit_ts: int

    @property
    def commit_ts_ms(self) -> int:
        return pg_micros_to_unix_ms(self.commit_ts)


@dataclass(slots=True)
class Begin(_CommitTime):
    final_lsn: int  # the LSN of the transaction's commit record
    commit_ts: int  # microseconds since 2000-01-01 UTC, as the server sends it
    xid: int


@dataclass(slots=True)
class Commit(_CommitTime):
    flags: int
    commit_lsn: int
    end_lsn: int  # the LSN just after the commit record: what a standby status update confirms
    commit_ts: int  # microseconds since 2000-01-01 UTC


@dataclass(frozen=True, slots=True)
class Origin:
    commit_lsn: int  # the commit's LSN on the origin server
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    name: str
    type_oid: int  # pg_attribute.atttypid: a domain's own oid, not its base type's
    type_modifier: int  # atttypmod, -1 when none
    key: bool  # part of the replica identity (every column under REPLICA IDENTITY FULL)


@dataclass(slots=True)
class _Streamable:
    """A message that may come inside a protocol 2 stream block, where it carries the streamed transaction's
    xid first: ``xid`` is that transaction, None outside a stream block."""

    xid: int | None = field(default=None, kw_only=True)


@dataclass(slots=True)
class Relation(_Streamable):
    oid: int
    namespace: str  # "pg_catalog" when the server sends the empty string for it
    name: str
    replica_identity: str  # REPLICA_IDENTITY_DEFAULT / _NOTHING / _FULL / _INDEX
    columns: tuple[RelationColumn, ...]  # live columns only: dropped and generated ones are never sent


@dataclass(slots=True)
class Type(_Streamable):
    oid: int
    namespace: str  # of the base type when ``oid`` is a domain
    name: str


@dataclass(slots=True)
class Insert(_Streamable):
    relation_oid: int
    new: Tuple


@dataclass(slots=True)
class Update(_Streamable):
    relation_oid: int
    new: Tuple  # UNCHANGED where a TOASTed value was not touched
    old_key: Tuple | None = None  # 'K': the old replica identity columns (others None), when the key changed
    old: Tuple | None = None  # 'O': the whole old row, under REPLICA IDENTITY FULL


@dataclass(slots=True)
class Delete(_Streamable):
    relation_oid: int
    old_key: Tuple | None = None  # 'K': the replica identity columns, others None
    old: Tuple | None = None  # 'O': the whole row, under REPLICA IDENTITY FULL


@dataclass(slots=True)
class Truncate(_Streamable):
    relation_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(slots=True)
class LogicalMessage(_Streamable):
    """``pg_logical_emit_message``'s message (sent with the ``messages`` option)."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True, slots=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommit(_CommitTime):
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int  # microseconds since 2000-01-01 UTC


@dataclass(frozen=True, slots=True)
class StreamAbort:
    xid: int
    subxid: int  # equal to ``xid`` when the whole transaction aborted
    abort_lsn: int | None = None  # protocol 4 (parallel apply) only
    abort_ts: int | None = None


Message: TypeAlias = (Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate | LogicalMessage
                      | StreamStart | StreamStop | StreamCommit | StreamAbort)

_STREAM_STOP: Final = StreamStop()
# The messages of a row change, and of a commit: tuples for isinstance (a union written at the call is built
# again at each call, once a message in a reader's loop).
ROW_CHANGES: Final = (Insert, Update, Delete)

# Types capture does not ask for, named so the error says what to change rather than "unknown".
_NOT_REQUESTED = {
    ord("b"): "Begin Prepare", ord("P"): "Prepare", ord("K"): "Commit Prepared", ord("r"): "Rollback Prepared",
    ord("p"): "Stream Prepare",
}


def _string(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(0, pos)
    return data[pos:end].decode(), end + 1


class PgoutputDecoder:
    """Decodes one replication stream's messages in order, tracking whether it is inside a protocol 2
    stream block (where changes carry their transaction's xid)."""

    __slots__ = ("_plain", "_streamed", "in_stream", "stream_xid")

    def __init__(self) -> None:
        self.in_stream = False
        self.stream_xid: int | None = None  # the transaction of the open stream block
        plain = {
            ord("B"): self._begin, ord("C"): self._commit, ord("O"): self._origin, ord("R"): self._relation,
            ord("Y"): self._type, ord("I"): self._insert, ord("U"): self._update, ord("D"): self._delete,
            ord("T"): self._truncate, ord("M"): self._message, ord("S"): self._stream_start,
            ord("E"): self._stream_stop, ord("c"): self._stream_commit, ord("A"): self._stream_abort,
        }
        self._plain = plain
        # Inside a stream block: changes lead with the xid; a Begin, Commit or another Stream Start is out of place.
        self._streamed = {k: v for k, v in plain.items() if k in b"ORYIUDTME"}

    def decode(self, payload: bytes | bytearray | memoryview, lsn: int | None = None) -> Message:
        """One message (a CopyData 'w' payload, or the SQL interface's ``data``). ``lsn`` (the message's
        WAL position, when known) is only for the error raised on a message that cannot be decoded."""
        data = payload if type(payload) is bytes else bytes(payload)
        try:
            kind = data[0]
            handler = (self._streamed if self.in_stream else self._plain).get(kind)
            if handler is None:
                raise self._unknown(kind, lsn)
            message, end = handler(data)
            ended(data, end)
            return message
        except DECODE_ERRORS as exc:
            raise self.failure(data, lsn, exc) from None

    def failure(self, data: bytes, lsn: int | None, exc: Exception) -> PgoutputMessageError:
        """The error for a message that raised ``exc`` (one of ``DECODE_ERRORS``) as it was decoded."""
        if isinstance(exc, UnicodeDecodeError):
            return self._error(
                data, lsn, f"holds text that is not UTF-8 ({exc})",
                "read the slot with client_encoding UTF8 (options '-c client_encoding=UTF8'); a database whose "
                "encoding is SQL_ASCII may hold bytes that are not UTF-8: correct those values")
        return self._error(data, lsn, f"does not parse: {exc}", _BUG_FIX)

    # -- errors ------------------------------------------------------------------------------------------

    def _where(self, lsn: int | None) -> str:
        at = f" at LSN {lsn_text(lsn)}" if lsn is not None else ""
        return at + (f" inside the stream block of transaction {self.stream_xid}" if self.in_stream else "")

    def _error(self, data: bytes, lsn: int | None, problem: str, fix: str) -> PgoutputMessageError:
        kind = f"{chr(data[0])!r} (0x{data[0]:02x})" if data else "(empty)"
        return PgoutputMessageError(
            f"pgoutput message of type {kind}{self._where(lsn)} ({len(data)} bytes) {problem}", fix,
            lsn=lsn_text(lsn) if lsn is not None else None, message_type=kind)

    def _unknown(self, kind: int, lsn: int | None) -> PgoutputMessageError:
        shown = f"{chr(kind)!r} (0x{kind:02x})"
        where = self._where(lsn)
        at = lsn_text(lsn) if lsn is not None else None
        if kind in _NOT_REQUESTED:
            return PgoutputMessageError(
                f"pgoutput sent a {_NOT_REQUESTED[kind]} message (type {shown}){where}: a two-phase commit message, "
                "which capture does not request and does not decode",
                "the replication slot was created with two_phase (or the session asked for it): drop the slot, "
                "create it again without two_phase, and bootstrap the source", lsn=at, message_type=shown)
        if self.in_stream and kind in self._plain:
            return PgoutputMessageError(
                f"pgoutput message of type {shown}{where} cannot come inside a stream block (Stream Start without "
                "Stream Stop)", _BUG_FIX, lsn=at, message_type=shown)
        return PgoutputMessageError(
            f"pgoutput message of unknown type {shown}{where}: capture stops rather than skip it, since it may "
            "carry changes", _BUG_FIX, lsn=at, message_type=shown)

    # -- messages ----------------------------------------------------------------------------------------

    def _begin(self, data: bytes) -> tuple[Message, int]:
        return Begin(*begin_fields(data)), 21

    def _commit(self, data: bytes) -> tuple[Message, int]:
        return Commit(*commit_fields(data)), 26

    def _origin(self, data: bytes) -> tuple[Message, int]:
        (commit_lsn,) = struct.unpack_from(">Q", data, 1)
        name, pos = _string(data, 9)
        return Origin(commit_lsn, name), pos

    def _xid(self, data: bytes) -> tuple[int | None, int]:
        """The leading xid of a change inside a stream block, and where the message's own fields start."""
        if self.in_stream:
            return U32(data, 1)[0], 5
        return None, 1

    def _xid_oid(self, data: bytes) -> tuple[int | None, int, int]:
        """A row change's leading xid (inside a stream block), its relation, and where its tuples start."""
        if self.in_stream:
            xid, oid = _XID_OID(data, 1)
            return xid, oid, 9
        return None, U32(data, 1)[0], 5

    def _relation(self, data: bytes) -> tuple[Message, int]:
        xid, pos = self._xid(data)
        (oid,) = U32(data, pos)
        namespace, pos = _string(data, pos + 4)
        name, pos = _string(data, pos)
        identity = chr(data[pos])
        (count,) = U16(data, pos + 1)
        pos += 3
        columns = []
        for _ in range(count):
            flags = data[pos]
            column, pos = _string(data, pos + 1)
            type_oid, typmod = _ATTR(data, pos)
            pos += 8
            columns.append(RelationColumn(column, type_oid, typmod, bool(flags & 1)))
        return Relation(oid, namespace or "pg_catalog", name, identity, tuple(columns), xid=xid), pos

    def _type(self, data: bytes) -> tuple[Message, int]:
        xid, pos = self._xid(data)
        (oid,) = U32(data, pos)
        namespace, pos = _string(data, pos + 4)
        name, pos = _string(data, pos)
        return Type(oid, namespace or "pg_catalog", name, xid=xid), pos

    def _insert(self, data: bytes) -> tuple[Message, int]:
        xid, oid, pos = self._xid_oid(data)
        new, pos = inserted(data, pos)
        return Insert(oid, new, xid=xid), pos

    def _update(self, data: bytes) -> tuple[Message, int]:
        xid, oid, pos = self._xid_oid(data)
        new, old_key, old, pos = updated(data, pos)
        return Update(oid, new, old_key, old, xid=xid), pos

    def _delete(self, data: bytes) -> tuple[Message, int]:
        xid, oid, pos = self._xid_oid(data)
        old_key, old, pos = deleted(data, pos)
        return Delete(oid, old_key, old, xid=xid), pos

    def _truncate(self, data: bytes) -> tuple[Message, int]:
        xid, pos = self._xid(data)
        (count,) = U32(data, pos)
        options = data[pos + 4]
        pos += 5
        oids = struct.unpack_from(f">{count}I", data, pos)
        return Truncate(oids, bool(options & 1), bool(options & 2), xid=xid), pos + 4 * count

    def _message(self, data: bytes) -> tuple[Message, int]:
        xid, pos = self._xid(data)
        flags = data[pos]
        (lsn,) = struct.unpack_from(">Q", data, pos + 1)
        prefix, pos = _string(data, pos + 9)
        (length,) = U32(data, pos)
        pos += 4
        content = data[pos:pos + length]
        if len(content) != length:
            raise Malformed(f"the content is {len(content)} bytes, not the {length} it declares")
        return LogicalMessage(bool(flags & 1), lsn, prefix, content, xid=xid), pos + length

    def _stream_start(self, data: bytes) -> tuple[Message, int]:
        (xid,) = U32(data, 1)
        first = data[5] == 1
        self.in_stream, self.stream_xid = True, xid
        return StreamStart(xid, first), 6

    def _stream_stop(self, data: bytes) -> tuple[Message, int]:
        if not self.in_stream:
            raise Malformed("Stream Stop without a Stream Start")
        self.in_stream, self.stream_xid = False, None
        return _STREAM_STOP, 1

    def _stream_commit(self, data: bytes) -> tuple[Message, int]:
        xid, flags, commit_lsn, end_lsn, commit_ts = _STREAM_COMMIT(data, 1)
        return StreamCommit(xid, flags, commit_lsn, end_lsn, commit_ts), 30

    def _stream_abort(self, data: bytes) -> tuple[Message, int]:
        xid, subxid = _XID_OID(data, 1)
        if len(data) >= 25:  # protocol 4 adds the abort's LSN and time (streaming = parallel)
            abort_lsn, abort_ts = struct.unpack_from(">Qq", data, 9)
            return StreamAbort(xid, subxid, abort_lsn, abort_ts), 25
        return StreamAbort(xid, subxid), 9


_BUG_FIX = ("this is a bug in dagster-databus's pgoutput decoder, or a server newer than it knows: report it with the "
            "server's version (SELECT version()) and the message's LSN, and upgrade dagster-databus. Capture keeps "
            "its checkpoint before this message, so nothing is lost meanwhile")
