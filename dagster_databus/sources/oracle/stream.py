"""Polling an Oracle source: the database SCN at a poll's start is its bound; chunk ends are found over
``sy$txlog`` (whole transactions), and each table's ``sy$<table>`` view and delete-shadow table are read with
Databus for Oracle's query shape. What the change log holds is pruned from the shadow tables and the txlog,
and ``sync_alert`` tells a waiting sensor that changes arrived.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, closing, nullcontext
from typing import TYPE_CHECKING, Any

from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.generic.epoch import require_same_epoch
from dagster_databus.sources.oracle.catalog import OracleCatalog
from dagster_databus.sources.oracle.setup import epoch_of, settings
from dagster_databus.sources.oracle.sql import poll_query
from dagster_databus.sources.oracle.types import oracle_value

if TYPE_CHECKING:
    import oracledb


def current_scn(cur: oracledb.Cursor) -> Scn:
    """The database's SCN now."""
    cur.execute("SELECT DBMS_FLASHBACK.GET_SYSTEM_CHANGE_NUMBER FROM dual")
    row = cur.fetchone()
    assert row is not None  # a query of dual: one row
    return Scn(int(row[0]))


class OraclePoller:
    """The source's epoch and positions, its changes after a checkpoint, and their release."""

    def __init__(self, catalog: OracleCatalog) -> None:
        self.catalog = catalog
        self.config = catalog.config
        self.name = catalog.name

    def epoch(self) -> str:
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            return epoch_of(cur, settings(cur))

    def high_water_mark(self) -> Scn:
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            return current_scn(cur)

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        return Scn.BEGINNING, {}  # every change since install is in sy$txlog

    def reading(self) -> AbstractContextManager[None]:
        """LogMiner and shadow-table reads serve any number of sessions; the change log's commit fences
        the loser."""
        return nullcontext()

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[ChangeBatch]:
        schemas = self.catalog.schemas()
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            current = epoch_of(cur, settings(cur))
            require_same_epoch(
                epoch, current, since, f"Oracle source {self.name!r} is now epoch {current}, the change log's "
                f"checkpoint is {epoch}: the capture objects were re-installed or the database replaced",
                f"run `databus bootstrap --source {self.name}`", self.name)
            cur.execute("SELECT bitnum FROM sy$sources WHERE name = :n", n=self.name)
            registered = cur.fetchone()
            assert registered is not None  # require_installed checked the registration
            mask = 2 ** int(registered[0])
            until = current_scn(cur)
            stats.source_hwm = until
            chunk_end_sql = sqlfiles.load("oracle", "poll/chunk_end.sql")
            while True:
                cur.execute(chunk_end_sql, sinceScn=since.value, sourceMask=mask, untilScn=until.value,
                            rowsPerChunk=self.config.poll.chunk_rows)
                chunk = cur.fetchone()
                assert chunk is not None  # an aggregate: one row
                end, transactions = chunk
                if not transactions:
                    break
                end_scn = Scn(int(end))
                windows = self._read_chunk(cur, schemas, since, end_scn)
                since = end_scn
                stats.until = end_scn
                stats.chunks += 1
                if windows:  # by column, as the change log takes them (``Changes``)
                    yield ChangeBatch.from_windows(windows, schemas)

    def _read_chunk(self, cur: oracledb.Cursor, schemas: Mapping[str, TableSchema], since: Scn,
                    end: Scn) -> list[Window]:
        by_scn: dict[int, list[tuple[int, str, Op, dict[str, Any], int]]] = {}
        for table, schema in schemas.items():
            objects = self.catalog.objects(table).values
            reverse = {v: k for k, v in self.catalog.columns(table).items()}
            queries = ((sqlfiles.render("oracle", "poll/deletes.sql", shadow=objects["shadow"]), Op.DELETE,
                        schema.primary_key),
                       (poll_query("simple", objects["view"], bounded=True), Op.UPDATE, schema.column_names))
            for order, (sql, op, names) in enumerate(queries):
                cur.execute(f"SELECT q.scn, q.event_timestamp, {self.catalog.select_list(table, names, 'q')} "
                            f"FROM ({sql}) q", sinceScn=since.value, untilScn=end.value)
                assert cur.description is not None  # a query describes its columns
                labels = [reverse.get(d[0], d[0]) for d in cur.description]
                for row in cur.fetchall():
                    values = dict(zip(labels, row, strict=True))
                    scn = int(values.pop("SCN"))
                    ts = values.pop("EVENT_TIMESTAMP")
                    by_scn.setdefault(scn, []).append(
                        (order, table, op, values, int(ts.timestamp() * 1000) if ts else 0))
        converters = {table: schema.converter(oracle_value) for table, schema in schemas.items()}
        windows = []
        for scn in sorted(by_scn):
            # Deletes first: a view row is the final state of its transaction, newer than any delete in it.
            changes = sorted(by_scn[scn], key=lambda c: c[0])
            events = []
            for seq, (_, table, op, values, ts_ms) in enumerate(changes):
                schema = schemas[table]
                image = converters[table](values, f"SCN {scn}")
                events.append(ChangeEvent(scn=Scn(scn), seq=seq, table=table, op=op,
                                          key=tuple(image[k] for k in schema.primary_key), row=image,
                                          commit_ts_ms=ts_ms))
            windows.append(Window(scn=Scn(scn), events=tuple(events)))
        return windows

    def release(self, through: Scn) -> None:
        if through.is_beginning:
            return
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            for table in self.catalog.schemas():
                shadow = self.catalog.objects(table).values["shadow"]
                cur.execute(sqlfiles.render("oracle", "poll/prune_shadow.sql", shadow=shadow), throughScn=through.value)
            cur.execute(sqlfiles.load("oracle", "poll/prune.sql"), throughScn=through.value)
            conn.commit()

    def wait_for_changes(self, max_wait_s: int) -> str | None:
        """Block up to ``max_wait_s`` in sync_alert.waitForEvent; the source name if changes were signalled."""
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            registered = cur.callfunc("sync_alert.registerSourceWithVersion", int, [self.name, 1])
            if registered is None:
                raise CaptureNotInstalledError(f"source {self.name!r} is not registered in sy$sources",
                                               f"materialize the '{self.name}/capture' asset", source=self.name)
            try:
                signalled = cur.callfunc("sync_alert.waitForEvent", str, [max_wait_s])
                return None if signalled is None else str(signalled)
            finally:
                cur.callproc("sync_alert.unregisterAllSources")
