"""One poll's read of a PostgreSQL slot (``stream``): pgoutput's messages decoded, rows gathered by table, whole
transactions built into change batches.

Rows are gathered by table as the decoder's tuples and turned into Arrow columns every ``rows.FLUSH_ROWS`` rows
(by the converters bootstraps use), committed or not. Most messages (Begin, a row change, Commit, outside a
stream block) are read by their fields (``tuples``), with no message object made. A transaction past
``spool.SPOOL_ROWS`` rows goes to disk piece by piece and is yielded at its commit as a ``SpooledBatch``, which the
log writes as one segment (a window is never split across segments), so memory stays flat however large it is.
Under protocol 2 such a transaction comes in Stream Start .. Stream Stop blocks, between other transactions; a
Stream Abort drops it, or a subtransaction of it.

Schema changes arrive as relation messages, sent before a table's first change in a stream and again after its
columns change. Each table's columns as the log last wrote them ride in the checkpoint's state (``shapes``): a
relation message that differs from them is a schema change (recorded as the DDL text ``sync.evolve`` reads);
one that differs only from the table's shape now (rows written before a later ALTER) is not.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from dagster_databus.core.batch import ChangeBatch, SpooledBatch
from dagster_databus.core.scn import Scn
from dagster_databus.errors import DatabusError, SchemaDriftError
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.postgres import pgoutput as pg
from dagster_databus.sources.postgres import tuples as tp
from dagster_databus.sources.postgres.drift import Identity, drift_state, identity_change, saved_identities
from dagster_databus.sources.postgres.rows import TableRows, two_shapes
from dagster_databus.sources.postgres.shapes import (
    SHAPES,
    Shape,
    describe_change,
    recorded_columns,
    same_shape,
    shape_of,
    shapes_state,
    unseen_changes,
)
from dagster_databus.sources.postgres.spool import SPOOL_ROWS, Spool, Streamed, spill
from dagster_databus.sources.postgres.tuples import UNCHANGED, Tuple

if TYPE_CHECKING:
    from dagster_databus.config import PostgresSourceConfig
    from dagster_databus.sources.postgres.catalog import PostgresCatalog
    from dagster_databus.sources.postgres.drift import PostgresDrift


# How long a poll waits for the server's decoding to reach the bound once nothing more arrives, and how often it
# asks for a keepalive meanwhile: the walsender decodes only WAL that is flushed, and an asynchronous commit is
# flushed by the WAL writer within a few hundred milliseconds.
_SETTLE_S = 3.0
_ASK_S = 0.1
_STATUS_S = 1.0  # how often a status goes to the server while messages stream (it asks after wal_sender_timeout/2)
# One WAL segment: the WAL an idle slot may hold back before a poll moves it on regardless.
IDLE_ADVANCE_BYTES = 16 << 20
# The messages read by their fields (``tuples``), outside a stream block.
_FIELDS: dict[int, Callable[[bytes], Any]] = {tp.BEGIN: tp.begin_fields, tp.COMMIT: tp.commit_fields,
                                              tp.INSERT: tp.insert_fields, tp.UPDATE: tp.update_fields,
                                              tp.DELETE: tp.delete_fields}


class Polled(Protocol):
    """What a read takes of the stream it is a poll of (``stream.PostgresStream``)."""

    name: str
    config: PostgresSourceConfig
    catalog: PostgresCatalog
    drift: PostgresDrift


class PollReader:
    """One poll's read: messages decoded, rows gathered by table, whole transactions built into batches."""

    def __init__(self, stream: Polled, cursor: Any, feedback: Any, since: Scn, bound: Scn, stats: PollStats,
                 state: Mapping[str, str], publication: int | None) -> None:
        self.stream, self.cursor, self.feedback = stream, cursor, feedback
        self.since, self.bound, self.stats = since, bound, stats
        self.name = stream.name
        self.schema_name = stream.config.schema_
        self.chunk_rows = stream.config.poll.chunk_rows
        self.decoder = pg.PgoutputDecoder()
        self.tables: dict[int, TableRows | None] = {}  # relation oid -> the table, None when not configured
        self.by_name: dict[str, TableRows] = {}
        self.configured = {t.name for t in stream.config.tables}
        # Each table's columns as the log last wrote them (the checkpoint's, else as the table is now), and as it
        # was when the poll began (the catalog read before the bound was fixed).
        self.live = dict(stream.catalog.schemas())
        saved = json.loads(state.get(SHAPES, "{}"))
        self.publication = publication
        # Each table's identity as the log last knew it (the checkpoint's, else as it is now), and now.
        self.live_identities = stream.drift.table_identities()
        self.identities = {**self.live_identities, **saved_identities(state)}
        self.truncated: set[str] = set()  # tables a TRUNCATE message emptied: their new storage is told already
        self.shapes: dict[str, Shape] = {name: saved.get(name, shape_of(s)) for name, s in self.live.items()}
        self.begin: int | None = None  # the open transaction's final LSN (its Begin's)
        self.touched: list[TableRows] = []  # the tables the open transaction has rows of (in memory)
        self.skip = False  # the open transaction commits before ``since``: its changes are in the log already
        self.seq = 0
        self.spool: Spool | None = None  # the open transaction's rows past SPOOL_ROWS
        self.streams: dict[int, Streamed] = {}  # transactions streamed before their commit, by xid
        self.streamed: Streamed | None = None  # the one whose stream block is open
        self.events = 0  # committed events held
        self.last_end = since.value  # the end of the last commit read

    def read(self) -> Iterator[ChangeBatch | SpooledBatch]:
        try:
            yield from self._read()
        finally:  # spooled rows of transactions not committed by the bound are read again by the next poll
            for streamed in self.streams.values():
                streamed.spool.close()
            if self.spool is not None:
                self.spool.close()

    def _read(self) -> Iterator[ChangeBatch | SpooledBatch]:
        settled_at, asked_at, wal_end = time.monotonic(), 0.0, 0
        decoder = self.decoder
        while True:
            message = self.cursor.read_message()
            if message is None:
                if self.cursor.wal_end > wal_end:
                    wal_end, settled_at = self.cursor.wal_end, time.monotonic()
                if self.begin is None and max(wal_end, self.last_end) >= self.bound.value:
                    break
                now = time.monotonic()
                if self.begin is None and now - settled_at > _SETTLE_S:
                    break  # the server's decoding stands still short of the bound: stop where it stands
                if now - asked_at > _ASK_S:  # a keepalive back says how far the server has decoded
                    self.feedback.send_feedback(reply=True)
                    asked_at = now
                select.select([self.cursor], [], [], _ASK_S)
                continue
            settled_at = time.monotonic()
            if settled_at - asked_at > _STATUS_S:  # so the server never asks the reading cursor for one
                self.feedback.send_feedback(force=True)
                asked_at = settled_at
            payload = message.payload
            kind = payload[0]
            if kind in _FIELDS and not decoder.in_stream:  # most messages: their fields, no message object made
                try:
                    fields: Any = _FIELDS[kind](payload)
                except tp.DECODE_ERRORS as exc:
                    raise decoder.failure(payload, message.data_start, exc) from None
                if kind == tp.UPDATE:
                    new, old_key, old = fields
                    self._update(self._table(tp.relation_of(payload)), new, old_key, old, None)
                elif kind == tp.BEGIN:
                    self._begin(fields[0])
                elif kind == tp.COMMIT:
                    _, commit_lsn, end_lsn, commit_ts = fields
                    if self.spool is None:  # a transaction held in memory: no generator made for it
                        if self._held(end_lsn, pg.pg_micros_to_unix_ms(commit_ts)):
                            yield self._chunk()
                    else:
                        yield from self._commit(pg.Commit(0, commit_lsn, end_lsn, commit_ts))
                    if self.last_end >= self.bound.value and self.begin is None:
                        break
                elif kind == tp.INSERT:
                    self._add(self._table(tp.relation_of(payload)), "i", fields, None)
                else:
                    old_key, old = fields
                    self._add(self._table(tp.relation_of(payload)), "d", old if old is not None else old_key, None)
                continue
            # The rest, and every message of a stream block (where a Begin or a Commit is refused as out of place).
            decoded = decoder.decode(payload, message.data_start)
            if isinstance(decoded, pg.ROW_CHANGES):
                self._streamed_change(decoded)
            elif isinstance(decoded, pg.StreamCommit):
                yield from self._commit(decoded)
                if self.last_end >= self.bound.value and self.begin is None:
                    break
            elif isinstance(decoded, pg.Relation):
                yield from self._relation(decoded)
            elif isinstance(decoded, pg.Truncate):
                self._truncate(decoded)
            elif isinstance(decoded, pg.StreamStart):
                self.streamed = self.streams.setdefault(decoded.xid, Streamed())
            elif isinstance(decoded, pg.StreamStop):
                self.streamed = None
            elif isinstance(decoded, pg.StreamAbort):
                self._abort(decoded)
            # Origin, Type and logical messages carry nothing capture keeps.
        # The checkpoint stays at the last commit read, so an idle source's positions move only with its data
        # (a snapshot's SCN is then the same whenever it is read: ``slots.settled_scn``). Once the WAL after
        # it grows past IDLE_ADVANCE_BYTES, the checkpoint moves to where the server has decoded, so the slot
        # lets the server recycle WAL that holds no change of the published tables.
        reached = min(wal_end, self.bound.value)
        # A table replaced, republished or altered unwritten (a quiet source too) moves the checkpoint as a change
        # would: recorded now (a column change past the checkpoint, else left for later), its new state carried.
        unseen = unseen_changes(self.live, self.by_name, self.shapes)
        moved = reached - self.last_end > IDLE_ADVANCE_BYTES or bool(unseen) or any(
            self._identity_change(name, live) for name, live in self.live_identities.items())
        until = max(reached if moved else 0, self.last_end, self.since.value, self.stats.until.value)
        if until > self.stats.until.value or self.events or moved:  # the checkpoint carries what changed since
            self._unseen_changes(Scn(until), unseen if until > self.since.value else {})
        if self.events:
            yield self._chunk()
        self.stats.until = Scn(until)
        self.stats.state = self._state()

    def _state(self) -> dict[str, str]:
        return shapes_state(self.shapes) | drift_state(self.publication, self.identities)

    def _chunk(self) -> ChangeBatch:
        tables = {name: rows for name, table in self.by_name.items() if (rows := table.take()) is not None}
        self.events = 0
        self.stats.until = Scn(self.last_end)
        self.stats.chunks += 1
        self.stats.state = self._state()
        return ChangeBatch(tables)

    def _begin(self, final_lsn: int) -> None:
        self.begin, self.seq = final_lsn, 0
        self.skip = final_lsn < self.since.value

    def _commit(self, commit: pg.Commit | pg.StreamCommit) -> Iterator[ChangeBatch | SpooledBatch]:
        """A commit of a transaction streamed before it, or of one spooled: its rows, yielded after the windows held
        before it as a ``SpooledBatch`` of their own (the others are ``_held``)."""
        window, commit_ms = commit.end_lsn, commit.commit_ts_ms
        if isinstance(commit, pg.StreamCommit):
            streamed = self.streams.pop(commit.xid, None)
            if streamed is not None and commit.commit_lsn >= self.since.value:
                yield from self._streamed_commit(streamed, commit)  # its windows before it first
            elif streamed is not None:
                streamed.spool.close()
            self.last_end = max(self.last_end, window)
            return
        self.begin = None
        spool, self.spool = self.spool, None
        assert spool is not None
        try:
            spill(self.by_name, spool)
            self.touched.clear()  # their open rows are the spool's now
            if self.events:
                yield self._chunk()
            self.last_end = max(self.last_end, window)
            yield self._spooled(window, commit_ms, lambda: spool.read(window, commit_ms))
        finally:
            spool.close()

    def _held(self, window: int, commit_ms: int) -> bool:
        """A transaction's rows, all in memory, held as a window: whether the windows held fill a chunk now."""
        self.begin = None
        self.last_end = max(self.last_end, window)
        for table in self.touched:
            self.events += table.commit(window, commit_ms)
        self.touched.clear()
        return self.events >= self.chunk_rows

    def _streamed_commit(self, streamed: Streamed, commit: pg.StreamCommit) -> Iterator[ChangeBatch | SpooledBatch]:
        try:
            if streamed.refused is not None:  # it counts: what refused one of its changes stops capture now
                raise streamed.refused
            current = self.stream.catalog.schemas()
            for name, table in streamed.tables.items():
                if current.get(name) != table.schema:  # its rows, held or spooled, are of another shape
                    raise two_shapes(self.name, name, commit.commit_lsn)
            for name, statement in streamed.ddl:
                self.stats.ddl.append((Scn(commit.commit_lsn), name, statement))
            if not streamed.kept:
                return
            streamed.spill()
            if self.events:
                yield self._chunk()
            yield self._spooled(commit.end_lsn, commit.commit_ts_ms,
                                lambda: streamed.read(commit.end_lsn, commit.commit_ts_ms))
        finally:
            streamed.spool.close()

    def _change(self, change: pg.Insert | pg.Update | pg.Delete) -> None:
        if isinstance(change, pg.Insert):
            self._add(self._table(change.relation_oid), "i", change.new, change.xid)
        elif isinstance(change, pg.Update):
            self._update(self._table(change.relation_oid), change.new, change.old_key, change.old, change.xid)
        else:
            old = change.old if change.old is not None else change.old_key
            self._add(self._table(change.relation_oid), "d", old, change.xid)

    def _streamed_change(self, change: pg.Insert | pg.Update | pg.Delete) -> None:
        """A change of a transaction that may yet roll back or commit before the checkpoint (streamed again, then
        dropped): what refuses it (a value, two shapes) is kept, and raised only at a commit that counts."""
        streamed = self.streamed
        assert streamed is not None
        if streamed.refused is not None:  # its later rows are not needed: it fails or is dropped at its commit
            return
        try:
            self._change(change)
        except DatabusError as exc:
            streamed.refuse(exc)

    def _spooled(self, window: int, commit_ms: int, pieces: Callable[[], Iterator[ChangeBatch]]) -> SpooledBatch:
        self.stats.until = Scn(window)
        self.stats.chunks += 1
        self.stats.state = self._state()
        return SpooledBatch(Scn(window), Scn(window), 1, commit_ms, pieces)

    def _abort(self, abort: pg.StreamAbort) -> None:
        """A streamed transaction rolled back (its rows go), or one of its subtransactions (left out at commit)."""
        streamed = self.streams.get(abort.xid)
        if streamed is not None and abort.subxid == abort.xid:
            self.streams.pop(abort.xid).spool.close()
        elif streamed is not None:
            streamed.aborted.add(abort.subxid)

    def _add(self, table: TableRows | None, op: str, row: Tuple | None, xid: int | None) -> None:
        if table is None or (self.skip and xid is None):
            return
        image = row if row is not None else (None,) * table.width
        if xid is not None:  # a change streamed before its transaction commits: held apart, by transaction
            streamed = self.streamed
            assert streamed is not None
            name = table.schema.table
            own = streamed.tables.get(name)
            if own is None or own.schema != table.schema:
                if own is not None:  # it holds rows (in memory or spooled) of the table's other shape
                    raise two_shapes(self.name, name, self.last_end)
                own = streamed.tables[name] = TableRows(table.schema, table.schema.column_names)
            streamed.add(own, op, image, xid)
            return
        assert self.begin is not None
        if table.held == table.committed:  # its first row of the open transaction
            self.touched.append(table)
        table.add(op, image, self.seq, self.begin)
        self.seq += 1
        if self.seq % SPOOL_ROWS == 0:  # too many to hold: the open transaction's rows so far go to disk
            if self.spool is None:
                self.spool = Spool()
            spill(self.by_name, self.spool)

    def _update(self, table: TableRows | None, new: Tuple, old_key: Tuple | None, old: Tuple | None,
                xid: int | None) -> None:
        """An update of ``table`` (``pgoutput.Update``'s tuples)."""
        if table is None or (self.skip and xid is None):
            return
        if UNCHANGED in new:
            new = table.untoasted(new, old, self.name)
        before = old if old is not None else old_key
        if before is not None and table.key_of(before) != table.key_of(new):
            self._add(table, "d", before, xid)  # the key changed: the old row goes
            self._add(table, "i", new, xid)
        else:
            self._add(table, "u", new, xid)

    def _truncate(self, message: pg.Truncate) -> None:
        """TRUNCATE empties tables without row events: recorded as a statement, so the merge reads them again."""
        if self.skip and self.streamed is None:
            return
        for oid in message.relation_oids:
            table = self._table(oid)
            if table is not None:
                self._record(table.schema.table, f"TRUNCATE {self.schema_name}.{table.schema.table}")
                self.truncated.add(table.schema.table)

    def _record(self, table: str, statement: str) -> None:
        """A statement of the open transaction, at its commit: a streamed one's waits for its Stream Commit."""
        if self.streamed is not None:
            self.streamed.ddl.append((table, statement))
        elif self.begin is not None:
            self.stats.ddl.append((Scn(self.begin), table, statement))

    def _table(self, oid: int) -> TableRows | None:
        if oid not in self.tables:
            raise SchemaDriftError(f"source {self.name!r}: a change of relation {oid} came before its description",
                                   "run again; report it if it repeats", source=self.name)
        return self.tables[oid]

    def _relation(self, relation: pg.Relation) -> Iterator[ChangeBatch]:
        """A relation message: the table's columns from here on. A shape other than the catalog's becomes the
        catalog's (after the events held so far, written with the old one, are yielded); one other than the
        log's last is a schema change, recorded at the start of the transaction that first wrote the new shape."""
        if relation.namespace != self.schema_name or relation.name not in self.configured:
            self.tables[relation.oid] = None
            return
        name = relation.name
        recorded = self.identities.get(name)
        if recorded is not None and recorded[0] != relation.oid:
            live = self.live_identities.get(name, (None, None))
            now = (relation.oid, *(live[1:] if live[0] == relation.oid else (None, None)))
            change = identity_change(name, recorded, now)
            if change is not None:
                self._record(name, change)
            self.identities[name] = now
        current = self.stream.catalog.schemas().get(name)
        schema = self.stream.catalog.relation_schema(relation, current, recorded_columns(self.shapes.get(name)))
        table = self.by_name.get(name)
        if table is None or table.schema != schema:
            if table is not None and (table.open or (self.spool is not None and name in self.spool.tables)):
                raise two_shapes(self.name, name, self.begin or 0)
            if self.events and (table is not None or schema != current):
                yield self._chunk()
            if schema != current:
                self.stream.catalog.adopt({name: schema})
            table = self.by_name[name] = TableRows(schema, [c.name for c in relation.columns])
        self.tables[relation.oid] = table
        before, after = self.shapes.get(name), shape_of(schema)
        in_transaction = self.begin is not None or self.streamed is not None
        if before is not None and not same_shape(before, after) and in_transaction:
            self._record(name, describe_change(before, schema))
        self.shapes[name] = after

    def _unseen_changes(self, until: Scn, unseen: Mapping[str, str]) -> None:
        """Record at ``until`` what no relation message told: columns changed (``unseen``: by the catalog read before
        the bound, so the ALTER committed before it) and identities changed (``shapes.identity_change``)."""
        for name, live in self.live_identities.items():
            change = self._identity_change(name, live)
            if change is not None:
                self.stats.ddl.append((until, name, change))
            self.stats.restate |= live != self.identities.get(name)
            if live[0] is not None:
                self.identities[name] = live
        for name, statement in unseen.items():
            self.stats.ddl.append((until, name, statement))
            self.shapes[name] = shape_of(self.live[name])
        self.stats.restate |= bool(unseen)

    def _identity_change(self, name: str, live: Identity) -> str | None:
        return identity_change(name, self.identities.get(name, live), live, truncated=name in self.truncated)
