"""Consistent reads of a PostgreSQL source's tables: in this process (the local engine's bootstrap,
reconciliation), or cut into primary-key ranges for tasks (``read_range`` reads one), every range at one exact
position; fingerprints are computed here from such a read (``generic.reads.StreamedFingerprints``).

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
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv

from dagster_databus.core.schema import TableSchema, parse_texts, same
from dagster_databus.core.scn import Scn
from dagster_databus.errors import SourceUnavailableError
from dagster_databus.sources.base import ALL_KEYS, ALL_ROWS, KeyRange, RangeRead, RangeSpec, RowSelection, TableRead
from dagster_databus.sources.filters import Filter
from dagster_databus.sources.generic.reads import KeyedReads, KeyedTable, StreamedFingerprints, spec_of
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import Connection, PostgresConnector, ReplicationConnection, connect_spec
from dagster_databus.sources.postgres.dialect import READS, filter_run
from dagster_databus.sources.postgres.pgoutput import lsn_of
from dagster_databus.sources.postgres.slots import settled_scn
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


@dataclass(frozen=True)
class PostgresRangeSpec(RangeSpec):
    """A PostgreSQL range's task connects with ``connection`` (``PostgresConnector.spec``) and reads the table of
    ``schema`` in the exported ``snapshot``, which ``lease`` keeps alive on the driver."""

    connection: Mapping[str, Any] = field(repr=False)  # holds the password
    schema: str
    snapshot: str
    lease: SnapshotLease = field(repr=False, compare=False)


class PostgresReads(StreamedFingerprints):
    """Bootstrap reads of the source's tables, in this process or cut into key ranges for tasks."""

    def __init__(self, connector: PostgresConnector, catalog: PostgresCatalog) -> None:
        self.connector = connector
        self.catalog = catalog
        self.config = connector.config
        self.name = connector.name

    def read_table(self, table: str, batch_rows: int | None = None) -> TableRead:
        """A keyset-paginated read of ``table`` on one connection, at the exported snapshot's LSN."""
        batch_rows = batch_rows or self.config.bootstrap_chunk_rows
        schema = self.catalog.preflight()[table]  # the live shape: the read below sees it
        exported = exported_snapshot(self.connector.spec(), self.config.snapshot_wait_s)
        try:
            conn = self.connector.connect()
        except BaseException:
            exported.close()
            raise
        scn = self._settled(conn, exported.scn)
        cur = begin_at(conn, exported.name)

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                yield from copied(_keyed(cur, self.config.schema_, schema, None), schema, ALL_KEYS, batch_rows,
                                  f"bootstrap of {table}")
            finally:
                conn.close()
                exported.close()

        return TableRead(scn=scn, schema=schema, batches=batches())

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS,
               first: int | None = None) -> RangeRead:
        """Key ranges that tasks read, all in one exported snapshot. The snapshot (and its temporary slot) lives
        as long as the returned read or a copy of it (``SnapshotLease``)."""
        schema = self.catalog.preflight()[table]
        chosen = postgres_filter(table, schema.column_names, rows.where)
        exported = exported_snapshot(self.connector.spec(), self.config.snapshot_wait_s)
        try:
            with closing(self.connector.connect()) as conn:
                scn = self._settled(conn, exported.scn)
                cur = begin_at(conn, exported.name)
                ranges = _keyed(cur, self.config.schema_, schema, chosen).ranges(rows_per_range, rows.keys, first)
        except BaseException:
            exported.close()
            raise
        spec = PostgresRangeSpec(connection=self.connector.spec(), schema=self.config.schema_,
                                 snapshot=exported.name, page_rows=rows_per_range,  # ``copied`` bounds bytes
                                 lease=SnapshotLease(exported))
        return RangeRead("postgres", self.name, schema, spec, ranges, scn=scn, where=rows.where)

    def _settled(self, conn: Connection, consistent: Scn) -> Scn:
        return settled_scn(conn, self.config.slot_name, self.config.publication_name, consistent)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.catalog.preflight()[table]
        chosen = postgres_filter(table, schema.column_names, rows.where)
        with closing(self.connector.connect()) as conn, conn.cursor() as cur:
            _keyed(cur, self.config.schema_, schema, chosen).check(rows)


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


def postgres_filter(table: str, columns: Sequence[str], where: str | None) -> Filter | None:
    """A selection's filter checked and rendered for PostgreSQL, naming ``columns`` of ``table``."""
    return READS.filter(table, READS.quoted(columns), where)


def _keyed(cur: Any, schema_name: str, schema: TableSchema, chosen: Filter | None) -> KeyedReads:
    """The key-range queries of ``schema``'s table in ``schema_name`` on ``cur``."""
    table = f"{READS.quote(schema_name)}.{READS.quote(schema.table)}"
    return KeyedReads(READS, cur, KeyedTable(schema.table, table, tuple(map(READS.quote, schema.primary_key)), chosen))


# The line each page's CSV starts with (and the reader skips): no page's own bytes are at the input's start.
_LEAD = b"-\n"

# A page holds at most the rows its caller asks for, and about PAGE_BYTES of CSV text by the width of the rows of
# the page before (the first reads FIRST_PAGE_ROWS to learn it): a page's memory stays bounded whatever the rows'
# width, and a range of narrow rows is read in two queries, not one per 10,000 rows (each pays the server's
# planning and a descent of the key index, and this side a parse's set-up: a fifth of a narrow range's time).
PAGE_BYTES = 16 << 20
FIRST_PAGE_ROWS = 100


def copied(keyed: KeyedReads, schema: TableSchema, keys: KeyRange, rows: int, what: str
           ) -> Iterator[pa.RecordBatch]:
    """The rows of ``keys`` a page of at most ``rows`` rows (and about ``PAGE_BYTES``) at a time, each page one
    ``COPY (SELECT ...) TO STDOUT`` in CSV read by ``pyarrow.csv`` as text columns (the output functions' text, as
    a SELECT gives it) and converted by column."""
    cur, chosen = keyed.cursor, keyed.table.chosen
    names = schema.column_names
    columns = ", ".join(map(READS.quote, names))
    key_index = [names.index(k) for k in schema.primary_key]
    # pyarrow skips a byte-order mark at the start of its input, which would take a U+FEFF off the first value
    # of every page: each page starts after a line of our own that the reader skips, so every byte is read.
    read = pacsv.ReadOptions(column_names=names, block_size=64 << 20, skip_rows=1)
    parse = pacsv.ParseOptions(newlines_in_values=True)  # a quoted text may hold line breaks
    types = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True,
                                 quoted_strings_can_be_null=False, null_values=[""])
    steps = [(c, text_converter(c)) for c in schema.columns]
    arrow = schema.arrow(with_meta=False)
    after, page = keys.after, min(rows, FIRST_PAGE_ROWS)
    while True:
        query, params = keyed.select(columns, KeyRange(after, keys.through), READS.first_rows, page)
        select = cur.mogrify(query, params)
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
        schema.refuse_null_keys([arrays[i] for i in key_index], what)
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow)
        if table.num_rows < page:
            return
        after = tuple(table.column(i)[-1].as_py() for i in key_index)
        page = max(1, min(rows, PAGE_BYTES * table.num_rows // buffer.getbuffer().nbytes))


def read_range(read: RangeRead, index: int) -> TableRead:
    """Range ``index`` of ``read``, in the snapshot the read exported (at ``read.scn``), on a connection of its
    own: where a Spark task runs."""
    spec, schema = spec_of(read, PostgresRangeSpec), read.schema
    chosen = postgres_filter(schema.table, schema.column_names, read.where)  # checked again where it runs
    conn = connect_spec(dict(spec.connection))
    try:
        cur = begin_at(conn, spec.snapshot)
    except BaseException:
        conn.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from copied(_keyed(cur, spec.schema, schema, chosen), schema, read.ranges[index], spec.page_rows,
                              f"bootstrap of {schema.table}")
            conn.rollback()
        finally:
            conn.close()

    assert read.scn is not None
    return TableRead(scn=read.scn, schema=schema, batches=batches())
