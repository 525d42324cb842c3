"""Reading a MySQL source's binlog: row events decoded with the table map's shape, grouped into whole
transactions and chunks, DDL noted for the schema-change policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import closing
from typing import Any

import pymysql

from dagster_databus.core.batch import ChangeBatch, ChangeBatchBuilder
from dagster_databus.core.events import Op
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import LogGapError, SourceUnavailableError, UnsupportedTypeError
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.mysql.connect import Connection
from dagster_databus.sources.mysql.types import (
    EMPTY_SET_SOURCE,
    ZERO_DATE,
    ZERO_DATE_SOURCES,
    binlog_column_type,
    binlog_source_type,
    binlog_value,
    compatible,
)
from dagster_databus.sources.mysql.verify import MysqlVerify

_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|TRUNCATE(?:\s+TABLE)?|DROP\s+TABLE(?:\s+IF\s+EXISTS)?"
    r"|RENAME\s+TABLE|CREATE\s+(?:OR\s+REPLACE\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?)\s+([`\w.]+)",
    re.IGNORECASE | re.DOTALL,
)


# A row change read from the binlog, converted at its commit: (table, op, values, shape, commit ms, converter).
Pending = tuple[str, Op, dict[str, Any], TableSchema, int, Any]


def _with_none_sources(values: dict[str, Any], none_sources: Mapping[str, str] | None) -> dict[str, Any]:
    """Row values with the NULLs that are not NULL in the source told apart: an empty SET and a zero date."""
    if not none_sources:
        return values
    out = dict(values)
    for name, reason in none_sources.items():
        if reason == EMPTY_SET_SOURCE:
            out[name] = ""
        elif reason in ZERO_DATE_SOURCES:
            out[name] = ZERO_DATE
    return out


class MysqlBinlog(MysqlVerify):
    """Polling: whole transactions after a checkpoint, up to the binlog end when the poll starts."""

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[ChangeBatch]:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            FormatDescriptionEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        self.schemas()
        with closing(self.connect()) as conn, conn.cursor() as cur:
            start_file = self._check_position(cur, since, epoch, state or {})
            bound_file, bound_pos = self._master_status(cur)
        bound = self.scn(bound_file, bound_pos)
        stats.source_hwm = bound
        if since >= bound:
            return
        tables = {t.name for t in self.config.tables}
        stream = BinLogStreamReader(
            connection_settings=self.connection_settings(), pymysql_wrapper=Connection,
            server_id=self.config.replica_server_id(),
            resume_stream=True, blocking=False, log_file=start_file, log_pos=since.binlog_parts()[2],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent, RotateEvent,
                         FormatDescriptionEvent, MariadbGtidEvent],
        )
        chunk = ChangeBatchBuilder()
        pending: list[Pending] = []
        created = (state or {}).get("binlog_created", "")
        # The last transaction read: its GTID and commit time find the position again on a standby.
        done = {k: v for k, v in (state or {}).items() if k in ("gtid", "commit_ts")}
        gtid = ""
        current_file = start_file
        try:
            for event in stream:
                if isinstance(event, RotateEvent):
                    current_file = event.next_binlog
                    continue
                if isinstance(event, FormatDescriptionEvent):
                    created = str(event.timestamp)
                    continue
                position = self.scn(current_file, event.packet.log_pos)
                if isinstance(event, MariadbGtidEvent):
                    pending = []
                    gtid = event.gtid
                    continue
                if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    if event.schema == self.config.database and event.table in tables:
                        pending += self._row_changes(event, event.timestamp * 1000)
                    continue
                commit = isinstance(event, XidEvent)
                if isinstance(event, QueryEvent):
                    query = event.query.strip() if isinstance(event.query, str) else event.query.decode()
                    if query.upper() == "BEGIN":
                        pending = []
                        continue
                    commit = query.upper() == "COMMIT"
                    if not commit:
                        self._note_ddl(event, query, position, stats)
                if position <= since:
                    pending = []
                    continue
                if commit or isinstance(event, QueryEvent):  # a COMMIT, or DDL: its own transaction
                    done = {"gtid": gtid, "commit_ts": str(event.timestamp)} if gtid else {
                        "commit_ts": str(event.timestamp)}
                stats.until = position
                stats.state = {**self.base_state(current_file, created), **done}
                if commit and pending:
                    if self._changes_shape(pending) and chunk.events:
                        # One shape per table in a batch: the batch before the change is written first.
                        stats.chunks += 1
                        yield chunk.build()
                        chunk = ChangeBatchBuilder()
                    self._add_window(chunk, pending, position)
                    pending = []
                    if chunk.events >= self.config.poll.chunk_rows:
                        stats.chunks += 1
                        yield chunk.build()
                        chunk = ChangeBatchBuilder()
                if position >= bound:
                    break
        except pymysql.err.OperationalError as exc:
            self._refuse_second_reader(exc)
            if exc.args and exc.args[0] == 1236:
                raise LogGapError(
                    f"the server refused to stream binlog {current_file} for source {self.name!r}: {exc.args[-1]}",
                    f"run `databus bootstrap --source {self.name}`, or set sources.{self.name}.on_purged: bootstrap",
                    source=self.name) from None
            raise SourceUnavailableError(
                f"lost the binlog connection to source {self.name!r}: {exc.args[-1] if exc.args else exc}",
                "run again: capture resumes from the last durable checkpoint", source=self.name) from None
        finally:
            stream.close()
        if chunk.events:
            stats.chunks += 1
            yield chunk.build()

    def _row_changes(self, event: Any, ts_ms: int) -> list[Pending]:
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        schema, convert = self._event_schema(event)
        out = []
        for row in event.rows:
            if isinstance(event, UpdateRowsEvent):
                before = _with_none_sources(row["before_values"], row.get("before_none_sources"))
                after = _with_none_sources(row["after_values"], row.get("after_none_sources"))
                if any(before[k] != after[k] for k in schema.primary_key):
                    out.append((event.table, Op.DELETE, before, schema, ts_ms, convert))
                    out.append((event.table, Op.INSERT, after, schema, ts_ms, convert))
                else:
                    out.append((event.table, Op.UPDATE, after, schema, ts_ms, convert))
            elif isinstance(event, DeleteRowsEvent):
                out.append((event.table, Op.DELETE, _with_none_sources(row["values"], row.get("none_sources")),
                            schema, ts_ms, convert))
            else:
                out.append((event.table, Op.INSERT, _with_none_sources(row["values"], row.get("none_sources")),
                            schema, ts_ms, convert))
        return out

    def _event_schema(self, event: Any) -> tuple[TableSchema, Any]:
        """The table's shape as the binlog's table map describes it at this event, and the converter of its
        rows (cached per shape: SET members or BINARY widths may differ between shapes of one schema)."""
        shape = (event.table, tuple(tuple((k, repr(v)) for k, v in sorted(c.data.items())) for c in event.columns))
        cached = self._shapes.get(shape)
        if cached is None:
            schema = self._shape_schema(event)
            by_name = {c.name: c for c in event.columns}
            cached = self._shapes[shape] = (schema, schema.column_converter(
                lambda column: binlog_value(by_name[column.name], column, self.config.zero_dates)))
        return cached

    def _shape_schema(self, event: Any) -> TableSchema:
        known = self.schemas()[event.table]
        by_name = {c.name: c for c in known.columns}
        columns = []
        for col in event.columns:
            ctype = binlog_column_type(col)
            same = by_name.get(col.name)
            if same is not None and compatible(same, col, ctype):
                columns.append(same)
                continue
            if ctype is None:
                raise UnsupportedTypeError(
                    f"source {self.name!r}, table {event.table!r}: the binlog has column {col.name} as "
                    f"{binlog_source_type(col)}, a type with no mapping to a change-log and snapshot type",
                    "change the column to a mapped type (docs/types.md), then run "
                    f"`databus bootstrap --source {self.name}`", source=self.name, table=event.table)
            columns.append(Column(name=col.name, type=ctype, source_type=binlog_source_type(col)))
        schema = TableSchema(source=self.name, table=event.table, columns=tuple(columns),
                             primary_key=known.primary_key)
        return known if schema == known else schema

    def _changes_shape(self, pending: list[Pending]) -> bool:
        current = self.schemas()
        return any(schema is not current[table] and schema != current[table] for table, _, _, schema, _, _ in pending)

    def _add_window(self, chunk: ChangeBatchBuilder, pending: list[Pending], position: Scn) -> None:
        """The transaction's row changes into ``chunk``; the shapes they were decoded with become the
        current ones (for ``schemas()``)."""
        for seq, (_, op, values, schema, ts_ms, convert) in enumerate(pending):
            chunk.add(schema, convert, op.value, values, position, seq, ts_ms)
        assert self._schemas is not None
        self._schemas.update({table: schema for table, _, _, schema, _, _ in pending})

    def _note_ddl(self, event: Any, query: str, position: Scn, stats: PollStats) -> None:
        match = _DDL.match(query)
        if not match:
            return
        target = match.group(2).replace("`", "")
        schema, _, table = target.rpartition(".")
        schema = schema or (event.schema.decode() if isinstance(event.schema, bytes) else event.schema)
        if schema == self.config.database and table in {t.name for t in self.config.tables}:
            stats.ddl.append((position, table, query))
