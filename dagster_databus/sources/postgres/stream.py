"""The change stream of a PostgreSQL source: its slot read with ``pgoutput`` over the replication protocol,
decoded into columnar change batches of whole transactions, with WAL LSNs as SCNs.

A transaction's events take its commit's end LSN as their SCN: what the slot is confirmed at, and what a
restarted stream resumes after (the server skips every transaction whose commit lies before it). A poll reads
up to the WAL position the server had written when it started; the server's keepalives say how far it has
decoded, so a poll over WAL that holds no change of the published tables still moves the checkpoint, and the
slot with it: idle tables do not make the server keep WAL. The slot is confirmed only in ``release``, after the
change log has committed what was read.
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg2

from dagster_databus.core.batch import ChangeBatch, ChangeBatchBuilder
from dagster_databus.core.events import Window
from dagster_databus.core.schema import ColumnsConverter, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConcurrentRunError, LogGapError, SchemaDriftError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.postgres.bootstrap import lsn_of
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import PostgresConnector, ReplicationConnection
from dagster_databus.sources.postgres.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    PgoutputDecoder,
    Relation,
    Truncate,
    Update,
    lsn_text,
)
from dagster_databus.sources.postgres.setup import read_epoch
from dagster_databus.sources.postgres.types import text_converter

# How long a poll waits for the server's decoding to reach the bound once nothing more arrives, and how often it
# asks for a keepalive meanwhile: the walsender decodes only WAL that is flushed, and an asynchronous commit is
# flushed by the WAL writer within a few hundred milliseconds.
_SETTLE_S = 3.0
_ASK_S = 0.1
# One WAL segment: the WAL an idle slot may hold back before a poll moves it on regardless.
IDLE_ADVANCE_BYTES = 16 << 20


@dataclass
class _Table:
    """A published table as the stream knows it: its schema (from the newest relation message), the converter
    of its row images, and its columns in the order tuples carry them."""

    schema: TableSchema
    convert: ColumnsConverter
    names: tuple[str, ...]
    key: tuple[int, ...]  # positions of the key columns in ``names``


class PostgresStream:
    """Polling: whole transactions after a checkpoint, up to the WAL written when the poll starts. The ``stream``
    part of ``PostgresSource``."""

    def __init__(self, connector: PostgresConnector, catalog: PostgresCatalog) -> None:
        self.connector = connector
        self.catalog = catalog
        self.config = connector.config
        self.name = connector.name
        self._stream: ReplicationConnection | None = None  # kept open from a poll to its release

    # -- positions ---------------------------------------------------------------------

    def epoch(self) -> str:
        with closing(self.connector.connect()) as conn:
            return read_epoch(conn, self.config.slot_name)

    def high_water_mark(self) -> Scn:
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            row = cur.fetchone()
            assert row is not None
            return Scn(lsn_of(row[0]))

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        """The slot's confirmed position: where its stream starts (install created it, so nothing after it is
        lost), else the current WAL position."""
        slot = self._slot()
        if slot is not None and slot["confirmed_flush_lsn"]:
            return Scn(lsn_of(slot["confirmed_flush_lsn"])), {}
        return self.high_water_mark(), {}

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()  # the server refuses a second reader of an active slot (``_start`` says so)

    def _slot(self) -> dict[str, Any] | None:
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "slot.sql"), {"slot": self.config.slot_name})
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cur.description or ()], row, strict=True))

    # -- the stream --------------------------------------------------------------------

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[list[Window] | ChangeBatch]:
        self._check_slot(since)
        bound = self.high_water_mark()
        stats.source_hwm = bound
        if since >= bound:
            return
        self.close()
        conn = self._stream = self.connector.replication()
        cursor = conn.cursor()
        self._start(cursor, since)
        reader = _Reader(self, cursor, since, bound, stats)
        try:
            yield from reader.read()
        except psycopg2.Error as exc:
            raise SourceUnavailableError(
                f"lost the replication connection to source {self.name!r} ({self.connector.describe()}): "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}",
                "run again: capture resumes from the last durable checkpoint", source=self.name) from None

    def release(self, through: Scn) -> None:
        """Confirm the slot at ``through``: the server may recycle the WAL before it."""
        conn, self._stream = self._stream, None
        if conn is None:
            return
        try:
            cursor: Any = conn.cursor()
            cursor.send_feedback(write_lsn=through.value, flush_lsn=through.value, force=True)
        except psycopg2.Error:
            pass  # the next poll confirms it again before it reads (``_start``)
        finally:
            conn.close()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _check_slot(self, since: Scn) -> None:
        """Refuse a slot that cannot give every change after ``since``: invalidated (its WAL removed) or
        confirmed past it (dropped and created again, or advanced by someone else)."""
        slot = self._slot()
        fix = (f"run `databus bootstrap --source {self.name}` (the log and snapshots start afresh from the slot), "
               f"or set sources.{self.name}.on_purged: bootstrap")
        if slot is None:
            return  # require_installed names the missing slot and its fix
        if slot["wal_status"] == "lost":
            raise LogGapError(
                f"replication slot {self.config.slot_name!r} of source {self.name!r} was invalidated: the server "
                "removed WAL it still held (max_slot_wal_keep_size), so the changes after the checkpoint are gone",
                fix + "; raise max_slot_wal_keep_size or capture more often", source=self.name)
        confirmed = slot["confirmed_flush_lsn"]
        if confirmed and lsn_of(confirmed) > since.value:
            raise LogGapError(
                f"replication slot {self.config.slot_name!r} of source {self.name!r} starts at {confirmed}, after the "
                f"change log's checkpoint {lsn_text(since.value)}: the slot was dropped and created again (or "
                "advanced by another client), so the changes between are gone", fix, source=self.name)

    def _start(self, cursor: Any, since: Scn) -> None:
        options = {"proto_version": "1", "publication_names": self.config.publication_name}
        try:
            cursor.start_replication(slot_name=self.config.slot_name, decode=False, start_lsn=since.value,
                                     options=options, status_interval=10)
            # The log holds everything through ``since``: the server may drop it (a release the last run missed).
            cursor.send_feedback(write_lsn=since.value, flush_lsn=since.value)
        except psycopg2.Error as exc:
            text = str(exc).strip()
            if "is active for PID" in text:
                raise ConcurrentRunError(
                    f"replication slot {self.config.slot_name!r} of source {self.name!r} is being read by another "
                    f"process ({text.splitlines()[0]})",
                    "wait for the other capture run to finish; a slot serves one reader at a time",
                    source=self.name) from None
            raise SourceUnavailableError(
                f"source {self.name!r} could not stream slot {self.config.slot_name!r}: {text.splitlines()[0]}",
                "run `databus validate` for the source, then again", source=self.name) from None


class _Reader:
    """One poll's read of the stream: messages decoded, transactions gathered, whole ones built into batches."""

    def __init__(self, stream: PostgresStream, cursor: Any, since: Scn, bound: Scn, stats: PollStats) -> None:
        self.stream = stream
        self.cursor = cursor
        self.since = since
        self.bound = bound
        self.stats = stats
        self.name = stream.name
        self.schema_name = stream.config.schema_
        self.chunk_rows = stream.config.poll.chunk_rows
        self.decoder = PgoutputDecoder()
        self.tables: dict[int, _Table | None] = {}  # relation oid -> the table, None when not configured
        self.configured = {t.name for t in stream.config.tables}
        self.builder = ChangeBatchBuilder()
        self.changes: list[tuple[_Table, str, dict[str, Any]]] = []  # the open transaction's events
        self.begin: Begin | None = None

    def read(self) -> Iterator[ChangeBatch]:
        last_end = self.since.value
        settled_at, asked_at, wal_end = time.monotonic(), 0.0, 0
        while True:
            message = self.cursor.read_message()
            if message is None:
                if self.cursor.wal_end > wal_end:
                    wal_end, settled_at = self.cursor.wal_end, time.monotonic()
                if self.begin is None and max(wal_end, last_end) >= self.bound.value:
                    break
                now = time.monotonic()
                if self.begin is None and now - settled_at > _SETTLE_S:
                    break  # the server's decoding stands still short of the bound: stop where it stands
                if now - asked_at > _ASK_S:
                    self.cursor.send_feedback(reply=True)
                    asked_at = now
                select.select([self.cursor], [], [], _ASK_S)
                continue
            settled_at = time.monotonic()
            decoded = self.decoder.decode(message.payload, message.data_start)
            if isinstance(decoded, Commit):
                if self._commit(decoded) and self.builder.events >= self.chunk_rows:
                    yield self._chunk(Scn(decoded.end_lsn))
                last_end = max(last_end, decoded.end_lsn)
                if last_end >= self.bound.value:
                    break
            elif isinstance(decoded, Relation):
                changed = self._relation(decoded)
                if changed is not None:
                    if self.builder.events:  # the events read so far were written with the old shape
                        yield self._chunk(Scn(last_end))
                    self.stream.catalog.adopt({changed.table: changed})
            else:
                self._change(decoded)
        if self.builder.events:
            yield self._chunk(Scn(last_end))
        # The checkpoint stays at the last commit read, so an idle source's positions move only with its data
        # (a snapshot's SCN is then the same whenever it is read: ``bootstrap.settled_scn``). Once the WAL after
        # it grows past IDLE_ADVANCE_BYTES, the checkpoint moves to where the server has decoded, so the slot
        # lets the server recycle WAL that holds no change of the published tables.
        until = last_end
        reached = min(wal_end, self.bound.value)
        if reached - last_end > IDLE_ADVANCE_BYTES:
            until = reached
        self.stats.until = Scn(max(until, self.since.value, self.stats.until.value))

    def _chunk(self, through: Scn) -> ChangeBatch:
        batch = self.builder.build()
        self.builder = ChangeBatchBuilder()
        self.stats.until = through
        self.stats.chunks += 1
        self.stats.state = {}
        return batch

    def _change(self, message: object) -> None:
        if isinstance(message, Begin):
            self.begin, self.changes = message, []
        elif isinstance(message, Insert):
            table = self._table(message.relation_oid)
            if table is not None:
                self.changes.append((table, "i", self._image(table, message.new, None)))
        elif isinstance(message, Update):
            table = self._table(message.relation_oid)
            if table is not None:
                self._update(table, message)
        elif isinstance(message, Delete):
            table = self._table(message.relation_oid)
            if table is not None:
                old = message.old if message.old is not None else message.old_key
                self.changes.append((table, "d", self._image(table, old or (), None)))
        elif isinstance(message, Truncate):
            assert self.begin is not None
            for oid in message.relation_oids:
                table = self._table(oid)
                if table is not None:
                    statement = f"TRUNCATE {self.schema_name}.{table.schema.table}"
                    self.stats.ddl.append((Scn(self.begin.final_lsn), table.schema.table, statement))
        # Origin, Type and logical messages carry nothing capture keeps.

    def _commit(self, commit: Commit) -> bool:
        """Add the transaction's events to the batch; whether it had any."""
        changes, self.changes, self.begin = self.changes, [], None
        if not changes or commit.end_lsn <= self.since.value:
            return False
        window, ms = Scn(commit.end_lsn), commit.commit_ts_ms
        for seq, (table, op, image) in enumerate(changes):
            self.builder.add(table.schema, table.convert, op, image, window, seq, ms)
        return True

    def _update(self, table: _Table, message: Update) -> None:
        new = self._image(table, message.new, message.old)
        old = message.old if message.old is not None else message.old_key
        if old is not None and any(old[i] != message.new[i] and message.new[i] is not UNCHANGED for i in table.key):
            self.changes.append((table, "d", self._image(table, old, None)))  # the key changed: the old row goes
            self.changes.append((table, "i", new))
        else:
            self.changes.append((table, "u", new))

    def _image(self, table: _Table, values: Sequence[Any], old: Sequence[Any] | None) -> dict[str, Any]:
        """A row image by column name; an unchanged TOASTed value is taken from the old row, which only
        REPLICA IDENTITY FULL sends (install sets it on tables that have such columns)."""
        image = dict(zip(table.names, values, strict=False))
        for i, value in enumerate(values):
            if value is UNCHANGED:
                if old is None or old[i] is UNCHANGED:
                    raise SchemaDriftError(
                        f"an update of table {table.schema.table!r} of source {self.name!r} left column "
                        f"{table.names[i]!r} unchanged and out of line (TOAST), and the server sent no old row to "
                        "take its value from: the table's REPLICA IDENTITY is not FULL",
                        f"run `databus install --source {self.name}` (it sets REPLICA IDENTITY FULL), then "
                        f"`databus bootstrap --source {self.name}`", source=self.name, table=table.schema.table)
                image[table.names[i]] = old[i]
        return image

    def _table(self, oid: int) -> _Table | None:
        if oid not in self.tables:
            raise SchemaDriftError(f"source {self.name!r}: a change of relation {oid} came before its description",
                                   "run again; report it if it repeats", source=self.name)
        return self.tables[oid]

    def _relation(self, relation: Relation) -> TableSchema | None:
        """A relation message: sent before a table's first change in each stream, and again after its columns
        change. A shape that differs from the table's current schema is a schema change (returned), recorded as
        the statement ``snapshot.evolve`` reads at the start of the transaction that first wrote the new shape."""
        if relation.namespace != self.schema_name or relation.name not in self.configured:
            self.tables[relation.oid] = None
            return None
        name = relation.name
        current = self.stream.catalog.schemas().get(name)
        schema = self._relation_schema(relation, current)
        self.tables[relation.oid] = _published(schema, [c.name for c in relation.columns])
        if schema == current:
            return None
        if any(table.schema.table == name for table, _, _ in self.changes):
            raise SchemaDriftError(
                f"a transaction of source {self.name!r} changed table {name!r}'s columns between its row changes "
                f"(at {lsn_text(self.begin.final_lsn if self.begin else 0)}): its window cannot hold both shapes",
                f"run `databus bootstrap --source {self.name}`", source=self.name, table=name)
        if current is not None and self.begin is not None:
            self.stats.ddl.append((Scn(self.begin.final_lsn), name, _describe(current, schema)))
        return schema

    def _relation_schema(self, relation: Relation, current: TableSchema | None) -> TableSchema:
        key = current.primary_key if current is not None else self.stream.config.table(relation.name).primary_key
        with closing(self.stream.connector.connect()) as conn, conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "relation_columns.sql"),
                        {"names": [c.name for c in relation.columns], "types": [c.type_oid for c in relation.columns],
                         "typmods": [c.type_modifier for c in relation.columns],
                         "schema": self.schema_name, "table": relation.name})
            rows = cur.fetchall()
        return self.stream.catalog.build(relation.name, key, rows, self.stream.connector.field("tables"))


def _published(schema: TableSchema, names: Sequence[str]) -> _Table:
    convert = schema.column_converter(text_converter)
    at = {n: i for i, n in enumerate(names)}
    return _Table(schema, convert, tuple(names), tuple(at[k] for k in schema.primary_key))


def _describe(before: TableSchema, after: TableSchema) -> str:
    """The column change between two shapes of a table, as the statement ``snapshot.evolve`` reads."""
    old = {c.name: c for c in before.columns}
    new = {c.name: c for c in after.columns}
    parts = [f"DROP COLUMN {n}" for n in old if n not in new]
    for name, column in new.items():
        if name not in old:
            default = f" DEFAULT {column.default}" if column.default is not None else ""
            parts.append(f"ADD COLUMN {name} {column.source_type}{default}")
        elif old[name].source_type != column.source_type:
            parts.append(f"ALTER COLUMN {name} TYPE {column.source_type}")
    return f"ALTER TABLE {after.table} " + ", ".join(parts or ["(relation changed)"])

