"""Reading a MySQL source's binlog: every event checked against the event table (``wire.codes``), row
events decoded by column with their table map's shape, grouped into whole transactions and batches,
DDL noted for the schema-change policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, closing
from dataclasses import replace
from typing import Any, NoReturn

import numpy as np

from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import BinlogEventError, LogGapError, SourceUnavailableError, UnsupportedTypeError
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.mysql.catalog import MysqlCatalog
from dagster_databus.sources.mysql.charsets import ServerCharsets
from dagster_databus.sources.mysql.connect import Connection, OperationalError
from dagster_databus.sources.mysql.ddl import ServerNames, table_ddl
from dagster_databus.sources.mysql.positions import MysqlPositions
from dagster_databus.sources.mysql.servers import MysqlServers
from dagster_databus.sources.mysql.types import MysqlType
from dagster_databus.sources.mysql.versions import ServerVersion
from dagster_databus.sources.mysql.wire import codes
from dagster_databus.sources.mysql.wire.codes import Disposition, event_type
from dagster_databus.sources.mysql.wire.gtid import gtid_text
from dagster_databus.sources.mysql.wire.rows import Shape, Transactions, parse_rows
from dagster_databus.sources.mysql.wire.stream import DumpStream, Event
from dagster_databus.sources.mysql.wire.tablemap import (
    BINARY_COLLATION,
    ENUM,
    SET,
    BinlogColumn,
    TableMap,
    parse_table_map,
)
from dagster_databus.sources.mysql.wire.unpack import payload_events, plain_rows, query_database, query_text
from dagster_databus.sources.mysql.wire.values import (
    column_type,
    compatible,
    cutter,
    members_decoded,
    source_type,
    undecodable,
)

# Statements a row-based binlog writes inside a transaction, which neither end it nor change rows.
_INSIDE = re.compile(r"^\s*(SAVEPOINT|ROLLBACK\s+(WORK\s+)?TO|RELEASE\s+SAVEPOINT|XA\s+(START|BEGIN|END))\b",
                     re.IGNORECASE)
# A row change logged as a statement (binlog_format=STATEMENT or MIXED in the writing session).
_DML = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(INSERT|REPLACE|UPDATE|DELETE|LOAD\s+DATA|LOAD\s+XML)\b",
                  re.IGNORECASE | re.DOTALL)
# The server dropped the connection (CR_SERVER_GONE_ERROR, CR_SERVER_LOST), and how often to resume.
_LOST = (2006, 2013)
_RECONNECTS = 3
_GTIDS = frozenset((codes.GTID, codes.ANONYMOUS_GTID, codes.GTID_TAGGED, codes.MARIADB_GTID))
# Events the table says to skip, which the reader has no use for either (MariaDB's ANNOTATE_ROWS: one a statement).
_SKIPPED = frozenset(code for code, entry in codes.EVENT_TYPES.items() if entry.disposition is Disposition.IGNORE) - {
    codes.ROTATE, codes.FORMAT_DESCRIPTION, codes.QUERY, codes.QUERY_COMPRESSED, codes.XA_PREPARE,
    codes.PARTIAL_UPDATE_ROWS}


class BinlogReader:
    """Polling: whole transactions after a checkpoint, up to the binlog end when the poll starts, decoded with
    the shapes their table maps describe. The ``stream`` part of ``MysqlSource``: its positions are the
    ``positions`` collaborator's, and one run at a time reads the binlog (``servers.reading``)."""

    def __init__(self, servers: MysqlServers, catalog: MysqlCatalog, positions: MysqlPositions) -> None:
        self.servers = servers
        self.catalog = catalog
        self.positions = positions
        self.config = servers.config
        self.name = servers.name
        self._shapes: dict[tuple[Any, ...], Shape] = {}
        self._generation = servers.generation  # of the server the shapes were decoded from
        self.names = ServerNames()  # how the server compares names: read at each poll
        self.charsets = ServerCharsets({}, {})  # the server's collation ids and character sets: read at each poll

    def epoch(self) -> str:
        return self.positions.epoch()

    def high_water_mark(self) -> Scn:
        return self.positions.high_water_mark()

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        return self.positions.start_position()

    def reading(self) -> AbstractContextManager[None]:
        return self.servers.reading()

    def release(self, through: Scn) -> None:
        """Binlogs are the server's to expire; capture keeps nothing on the source."""

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[ChangeBatch]:
        self.catalog.schemas()
        with closing(self.servers.connect()) as conn, conn.cursor() as cur:
            start_file = self.positions.check(cur, since, epoch, state or {})
            bound_file, bound_pos = self.positions.end(cur)
            version = ServerVersion.of(cur)
            mariadb = version.mariadb
            self.charsets = self.servers.charsets(cur)
            cur.execute("SELECT @@lower_case_table_names")
            row = cur.fetchone()
            self.names = ServerNames(int(row[0]) if row else 0)
        bound = self.servers.scn(bound_file, bound_pos)
        stats.source_hwm = bound
        if since >= bound:
            return
        poll = _Poll(self, start_file, since, bound, stats, state or {}, mariadb)
        try:
            yield from poll.read()
            if stats.ddl:
                # The shapes decoded last may be older than a table's DDL read after them (no row of the new
                # shape followed): the catalog, read after the poll's bound, is what the tables are now.
                self.catalog.preflight()
        except OperationalError as exc:
            self.servers.refuse_second_reader(exc)
            if exc.args and exc.args[0] == 1236:
                raise LogGapError(
                    f"the server refused to stream binlog {start_file} for source {self.name!r}: {exc.args[-1]}",
                    f"run `databus bootstrap --source {self.name}`, or set sources.{self.name}.on_purged: bootstrap",
                    source=self.name) from None
            raise SourceUnavailableError(
                f"lost the binlog connection to source {self.name!r}: {exc.args[-1] if exc.args else exc}",
                "run again: capture resumes from the last durable checkpoint", source=self.name) from None
        finally:
            poll.close()

    def shape(self, table_map: TableMap) -> Shape:
        """The table's shape as this table map describes it (cached per shape: SET members or BINARY widths
        may differ between shapes of one schema)."""
        if self._generation != self.servers.generation:  # another server: its tables are read again
            self._shapes, self._generation = {}, self.servers.generation
        cache_key = (table_map.table, table_map.columns, table_map.named)
        cached = self._shapes.get(cache_key)
        if cached is None:
            if table_map.named:
                columns = tuple(members_decoded(c, self.charsets) for c in table_map.columns)
            else:
                columns = self._named(table_map)
            schema = self._shape_schema(table_map.table, columns)
            by_name = {c.name: c for c in columns}
            self._refuse_charsets(table_map.table, [by_name[c.name] for c in schema.columns])
            cutters = tuple(cutter(by_name[c.name], c, self.config.zero_dates, self.charsets)
                            for c in schema.columns)
            key = np.array([schema.column_names.index(k) for k in schema.primary_key], np.int64)
            widths = np.array([c.width for c in columns], np.int64)
            cached = self._shapes[cache_key] = Shape(schema, widths, key, cutters)
        return cached

    def _refuse_charsets(self, table: str, columns: list[BinlogColumn]) -> None:
        """Stop before a column whose text capture cannot decode (``validate`` names it first)."""
        for col in columns:
            if undecodable(col, self.charsets):
                charset = self.charsets.charset(col.collation) or f"collation id {col.collation}"
                raise UnsupportedTypeError(
                    f"source {self.name!r}, table {table!r}: column {col.name} holds {charset} text, which capture "
                    "cannot decode", f"ALTER TABLE `{table}` CONVERT TO CHARACTER SET utf8mb4 (or MODIFY the "
                    f"column to utf8mb4), then run `databus bootstrap --source {self.name}`",
                    source=self.name, table=table)

    def _named(self, table_map: TableMap) -> tuple[BinlogColumn, ...]:
        """A table map without column names (servers before MySQL 8.0.1 / MariaDB 10.5, or
        binlog_row_metadata=MINIMAL): names, signedness, binary-ness and ENUM/SET members from the table's
        definition, when the map's column types still match it."""
        known = self.catalog.schemas()[table_map.table].columns
        if len(known) != len(table_map.columns):
            raise BinlogEventError(
                f"a table map of {table_map.table!r} has {len(table_map.columns)} columns without names, but the "
                f"table now has {len(known)}: the columns cannot be matched",
                "SET GLOBAL binlog_row_metadata = 'FULL' (MySQL 8.0.1+, MariaDB 10.5+) so the binlog names them, "
                f"then run `databus bootstrap --source {self.name}`", table=table_map.table)
        named = []
        for col, same in zip(table_map.columns, known, strict=True):
            declared = MysqlType.parse(same.source_type)
            extra: dict[str, Any] = {"name": same.name, "unsigned": declared.unsigned}
            if same.type.kind == "binary" and col.type not in (ENUM, SET):
                extra["collation"] = BINARY_COLLATION
            if col.type in (ENUM, SET):
                extra["members"] = declared.args
            named.append(replace(col, **extra))
        return tuple(named)

    def _shape_schema(self, table: str, columns: tuple[BinlogColumn, ...]) -> TableSchema:
        known = self.catalog.schemas()[table]
        by_name = {c.name: c for c in known.columns}
        out = []
        for col in columns:
            ctype = column_type(col)
            same = by_name.get(col.name)
            if same is not None and compatible(same, col, ctype):
                out.append(same)
                continue
            if ctype is None:
                raise UnsupportedTypeError(
                    f"source {self.name!r}, table {table!r}: the binlog has column {col.name} as "
                    f"{source_type(col)}, a type with no mapping to a change-log and snapshot type",
                    "change the column to a mapped type (docs/types.md), then run "
                    f"`databus bootstrap --source {self.name}`", source=self.name, table=table)
            out.append(Column(name=col.name, type=ctype, source_type=source_type(col)))
        schema = TableSchema(source=self.name, table=table, columns=tuple(out), primary_key=known.primary_key)
        return known if schema == known else schema

    def refuse_value(self, schema: TableSchema, index: int, value: object, reason: str, where: str) -> NoReturn:
        raise schema.value_error(schema.columns[index], value, reason, where)

    def note_ddl(self, database: str, query: str, position: Scn, stats: PollStats) -> None:
        """A statement that changes captured tables, recorded once for each (a swap names one twice)."""
        ddl = table_ddl(query)
        if ddl is None:
            return
        captured = self.names.index(t.name for t in self.config.tables)
        named = {captured[self.names.key(table)] for schema, table in ddl.tables
                 if self.names.same(schema or database, self.config.database) and self.names.key(table) in captured}
        stats.ddl.extend((position, table, query) for table in sorted(named))

    def statement_changes(self, database: str, query: str) -> bool:
        """Whether a query event is a row change of a captured table logged as a statement."""
        if not _DML.match(query):
            return False
        names = {t.name.lower() for t in self.config.tables}
        words = {w.lower() for w in re.findall(r"\w+", query)}
        return bool(names & words) and (database == self.config.database or self.config.database.lower() in words)


class _Poll:
    """One poll's reading of the stream: events in, whole transactions out, in batches.

    Most transactions change one row: four events. Their path does per event only what the event needs:
    positions are integers until a transaction ends, the checkpoint state is built only for a batch and
    the poll's end, and a table map's bytes find their shape in one lookup."""

    def __init__(self, source: BinlogReader, file: str, since: Scn, bound: Scn, stats: PollStats,
                 state: Mapping[str, str], mariadb: bool) -> None:
        self.source, self.bound, self.stats = source, bound, stats
        self.since_value = since.value
        self.until = since.value  # the SCN where the last transaction read ended, as an integer until the end
        self.mariadb = mariadb
        self.resume = (file, since.binlog_parts()[2])  # the last transaction boundary read
        self.at_file(file)
        self.conn: Connection | None = None
        self.created = state.get("binlog_created", "")
        self.gtid: Event | None = None  # the event that opened the transaction being read
        # Where the last transaction read ended, the event that opened it and its commit time (they find the
        # position again on a standby): the checkpoint state's parts, made the state only where it is read.
        self.end: tuple[str, str, Event | None, int] | None = None
        self.batch_end: tuple[str, str, Event | None, int] | None = None  # the same for the last committed window
        self.tables = source.names.index(t.name for t in source.config.tables)  # the server's form → the config's
        self.maps: dict[int, Shape | None] = {}
        # A table map's bytes → its shape (None: a table capture does not follow).
        self.map_shapes: dict[bytes | memoryview, Shape | None] = {}
        self.tx = Transactions(source.refuse_value)
        self.inside: str | None = None  # where the events being read are, inside a transaction payload

    def at_file(self, file: str) -> None:
        """Read on in ``file``: an event's SCN is the file's base plus the event's end position."""
        self.file = file
        self.base = self.source.servers.scn(file, 0).value

    def read(self) -> Iterator[ChangeBatch]:
        chunk_rows = self.source.config.poll.chunk_rows
        bound = self.bound.value
        tx = self.tx
        for e in self._events():
            if not self._handle(e):
                continue
            log_pos = e.log_pos
            self.resume = (self.file, log_pos)
            if tx.pending:
                if tx.reshapes() and tx.rows:
                    yield from self._batch()
                tx.commit(self.until)
                self.batch_end = self.end
                if tx.rows >= chunk_rows:
                    yield from self._batch()
            if self.base + log_pos >= bound:
                break
        tx.discard()  # a transaction the stream ended inside is read again by the next poll
        yield from self._batch()
        if self.end is not None:
            self.stats.until, self.stats.state = Scn(self.until), self._state(self.end)

    def _state(self, end: tuple[str, str, Event | None, int]) -> dict[str, str]:
        file, created, opened, commit_ts = end
        gtid = "" if opened is None else gtid_text(opened.type, opened)
        done = {"gtid": gtid, "commit_ts": str(commit_ts)} if gtid else {"commit_ts": str(commit_ts)}
        return {**self.source.servers.base_state(file, created), **done}

    def _events(self) -> Iterator[Event]:
        """Each event, ending where its ``log_pos`` says: a transaction payload's events end where it ends, so
        a resumed read never starts inside one. While they are read, ``inside`` says where they are, for
        messages (None: an event is at its position in the file).

        A dump connection the server drops (killed, timed out) is opened again at the last transaction
        boundary read, a few times; the transaction it was inside is read again whole."""
        lost: Exception | None = None
        for attempt in range(_RECONNECTS + 1):
            self.close()
            self.at_file(self.resume[0])
            try:
                stream = self.open_stream(*self.resume)
            except SourceUnavailableError:
                if lost is None:
                    raise
                raise lost from None  # the server is gone, not only the connection
            self.tx.discard()
            self.inside = None
            try:
                for event in stream:
                    if event.type == codes.TRANSACTION_PAYLOAD:
                        self.inside = f"{self.file}:{event.log_pos} (inside its transaction payload)"
                        for inner in payload_events(event, self.inside):
                            yield inner._replace(log_pos=event.log_pos)
                        self.inside = None
                    else:
                        yield event
                return
            except OperationalError as exc:
                if attempt == _RECONNECTS or not exc.args or exc.args[0] not in _LOST:
                    raise
                lost = exc

    def open_stream(self, file: str, position: int) -> Iterable[Event]:
        """The server's binlog from ``file``:``position``, on a connection of its own."""
        self.conn = self.source.servers.connect(database=False)
        return DumpStream(self.conn, self.source.config.replica_server_id(), file, position)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _batch(self) -> Iterator[ChangeBatch]:
        shapes = self.tx.shapes
        batch = self.tx.build()
        if batch is None:
            return
        # The checkpoint moves to the batch's last window, with that window's state.
        if self.batch_end is not None:
            self.stats.state = self._state(self.batch_end)
        self.source.catalog.adopt({table: shape.schema for table, shape in shapes.items()})
        self.stats.chunks += 1
        yield batch

    def _handle(self, e: Event) -> bool:
        """Take one event; whether it ended a transaction (or was a statement of its own) at its ``log_pos``.
        The events of every transaction come first, the rest go to ``_other``."""
        code = e.type
        if code == codes.TABLE_MAP:
            self._table_map(e)
            return False
        if code in codes.ROWS:
            self._rows(e)
            return False
        if code in _GTIDS:
            self.tx.discard()
            self.gtid = e
            return False
        if code in _SKIPPED or (code != codes.XID and not self._other(e)):
            return False
        log_pos = e.log_pos
        if not log_pos:
            return False
        position = self.base + log_pos
        if position <= self.since_value:
            self.tx.discard()
            return False
        self.end = (self.file, self.created, self.gtid, e.timestamp)
        self.until = position
        return True

    def _other(self, e: Event) -> bool:
        """An event other than a transaction's own: whether it ends one (or is a statement of its own)."""
        code = e.type
        if code == codes.ROTATE:
            self.at_file(bytes(e.body[8:]).decode())
            return False
        if code == codes.FORMAT_DESCRIPTION:
            self.created = str(e.timestamp)
            return False
        if code == codes.PARTIAL_UPDATE_ROWS:
            self._rows(e)
            return False
        entry = event_type(code, e.flags)
        if code in (codes.QUERY, codes.QUERY_COMPRESSED):
            return self._query(e)
        if code == codes.XA_PREPARE and (e.body[0] == 1 or not self.tx.pending):
            # XA COMMIT ... ONE PHASE commits here; a prepared XA transaction of other tables leaves nothing
            # of ours waiting on its outcome.
            return e.body[0] == 1
        if entry.disposition is Disposition.IGNORE:
            return False
        if entry.disposition is Disposition.STOP:
            self._stop(entry, self._where(e))
        return True

    def _where(self, e: Event) -> str:
        """Where an event is, for messages."""
        return self.inside or f"{self.file}:{e.log_pos}"

    def _stop(self, entry: codes.EventType, where: str) -> NoReturn:
        raise BinlogEventError(
            f"binlog event {entry} at {where} of source {self.source.name!r}: capture stops here, before anything "
            "after it is committed to the change log", entry.why.format(source=self.source.name),
            source=self.source.name, event=entry.name, position=where)

    def _table_map(self, e: Event) -> None:
        body = e.body
        table_id = int.from_bytes(body[:6], "little")
        shape_bytes = body[6:]  # (a read-only view hashes and compares as its bytes)
        try:
            self.maps[table_id] = self.map_shapes[shape_bytes]
        except KeyError:
            self.maps[table_id] = self.map_shapes[bytes(shape_bytes)] = self._map_shape(
                parse_table_map(body, self.mariadb, self._where(e)))

    def _map_shape(self, table_map: TableMap) -> Shape | None:
        """The shape of a table map's rows, None for a table capture does not follow."""
        names, table = self.source.names, self.tables.get(self.source.names.key(table_map.table))
        if table is None or not names.same(table_map.database, self.source.config.database):
            return None
        if table != table_map.table:  # the server's form of a name the config writes otherwise
            table_map = replace(table_map, table=table)
        return self.source.shape(table_map)

    def _rows(self, e: Event) -> None:
        table_id = int.from_bytes(e.body[:6], "little")
        try:
            shape = self.maps[table_id]
        except KeyError:
            raise BinlogEventError(
                f"{event_type(e.type)} at {self._where(e)} names table id {table_id}, which no table map before it "
                "defined", "the stream began inside a transaction or the binlog is damaged there: run capture again",
                source=self.source.name, position=self._where(e)) from None
        if shape is None:
            return  # a table capture does not follow
        where = self._where(e)
        log_pos = e.log_pos
        if e.type == codes.PARTIAL_UPDATE_ROWS:
            self._stop(event_type(e.type), where)
        if log_pos and self.base + log_pos <= self.since_value:
            return
        body = plain_rows(e.type, e.body, where)
        self.tx.add(shape, parse_rows(e.type, body, len(shape.widths), where, self.source.name), e.timestamp * 1000,
                    where)

    def _query(self, e: Event) -> bool:
        """A query event: whether it ends a transaction (COMMIT, a DDL statement)."""
        where = self._where(e)
        query = query_text(e.body, e.type == codes.QUERY_COMPRESSED, where).strip()
        upper = query.upper()
        if upper == "BEGIN":
            self.tx.discard()
            return False
        if upper in ("COMMIT", "ROLLBACK") or (upper.startswith("XA COMMIT") and upper.endswith("ONE PHASE")):
            # ROLLBACK is written for a transaction that changed non-transactional tables: those changes
            # happened and are in the binlog before it.
            return True
        if _INSIDE.match(query):
            return False
        if upper.startswith(("XA COMMIT", "XA ROLLBACK")):
            # The outcome of a transaction prepared earlier: had it changed captured rows, capture would
            # have stopped at its XA_PREPARE_LOG_EVENT.
            return True
        database = query_database(e.body)
        if self.source.statement_changes(database, query):
            raise BinlogEventError(
                f"binlog event {event_type(e.type)} at {where} of source {self.source.name!r} changes a captured "
                f"table as a statement ({query[:120]!r}), not as row images: capture stops here",
                "set binlog_format=ROW globally and in every session that writes captured tables (a session's "
                f"SET binlog_format overrides the server's), then run `databus bootstrap --source {self.source.name}`",
                source=self.source.name, position=where)
        if e.log_pos:
            self.source.note_ddl(database, query, Scn(self.base + e.log_pos), self.stats)
        return True  # DDL: a transaction of its own
