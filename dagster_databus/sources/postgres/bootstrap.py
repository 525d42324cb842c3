"""Reading a PostgreSQL table by primary-key ranges, every range at one exact position.

A read first creates a temporary logical slot with an exported snapshot on a replication connection
(``exported_snapshot``): the server gives the snapshot's name and the slot's consistent point, the LSN at which
every transaction committed before it is in the snapshot and every later one is in the stream. Each range
(a Spark task, or this process) imports that snapshot (``SET TRANSACTION SNAPSHOT``) in a REPEATABLE READ
transaction of its own, so all ranges read the same moment and the table's SCN is the consistent point: the
merge replays from the change log exactly what committed after it. The exporting connection stays open while
the ranges are read (the snapshot lives as long as it does); closing it drops the temporary slot.

Every value is fetched as the text the server's output function prints, the very text pgoutput sends, and
converted by the same converters as the change stream's values (``types``), so a value is the same whichever
road brought it. A page is one ``COPY (SELECT ...) TO STDOUT`` in CSV, parsed by ``pyarrow.csv`` into text
columns and converted a column at a time (``copied``): no Python object per value. (A cast to text is not the
same: ``boolean::text`` is ``true`` where the output function prints ``t``, and ``char(n)::text`` drops the
padding.) Keys page as text too (queries fetch text: ``as_text``): PostgreSQL reads a quoted text back through
the column type's input function, exactly.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg2 import sql

from dagster_databus.core.schema import TableSchema, parse_texts, same
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.sources.base import ALL_ROWS, KeyRange, RangeRead, RowSelection, TableSnapshot
from dagster_databus.sources.filters import Filter, filter_for, select_clause
from dagster_databus.sources.keys import split_keys
from dagster_databus.sources.postgres.connect import Connection, ReplicationConnection, connect_spec
from dagster_databus.sources.postgres.dialect import FILTERS
from dagster_databus.sources.postgres.pgoutput import lsn_of
from dagster_databus.sources.postgres.slotwait import create_waiting
from dagster_databus.sources.postgres.types import text_converter


@dataclass
class ExportedSnapshot:
    """A snapshot exported with a temporary slot: its name, the LSN it holds every commit before, and the
    replication connection that keeps both alive (``close`` ends them)."""

    name: str
    scn: Scn
    connection: ReplicationConnection

    def close(self) -> None:
        self.connection.close()


class SnapshotLease:
    """Keeps an exported snapshot alive while anything refers to it, and ends it when nothing does: it travels in
    a ``RangeRead``'s spec, which every copy of the read shares (an engine may replace its ranges), and is
    pickled to Spark tasks as an empty lease (they need only the snapshot's name)."""

    def __init__(self, exported: ExportedSnapshot | None = None) -> None:
        self.exported = exported

    def __reduce__(self) -> tuple[type[SnapshotLease], tuple[()]]:
        return SnapshotLease, ()

    def __del__(self) -> None:
        if self.exported is not None:
            self.exported.close()


def exported_snapshot(spec: Mapping[str, Any], wait_s: float) -> ExportedSnapshot:
    """A new exported snapshot of the source ``spec`` connects to (``PostgresConnector.spec``). Creating the
    slot waits for the transactions running on the server to end (it needs a moment no transaction spans): at
    most ``wait_s`` seconds, saying what it waits for meanwhile (``slotwait``)."""
    conn = connect_spec(dict(spec), replication=True)
    slot = f"databus_read_{uuid.uuid4().hex[:16]}"
    try:
        # The pre-15 spelling (EXPORT_SNAPSHOT), which 10 and later all accept.
        row = create_waiting(conn, f"CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT",
                             spec, wait_s)
    except psycopg2.Error as exc:
        conn.close()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceUnavailableError(
            f"source {spec['source']!r} could not create a temporary slot to read a consistent snapshot: {first}",
            "free a replication slot and a walsender (max_replication_slots, max_wal_senders) for the read, or "
            "run again", source=spec["source"]) from None
    return ExportedSnapshot(name=row[2], scn=Scn(lsn_of(row[1])), connection=conn)


# Every type's value as the text the server sent (psycopg2 casts by oid; this one takes them all).
_TEXT = psycopg2.extensions.new_type(tuple(psycopg2.extensions.string_types), "DATABUS_TEXT",
                                     lambda value, _cursor: value)


def as_text(cur: Any) -> Any:
    """``cur`` with every column fetched as the server's text (NULL as None)."""
    psycopg2.extensions.register_type(_TEXT, cur)
    return cur


def begin_at(conn: Connection, snapshot: str) -> Any:
    """A cursor of a REPEATABLE READ, read-only transaction on ``conn`` that sees ``snapshot``, fetching text."""
    conn.autocommit = False
    cur = as_text(conn.cursor())
    cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
    return cur


@contextmanager
def filter_run(table: str, chosen: Filter | None) -> Iterator[None]:
    """A data error while a refresh filter is in the query as the filter's: a value it computes from a row fails
    (``id / 0``, ``to_number(v, '999')`` of a text that is no number), which the check on no rows cannot see."""
    try:
        yield
    except psycopg2.DataError as exc:
        if chosen is None:
            raise
        message = (exc.pgerror or str(exc)).strip().splitlines()[0]
        raise ConfigError("snapshot.where", f"the filter {chosen.text!r} failed on a row of {table!r} as PostgreSQL "
                          f"ran it: {message}", "write a filter that holds for every row of the table (guard "
                          "the failing expression, e.g. NULLIF for a divisor, or compare the text instead of "
                          "converting it), then run the snapshot again") from None


def qualified(schema_name: str, table: str) -> sql.Composed:
    return sql.SQL(".").join([sql.Identifier(schema_name), sql.Identifier(table)])


def postgres_filter(table: str, columns: Sequence[str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for PostgreSQL, naming ``columns`` of ``table``."""
    return filter_for(where, FILTERS, table, {c: '"' + c.replace('"', '""') + '"' for c in columns})


class TableQueries:
    """The queries of one table's reads: its rows as text in key order, a page at a time, and its keys."""

    def __init__(self, schema_name: str, schema: TableSchema) -> None:
        self.schema = schema
        self.table = qualified(schema_name, schema.table)
        self.columns = sql.SQL(", ").join(map(sql.Identifier, schema.column_names))
        self.key = sql.SQL(", ").join(map(sql.Identifier, schema.primary_key))
        self.marks = ", ".join(["%s"] * len(schema.primary_key))
        self.key_index = [schema.column_names.index(k) for k in schema.primary_key]

    def clause(self, cur: Any, keys: KeyRange, chosen: Filter | None) -> tuple[str, list[Any]]:
        return select_clause(self.key.as_string(cur), self.marks, keys, chosen)

    def ranges(self, cur: Any, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               chosen: Filter | None = None, first: int | None = None) -> tuple[KeyRange, ...]:
        """Ranges of about ``rows_per_range`` of the selected rows: only their boundary keys leave the server."""

        def key_at(after: tuple[Any, ...] | None, n: int) -> tuple[Any, ...] | None:
            where, params = self.clause(cur, KeyRange(after, rows.keys.through), chosen)
            with filter_run(self.schema.table, chosen):
                cur.execute(_query("SELECT ", self.key, " FROM ", self.table, f" {where}ORDER BY ", self.key,
                                   " LIMIT 1 OFFSET %s"), (*params, n))
            found = cur.fetchone()
            return tuple(found) if found is not None else None

        return split_keys(key_at, rows_per_range, rows.keys, first)

    def check(self, cur: Any, rows: RowSelection, chosen: Filter | None) -> None:
        """Run the selection's query on no rows: the server names what its own check finds."""
        where, params = self.clause(cur, rows.keys, chosen)
        try:
            cur.execute(_query("SELECT 1 FROM ", self.table, f" {where}LIMIT 0"), params)
            cur.fetchall()
        except psycopg2.Error as exc:
            raise ConfigError("snapshot.where", f"PostgreSQL cannot select {rows.describe()} of "
                              f"{self.schema.table!r}: {str(exc).strip().splitlines()[0]}",
                              "write the condition in PostgreSQL's SQL, naming the table's columns") from None


def _query(*parts: str | sql.Composable) -> sql.Composed:
    """Text and quoted parts joined as they are: a filter's rendered text is never run through ``format``."""
    return sql.Composed([sql.SQL(p) if isinstance(p, str) else p for p in parts])


# The line each page's CSV starts with (and the reader skips): no page's own bytes are at the input's start.
_LEAD = b"-\n"


def copied(cur: Any, queries: TableQueries, keys: KeyRange, chosen: Filter | None, rows: int,
           what: str) -> Iterator[pa.RecordBatch]:
    """The rows of ``keys`` a page at a time, each page one ``COPY (SELECT ...) TO STDOUT`` in CSV read by
    ``pyarrow.csv`` as text columns (the output functions' text, as a SELECT gives it) and converted by column."""
    schema = queries.schema
    names = schema.column_names
    # pyarrow skips a byte-order mark at the start of its input, which would take a U+FEFF off the first value
    # of every page: each page starts after a line of our own that the reader skips, so every byte is read.
    read = pacsv.ReadOptions(column_names=names, block_size=64 << 20, skip_rows=1)
    parse = pacsv.ParseOptions(newlines_in_values=True)  # a quoted text may hold line breaks
    types = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True,
                                 quoted_strings_can_be_null=False, null_values=[""])
    steps = [(c, text_converter(c)) for c in schema.columns]
    arrow = schema.arrow(with_meta=False)
    after = keys.after
    while True:
        where, params = queries.clause(cur, KeyRange(after, keys.through), chosen)
        select = cur.mogrify(_query("SELECT ", queries.columns, " FROM ", queries.table, f" {where}ORDER BY ",
                                    queries.key, " LIMIT %s"), (*params, rows))
        buffer = io.BytesIO(_LEAD)
        buffer.seek(len(_LEAD))
        with filter_run(schema.table, chosen):
            cur.copy_expert(b"COPY (" + select + b") TO STDOUT WITH (FORMAT csv)", buffer)
        if buffer.tell() == len(_LEAD):
            return
        buffer.seek(0)
        table = pacsv.read_csv(buffer, read_options=read, parse_options=parse, convert_options=types)
        arrays = []
        for i, (column, to_value) in enumerate(steps):
            texts = table.column(i).combine_chunks()
            if column.type.kind == "string" and to_value is same:
                arrays.append(texts)
                continue
            parsed = parse_texts(to_value, texts)
            arrays.append(parsed if parsed is not None else
                          schema.convert_column(column, to_value, texts.to_pylist(), lambda _: what))
        schema.refuse_null_keys([arrays[i] for i in queries.key_index], what)
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow)
        if table.num_rows < rows:
            return
        after = tuple(table.column(i)[-1].as_py() for i in queries.key_index)


def read_range(read: RangeRead, index: int) -> TableSnapshot:
    """Range ``index`` of ``read``, in the snapshot the read exported (at ``read.scn``), on a connection of its
    own: where a Spark task runs."""
    spec, schema = read.spec, read.schema
    queries = TableQueries(spec["schema"], schema)
    chosen = postgres_filter(schema.table, schema.column_names, read.where)  # checked again where it runs
    conn = connect_spec(dict(spec["connection"]))
    try:
        cur = begin_at(conn, spec["snapshot"])
    except BaseException:
        conn.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from copied(cur, queries, read.ranges[index], chosen, int(spec["page_rows"]),
                              f"bootstrap of {schema.table}")
            conn.rollback()
        finally:
            conn.close()

    assert read.scn is not None
    return TableSnapshot(scn=read.scn, schema=schema, batches=batches())
