"""The change stream of a PostgreSQL source: its slot read with ``pgoutput`` over the replication protocol,
decoded into columnar change batches of whole transactions (``reader``: one poll's read), with WAL LSNs as SCNs.

A transaction's events take its commit's end LSN as their SCN: what the slot is confirmed at, and what a
restarted stream resumes after. A poll reads up to the WAL position the server had written when it started; the
server's keepalives say how far it has decoded, so WAL that holds no change of the published tables still moves
the checkpoint, and the slot with it. The slot is confirmed only in ``release``, after the log has committed. On
PostgreSQL 14+ the stream uses protocol 2, so the server streams a large transaction as it decodes it instead of
spilling it to its own disk until the commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, closing, nullcontext
from typing import Any

import psycopg2

from dagster_databus.core.batch import Changes
from dagster_databus.core.scn import Scn
from dagster_databus.errors import LogGapError, SourceUnavailableError
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import PostgresConnector, ReplicationConnection
from dagster_databus.sources.postgres.drift import PostgresDrift, drift_state
from dagster_databus.sources.postgres.pgoutput import lsn_of
from dagster_databus.sources.postgres.reader import PollReader
from dagster_databus.sources.postgres.setup import read_epoch
from dagster_databus.sources.postgres.shapes import shape_of, shapes_state
from dagster_databus.sources.postgres.slots import (
    is_publication_lost,
    let_go,
    move_on,
    publication_lost,
    start_streaming,
)

# Protocol 2 (transactions streamed before their commit) is PostgreSQL 14's.
STREAMING_SINCE = 140_000


class PostgresStream:
    """Polling: whole transactions after a checkpoint, up to the WAL written when the poll starts. The ``stream``
    part of ``PostgresSource``."""

    def __init__(self, connector: PostgresConnector, catalog: PostgresCatalog) -> None:
        self.connector, self.catalog, self.config, self.name = connector, catalog, connector.config, connector.name
        self.drift = PostgresDrift(connector, connector.config)  # what capture checks was not replaced
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
        now (the snapshots are read after it; WAL an earlier log could not capture is passed over), else the current
        WAL position; with the tables' columns now. A slot whose WAL the server removed cannot be moved, and one
        behind a publication created again since (``publication_newer.sql``) goes on failing to decode after it is
        moved: such a slot is made again."""
        state = shapes_state({name: shape_of(schema) for name, schema in self.catalog.preflight().items()}) | \
            drift_state(self.drift.publication_oid(), self.drift.table_identities())
        slot = self.slot()
        if slot is None:
            return self.high_water_mark(), state
        with closing(self.connector.connect()) as conn:
            return move_on(conn, self.config.slot_name, self.config.publication_name, slot["wal_status"] == "lost"), \
                state

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()  # the server refuses a second reader of an active slot (``_start`` says so)

    def slot(self) -> dict[str, Any] | None:
        """The capture slot as ``sql/postgres/slot.sql`` describes it, or None when it does not exist."""
        return self.drift.slot()

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[Changes]:
        for gap in self.drift.gaps(since, state or {}, publication := self.drift.publication_oid()):  # kept, too
            raise gap
        bound = self.high_water_mark()
        stats.source_hwm = bound
        if since >= bound:
            return
        self.close()
        conn = self._stream = self.connector.replication()
        # Everything sent goes through a cursor of its own that reads nothing: psycopg2 moves a reading cursor's
        # flush position on to a keepalive's WAL end by itself, past what the change log holds.
        cursor, feedback = conn.cursor(), conn.cursor()
        start_streaming(cursor, feedback, self.config, since, conn.server_version >= STREAMING_SINCE)
        reader = PollReader(self, cursor, feedback, since, bound, stats, state or {}, publication)
        try:
            yield from reader.read()
        except psycopg2.Error as exc:
            self.close()
            if is_publication_lost(exc):
                raise LogGapError(*publication_lost(self.name, self.config.slot_name, self.config.publication_name),
                                  source=self.name) from None
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
        try:
            with closing(self.connector.connect()) as plain:
                let_go(plain, self.config.slot_name, through)
        except (psycopg2.Error, SourceUnavailableError):
            pass  # as above

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
