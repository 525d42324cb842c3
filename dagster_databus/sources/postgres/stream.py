"""The change stream of a PostgreSQL source: its slot read with ``pgoutput`` over the replication protocol,
decoded into columnar change batches of whole transactions, with WAL LSNs as SCNs.

A transaction's events take its commit's end LSN as their SCN: what the slot is confirmed at, and what a
restarted stream resumes after. A poll reads up to the WAL position the server had written when it started; the
server's keepalives say how far it has decoded, so WAL that holds no change of the published tables still moves
the checkpoint, and the slot with it. The slot is confirmed only in ``release``, after the log has committed.

Rows are gathered by table as the decoder's tuples and turned into Arrow columns every ``FLUSH_ROWS`` rows (by
the converters bootstraps use), committed or not: a transaction of millions of rows is held by column until its
commit gives its SCN, as one batch (a window is never split across the log's segments).

Schema changes arrive as relation messages, sent before a table's first change in a stream and again after its
columns change. Each table's columns as the log last wrote them ride in the checkpoint's state (``shapes``): a
relation message that differs from them is a schema change (recorded as the DDL text ``snapshot.evolve`` reads);
one that differs only from the table's shape now (rows written before a later ALTER) is not.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from typing import Any

import numpy as np
import psycopg2
import pyarrow as pa

from dagster_databus.core.batch import ChangeBatch, batch_schema, encode_keys, partitions
from dagster_databus.core.events import Window
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConcurrentRunError, LogGapError, SchemaDriftError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.postgres import pgoutput as pg
from dagster_databus.sources.postgres.bootstrap import lsn_of
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import PostgresConnector, ReplicationConnection
from dagster_databus.sources.postgres.pgoutput import UNCHANGED, Tuple, lsn_text
from dagster_databus.sources.postgres.setup import read_epoch
from dagster_databus.sources.postgres.types import text_converter

# How long a poll waits for the server's decoding to reach the bound once nothing more arrives, and how often it
# asks for a keepalive meanwhile: the walsender decodes only WAL that is flushed, and an asynchronous commit is
# flushed by the WAL writer within a few hundred milliseconds.
_SETTLE_S = 3.0
_ASK_S = 0.1
_STATUS_S = 1.0  # how often a status goes to the server while messages stream (it asks after wal_sender_timeout/2)
# One WAL segment: the WAL an idle slot may hold back before a poll moves it on regardless.
IDLE_ADVANCE_BYTES = 16 << 20
# Rows of a table held as decoded tuples before they are converted into Arrow columns.
FLUSH_ROWS = 10_000
# The checkpoint state that holds each table's columns as the log last wrote them: {table: [[name, type]...]}.
SHAPES = "shapes"

Shape = list[list[str]]


class PostgresStream:
    """Polling: whole transactions after a checkpoint, up to the WAL written when the poll starts. The ``stream``
    part of ``PostgresSource``."""

    def __init__(self, connector: PostgresConnector, catalog: PostgresCatalog) -> None:
        self.connector, self.catalog, self.config, self.name = connector, catalog, connector.config, connector.name
        self._stream: ReplicationConnection | None = None  # kept open from a poll to its release

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
        """Where a change log that starts afresh (install, bootstrap) starts: the slot moved on to the WAL written
        now (the snapshots are read after it; WAL an earlier log could not capture is passed over; a slot whose
        WAL the server removed is made again), else the current WAL position; with the tables' columns now."""
        state = _state({name: _shape(schema) for name, schema in self.catalog.preflight().items()})
        slot, name = self.slot(), {"slot": self.config.slot_name}
        if slot is None:
            return self.high_water_mark(), state
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            if slot["wal_status"] == "lost":
                cur.execute(sqlfiles.load("postgres", "drop_slot.sql"), name)
                cur.execute(sqlfiles.load("postgres", "create_slot.sql"), name)
            cur.execute(sqlfiles.load("postgres", "advance_slot.sql"), name)
            row = cur.fetchone()
        assert row is not None
        return Scn(lsn_of(row[0])), state

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()  # the server refuses a second reader of an active slot (``_start`` says so)

    def slot(self) -> dict[str, Any] | None:
        """The capture slot as ``sql/postgres/slot.sql`` describes it, or None when it does not exist."""
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "slot.sql"), {"slot": self.config.slot_name})
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cur.description or ()], row, strict=True))

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[list[Window] | ChangeBatch]:
        self._check_slot(since)
        bound = self.high_water_mark()
        stats.source_hwm = bound
        if since >= bound:
            return
        self.close()
        conn = self._stream = self.connector.replication()
        # Everything sent goes through a cursor of its own that reads nothing: psycopg2 moves a reading cursor's
        # flush position on to a keepalive's WAL end by itself, past what the change log holds.
        cursor, feedback = conn.cursor(), conn.cursor()
        self._start(cursor, feedback, since)
        reader = _Reader(self, cursor, feedback, since, bound, stats, state or {})
        try:
            yield from reader.read()
        except psycopg2.Error as exc:
            self.close()
            raise SourceUnavailableError(
                f"lost the replication connection to source {self.name!r} ({self.connector.describe()}): "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}",
                "run again: capture resumes from the last durable checkpoint", source=self.name) from None
        except BaseException:
            self.close()  # the slot is free for the next run (or a bootstrap) at once
            raise

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
        slot = self.slot()
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

    def _start(self, cursor: Any, feedback: Any, since: Scn) -> None:
        options = {"proto_version": "1", "publication_names": self.config.publication_name}
        try:
            cursor.start_replication(slot_name=self.config.slot_name, decode=False, start_lsn=since.value,
                                     options=options, status_interval=10)
            # The log holds everything through ``since``: the server may drop it (a release the last run missed).
            feedback.send_feedback(write_lsn=since.value, flush_lsn=since.value, force=True)
        except psycopg2.Error as exc:
            text = str(exc).strip()
            if "is active for PID" in text:
                raise ConcurrentRunError(
                    f"replication slot {self.config.slot_name!r} of source {self.name!r} is locked by another run "
                    f"reading it ({text.splitlines()[0]})",
                    "wait for the other capture run to finish; a slot serves one reader at a time",
                    source=self.name) from None
            raise SourceUnavailableError(
                f"source {self.name!r} could not stream slot {self.config.slot_name!r}: {text.splitlines()[0]}",
                "run `databus validate` for the source, then again", source=self.name) from None


class _Table:
    """A published table in one poll: its schema (from a relation message) and its events so far, as Arrow
    arrays of converted rows, column by column, and the rows not converted yet; the windows (transactions) of
    the committed ones, in order. The open transaction's rows are the tail past them."""

    def __init__(self, schema: TableSchema, names: Sequence[str]) -> None:
        assert list(names) == schema.column_names, f"{schema.table}: tuples hold {names}"  # as catalog.build keeps
        self.schema = schema
        self.key = tuple(schema.column_names.index(k) for k in schema.primary_key)
        self.width = len(names)
        self.columns: list[list[pa.Array]] = [[] for _ in range(self.width + 2)]  # the table's, __op, __seq
        self.rows: list[Tuple] = []
        self.ops: list[str] = []
        self.seqs: list[int] = []
        self.starts: list[tuple[int, int]] = []  # (first row, commit LSN) of each transaction in ``rows``
        self.windows: list[tuple[int, int, int]] = []  # (rows, window SCN, commit ms) per committed transaction
        self.held = 0  # rows held, converted or not
        self.committed = 0  # of which the windows cover

    @property
    def open(self) -> bool:
        return self.held > self.committed

    def add(self, op: str, row: Tuple, seq: int, lsn: int) -> None:
        if not self.starts or self.starts[-1][1] != lsn:
            self.starts.append((len(self.rows), lsn))
        self.rows.append(row)
        self.ops.append(op)
        self.seqs.append(seq)
        self.held += 1
        if len(self.rows) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """The unconverted rows into Arrow arrays, each value by the converter a bootstrap uses."""
        if not self.rows:
            return
        try:
            data = self.schema.batch(text_converter, "")(self.rows)
        except Exception:  # a value refused: converted again by transaction, the error names the one holding it
            for (first, lsn), (end, _) in zip(self.starts, [*self.starts[1:], (len(self.rows), 0)], strict=True):
                where = f"the change events of the transaction committed at LSN {lsn_text(lsn)}"
                self.schema.batch(text_converter, where)(self.rows[first:end])
            raise
        for parts, array in zip(self.columns, [*data.columns, pa.array(self.ops), pa.array(self.seqs, pa.int32())],
                                strict=True):
            parts.append(array)
        self.rows, self.ops, self.seqs, self.starts = [], [], [], []

    def commit(self, window: int, commit_ms: int) -> int:
        """The open transaction's rows (how many) belong to window ``window``."""
        rows = self.held - self.committed
        if rows:
            self.windows.append((rows, window, commit_ms))
            self.committed = self.held
        return rows

    def take(self) -> pa.RecordBatch | None:
        """The committed rows as the table's record batch in a change batch; the open transaction's stay."""
        if not self.committed:
            return None
        self.flush()
        rows, n = [], self.committed
        for i, parts in enumerate(self.columns):  # a column at a time, its parts let go as it is joined
            whole = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
            self.columns[i] = [whole.slice(n)] if len(whole) > n else []
            rows.append(whole.slice(0, n))
            if len(parts) > 1:
                del parts, whole
                pa.default_memory_pool().release_unused()  # the parts' pages, not kept for arrays of their size
        counts, scns, commits = (np.array(v, np.int64) for v in zip(*self.windows, strict=True))
        window, commit = pa.array(np.repeat(scns, counts)), pa.array(np.repeat(commits, counts))
        schema, columns, (op, seq) = self.schema, rows[:self.width], rows[self.width:]
        keys = encode_keys([columns[i] for i in self.key], lambda: list(zip(
            *(schema.columns[i].type.from_arrow(columns[i]) for i in self.key), strict=True)), schema,
            f"the change events of SCN {self.windows[0][1]} to {self.windows[-1][1]}")
        self.held, self.committed, self.windows = self.held - self.committed, 0, []
        return pa.RecordBatch.from_arrays(
            [*columns, window, window, seq, op, keys, partitions(keys), commit],
            schema=batch_schema(schema))


class _Reader:
    """One poll's read of the stream: messages decoded, rows gathered by table, whole transactions built into
    batches."""

    def __init__(self, stream: PostgresStream, cursor: Any, feedback: Any, since: Scn, bound: Scn, stats: PollStats,
                 state: Mapping[str, str]) -> None:
        self.stream, self.cursor, self.feedback = stream, cursor, feedback
        self.since, self.bound, self.stats = since, bound, stats
        self.name = stream.name
        self.schema_name = stream.config.schema_
        self.chunk_rows = stream.config.poll.chunk_rows
        self.decoder = pg.PgoutputDecoder()
        self.tables: dict[int, _Table | None] = {}  # relation oid -> the table, None when not configured
        self.by_name: dict[str, _Table] = {}
        self.configured = {t.name for t in stream.config.tables}
        # Each table's columns as the log last wrote them (the checkpoint's, else as the table is now), and as it
        # was when the poll began (the catalog read before the bound was fixed).
        self.live = dict(stream.catalog.schemas())
        saved = json.loads(state.get(SHAPES, "{}"))
        self.shapes: dict[str, Shape] = {name: saved.get(name, _shape(s)) for name, s in self.live.items()}
        self.begin: pg.Begin | None = None
        self.skip = False  # the open transaction commits before ``since``: its changes are in the log already
        self.seq = 0
        self.events = 0  # committed events held
        self.last_end = since.value  # the end of the last commit read

    def read(self) -> Iterator[ChangeBatch]:
        settled_at, asked_at, wal_end = time.monotonic(), 0.0, 0
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
            decoded = self.decoder.decode(message.payload, message.data_start)
            if isinstance(decoded, pg.Insert):
                self._add(self._table(decoded.relation_oid), "i", decoded.new)
            elif isinstance(decoded, pg.Update):
                self._update(decoded)
            elif isinstance(decoded, pg.Delete):
                old = decoded.old if decoded.old is not None else decoded.old_key
                self._add(self._table(decoded.relation_oid), "d", old)
            elif isinstance(decoded, pg.Begin):
                self.begin, self.seq = decoded, 0
                self.skip = decoded.final_lsn < self.since.value
            elif isinstance(decoded, pg.Commit):
                if self._commit(decoded) and self.events >= self.chunk_rows:
                    yield self._chunk()
                if self.last_end >= self.bound.value:
                    break
            elif isinstance(decoded, pg.Relation):
                yield from self._relation(decoded)
            elif isinstance(decoded, pg.Truncate):
                self._truncate(decoded)
            # Origin, Type and logical messages carry nothing capture keeps.
        # The checkpoint stays at the last commit read, so an idle source's positions move only with its data
        # (a snapshot's SCN is then the same whenever it is read: ``bootstrap.settled_scn``). Once the WAL after
        # it grows past IDLE_ADVANCE_BYTES, the checkpoint moves to where the server has decoded, so the slot
        # lets the server recycle WAL that holds no change of the published tables.
        reached = min(wal_end, self.bound.value)
        until = max(reached if reached - self.last_end > IDLE_ADVANCE_BYTES else self.last_end, self.since.value,
                    self.stats.until.value)
        if until > self.stats.until.value or self.events:  # the checkpoint moves: it carries what changed since
            self._unseen_changes(Scn(until))
        if self.events:
            yield self._chunk()
        self.stats.until = Scn(until)
        self.stats.state = _state(self.shapes)

    def _chunk(self) -> ChangeBatch:
        tables = {name: rows for name, table in self.by_name.items() if (rows := table.take()) is not None}
        self.events = 0
        self.stats.until = Scn(self.last_end)
        self.stats.chunks += 1
        self.stats.state = _state(self.shapes)
        return ChangeBatch(tables)

    def _commit(self, commit: pg.Commit) -> bool:
        """The open transaction's rows are a window; whether it had any."""
        self.begin = None
        self.last_end = max(self.last_end, commit.end_lsn)
        added = sum(t.commit(commit.end_lsn, commit.commit_ts_ms) for t in self.by_name.values())
        self.events += added
        return added > 0

    def _add(self, table: _Table | None, op: str, row: Tuple | None) -> None:
        if table is not None and not self.skip:
            assert self.begin is not None
            table.add(op, row if row is not None else (None,) * table.width, self.seq, self.begin.final_lsn)
            self.seq += 1

    def _update(self, message: pg.Update) -> None:
        table = self._table(message.relation_oid)
        if table is None or self.skip:
            return
        new = message.new
        if UNCHANGED in new:
            new = self._untoasted(table, new, message.old)
        old = message.old if message.old is not None else message.old_key
        if old is not None and any(old[i] != new[i] for i in table.key):
            self._add(table, "d", old)  # the key changed: the old row goes
            self._add(table, "i", new)
        else:
            self._add(table, "u", new)

    def _untoasted(self, table: _Table, new: Tuple, old: Tuple | None) -> Tuple:
        """The new row with each unchanged TOASTed value taken from the old row, which only REPLICA IDENTITY
        FULL sends (install sets it on tables that have such columns)."""
        values = list(new)
        for i, value in enumerate(new):
            if value is UNCHANGED:
                if old is None or old[i] is UNCHANGED:
                    name = table.schema.column_names[i]
                    raise SchemaDriftError(
                        f"an update of table {table.schema.table!r} of source {self.name!r} left column {name!r} "
                        "unchanged and out of line (TOAST), and the server sent no old row to take its value from: "
                        "the table's REPLICA IDENTITY was not FULL when it was written",
                        f"run `databus install --source {self.name}` (it sets REPLICA IDENTITY FULL), then "
                        f"`databus bootstrap --source {self.name}`", source=self.name, table=table.schema.table)
                values[i] = old[i]
        return tuple(values)

    def _truncate(self, message: pg.Truncate) -> None:
        """TRUNCATE empties tables without row events: recorded as a statement, so the merge reads them again."""
        if self.skip or self.begin is None:
            return
        for oid in message.relation_oids:
            table = self._table(oid)
            if table is not None:
                statement = f"TRUNCATE {self.schema_name}.{table.schema.table}"
                self.stats.ddl.append((Scn(self.begin.final_lsn), table.schema.table, statement))

    def _table(self, oid: int) -> _Table | None:
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
        current = self.stream.catalog.schemas().get(name)
        schema = self._relation_schema(relation, current)
        table = self.by_name.get(name)
        if table is None or table.schema != schema:
            if table is not None and table.open:
                raise SchemaDriftError(
                    f"a transaction of source {self.name!r} changed table {name!r}'s columns between its row "
                    f"changes (at {lsn_text(self.begin.final_lsn if self.begin else 0)}): its window cannot hold "
                    "both shapes", f"run `databus bootstrap --source {self.name}`", source=self.name, table=name)
            if self.events and (table is not None or schema != current):
                yield self._chunk()
            if schema != current:
                self.stream.catalog.adopt({name: schema})
            table = self.by_name[name] = _Table(schema, [c.name for c in relation.columns])
        self.tables[relation.oid] = table
        before, after = self.shapes.get(name), _shape(schema)
        if before is not None and before != after and self.begin is not None:
            self.stats.ddl.append((Scn(self.begin.final_lsn), name, _describe(before, schema)))
        self.shapes[name] = after

    def _unseen_changes(self, until: Scn) -> None:
        """A table whose columns changed with no change of its rows after: no relation message tells it, but the
        catalog read before the bound does (its ALTER committed before the poll's bound, so at ``until``)."""
        for name, schema in self.live.items():
            if name not in self.by_name and self.shapes.get(name) != _shape(schema):
                self.stats.ddl.append((until, name, _describe(self.shapes[name], schema)))
                self.shapes[name] = _shape(schema)

    def _relation_schema(self, relation: pg.Relation, current: TableSchema | None) -> TableSchema:
        key = current.primary_key if current is not None else self.stream.config.table(relation.name).primary_key
        catalog, columns = self.stream.catalog, relation.columns
        with closing(self.stream.connector.connect()) as conn, conn.cursor() as cur:
            rows = catalog.described(cur, relation.name, [c.name for c in columns], [c.type_oid for c in columns],
                                     [c.type_modifier for c in columns])
        return catalog.build(relation.name, key, rows, self.stream.connector.field("tables"))


def _shape(schema: TableSchema) -> Shape:
    return [[c.name, c.source_type] for c in schema.columns]


def _state(shapes: Mapping[str, Shape]) -> dict[str, str]:
    return {SHAPES: json.dumps(shapes, separators=(",", ":"), sort_keys=True)}


def _describe(before: Shape, after: TableSchema) -> str:
    """The column change between two shapes of a table, as the statement ``snapshot.evolve`` reads."""
    old = dict((name, declared) for name, declared in before)
    new = {c.name: c for c in after.columns}
    parts = [f"DROP COLUMN {n}" for n in old if n not in new]
    for name, column in new.items():
        if name not in old:
            default = f" DEFAULT {column.default}" if column.default is not None else ""
            parts.append(f"ADD COLUMN {name} {column.source_type}{default}")
        elif old[name] != column.source_type:
            parts.append(f"ALTER COLUMN {name} TYPE {column.source_type}")
    return f"ALTER TABLE {after.table} " + ", ".join(parts or ["(relation changed)"])
