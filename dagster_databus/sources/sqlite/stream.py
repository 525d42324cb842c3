"""Polling a SQLite source's txlog: its epoch and positions, whole windows after a checkpoint read in chunks
and turned into change batches, and the txlog pruned once the change log holds it.

A poll takes the write lock, checks that the triggers are still current (``setup.require_current``) and
records the newest SCN as a *cut*: the changes between two cuts are one window. It then reads the changes up
to the cut in chunks of whole windows, refusing stale changes of tables whose policy is ``stop`` and text
that is not UTF-8 where it is read as text.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from typing import Any

import numpy as np
import pyarrow.compute as pc

from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import EpochMismatchError, LogGapError, SchemaMismatchError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import PollStats
from dagster_databus.sources.generic.epoch import require_same_epoch
from dagster_databus.sources.sqlite.batch import TxlogChunk, chunk_batch, joined_ints
from dagster_databus.sources.sqlite.catalog import SqliteCatalog
from dagster_databus.sources.sqlite.database import SqliteDatabase, high_water_mark, settings
from dagster_databus.sources.sqlite.drift import stale_error
from dagster_databus.sources.sqlite.render import split
from dagster_databus.sources.sqlite.setup import SqliteTriggers
from dagster_databus.sources.sqlite.text import change_error
from dagster_databus.sources.sqlite.types import carried_as_bytes

# The checkpoint state that holds the change log's id and the token its last poll left in the source
# (``_incarnation``).
CAPTURE_ID = "capture_id"
INCARNATION = "incarnation"
# The most tokens kept past the checkpoint's: polls that never commit (crashing, or losing to another run of the
# same log) each leave one.
_TOKENS_KEPT = 100


class SqlitePoller:
    """The txlog read after a checkpoint, and pruned behind the change log."""

    def __init__(self, database: SqliteDatabase, catalog: SqliteCatalog, setup: SqliteTriggers) -> None:
        self.database = database
        self.catalog = catalog
        self.setup = setup  # the capture objects: checked where the txlog is missing or stale
        self.config = database.config
        self.name = database.name

    def epoch(self) -> str:
        with closing(self.database.connect()) as conn:
            try:
                return settings(conn)["epoch_id"]
            except sqlite3.OperationalError:
                self.setup.require_installed()
                raise

    def high_water_mark(self) -> Scn:
        with closing(self.database.connect()) as conn:
            return high_water_mark(conn)

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        # Every change since install is in the txlog; a gap check guards pruned ranges.
        return Scn.BEGINNING, {}

    def reading(self) -> AbstractContextManager[None]:
        """Two polls of one txlog do not disturb each other; the change log's commit fences the loser."""
        return nullcontext()

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[ChangeBatch]:
        schemas = self.catalog.schemas()
        chunk_rows = self.config.poll.chunk_rows
        with closing(self.database.connect()) as conn:
            self._check_lineage(settings(conn), since, epoch, conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(sqlfiles.load("sqlite", "cut.sql"))
                self.setup.require_current(conn, schemas)
                cut = high_water_mark(conn).value
                stats.state = self._incarnation(conn, state or {})
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            stats.source_hwm = Scn(cut)
            cuts = joined_ints(conn.execute(sqlfiles.load("sqlite", "window_cuts.sql"),
                                            {"since_scn": since.value, "cut_scn": cut}).fetchone()[0])
            chunk_sql = sqlfiles.load("sqlite", "poll_chunk.sql")
            rest_sql = sqlfiles.load("sqlite", "poll_window_rest.sql")
            stop = [t for t in schemas if self.config.schema_policy(t) == "stop"]
            last = since
            while True:
                chunk = TxlogChunk.parse(conn.execute(chunk_sql, {"since_scn": last.value, "cut_scn": cut,
                                                                  "chunk_rows": chunk_rows}).fetchone(), cuts)
                if chunk is None:
                    break
                full = len(chunk) == chunk_rows
                if full and chunk.windows[-1] > chunk.scns[-1]:
                    rest = TxlogChunk.parse(conn.execute(rest_sql, {"window_scn": int(chunk.windows[-1]),
                                                                    "after_scn": int(chunk.scns[-1])}).fetchone(), cuts)
                    chunk = chunk + rest if rest is not None else chunk
                self._refuse_drift(conn, stop, last, Scn(int(chunk.scns[-1])))
                self._refuse_invalid_text(chunk, schemas)
                stats.ddl += _changes_in(chunk, schemas)
                batch = chunk_batch(chunk, schemas, _decode_json)
                last = Scn(int(chunk.scns[-1]))  # whole windows: the chunk's rows up to here are all read
                stats.until = last
                stats.chunks += 1
                if batch is not None:
                    yield batch
                if not full:
                    break

    def release(self, through: Scn) -> None:
        if not self.config.prune_txlog or through.is_beginning:
            return
        with closing(self.database.connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            for statement in split(sqlfiles.load("sqlite", "prune.sql")):
                conn.execute(statement, {"through_scn": through.value})
            conn.execute("COMMIT")

    def _refuse_drift(self, conn: sqlite3.Connection, tables: Sequence[str], since: Scn, until: Scn) -> None:
        """Raise for the first change of ``tables`` (those whose schema_changes policy is stop) in (since, until]
        that a drift range covers. Other tables' stale changes go on into the log: install wrote their
        repairs after them, and the marker between makes the merge apply the policy."""
        if not tables:
            return
        first = conn.execute(sqlfiles.load("sqlite", "first_stale.sql"), {
            "since_scn": since.value, "until_scn": until.value, "tables": json.dumps(list(tables))}).fetchone()
        if first is not None:
            raise stale_error(self.name, first[0], first[1], first[3], first[4])

    def _refuse_invalid_text(self, chunk: TxlogChunk, schemas: Mapping[str, TableSchema]) -> None:
        """Raise for the first change of a captured table in the chunk whose row image holds text that is not
        UTF-8 in a column read as text, naming the table, column, value and key (other tables' changes are
        dropped anyway; columns carried as bytes take such text exactly)."""
        for i, image in chunk.invalid:
            table = chunk.tables[i].as_py()
            if table not in schemas or chunk.ops[i].as_py() == "m":
                continue
            scn = int(chunk.scns[i])
            error = change_error(schemas[table], scn, image)
            if error is not None:
                raise error
            if not any(carried_as_bytes(c) for c in schemas[table].columns):
                raise SchemaMismatchError(
                    f"source {self.name!r}: the change at SCN {scn} of table {table!r} holds text that is not valid "
                    "UTF-8", f"correct the text in the source, then run `databus bootstrap --source {self.name}`",
                    source=self.name, table=table)
            # Otherwise the text is in columns carried as bytes (an image an earlier install's triggers wrote
            # before invalid_utf8 was binary): the batch takes it from the image's own bytes.

    def _incarnation(self, conn: sqlite3.Connection, state: Mapping[str, str]) -> dict[str, str]:
        """The checkpoint state of this poll: its change log's id and a new token, left in the source
        (``incarnation.sql``) after checking that the source still holds the token the checkpoint ``state``
        recorded. A file restored from an older copy does not, and is a gap in the log: its new writes take SCNs
        the log already holds for other changes."""
        log, recorded = state.get(CAPTURE_ID) or uuid.uuid4().hex, state.get(INCARNATION)
        held = settings(conn).get(f"incarnation:{log}", "").split()
        if recorded is not None and recorded not in held:
            raise LogGapError(
                f"source {self.name!r} ({self.config.path}) does not hold the mark capture left in it at its last "
                "poll: the file was replaced by an older copy (restored from a backup?), so its new writes reuse "
                "SCNs the change log already holds for other changes, and the changes made after the copy are gone",
                f"run `databus bootstrap --source {self.name}` (the log and snapshots start afresh from the file as it "
                f"is), or set sources.{self.name}.on_purged: bootstrap", source=self.name)
        token = uuid.uuid4().hex
        since = held[held.index(recorded) + 1:] if recorded is not None else []  # tokens of polls after it
        kept = [recorded] if recorded is not None else []
        conn.execute(sqlfiles.load("sqlite", "incarnation.sql"),
                     {"log": log, "tokens": " ".join([*kept, *since[-_TOKENS_KEPT:], token])})
        return {CAPTURE_ID: log, INCARNATION: token}

    def _check_lineage(self, settings: dict[str, str], since: Scn, epoch: str | None,
                       conn: sqlite3.Connection) -> None:
        require_same_epoch(
            epoch, settings["epoch_id"], since,
            f"source {self.name!r} ({self.config.path}) has capture epoch {settings['epoch_id']} but the "
            f"change log's checkpoint belongs to epoch {epoch}: the database was replaced, restored or its "
            "capture objects were re-installed, so positions cannot be compared",
            f"run `databus bootstrap --source {self.name}`: it sets the source's change log and snapshots "
            "aside and starts them afresh from the source's current position", self.name)
        hwm = high_water_mark(conn)
        if since > hwm:
            raise EpochMismatchError(
                f"the checkpoint SCN {since} of source {self.name!r} is ahead of the source's newest SCN {hwm}: "
                "the database was restored from an older copy",
                f"run `databus bootstrap --source {self.name}`", source=self.name,
            )
        pruned = Scn(int(settings.get("pruned_through", "0")))
        if pruned > since:
            raise LogGapError(
                f"source {self.name!r} pruned its txlog through SCN {pruned}, but the change log has only "
                f"captured through SCN {since}: the changes in between are gone",
                f"run `databus bootstrap --source {self.name}`; make sure only one lake captures a database",
                source=self.name,
            )


def _tagged(obj: dict[str, Any]) -> Any:
    """The triggers' tagged values: ``{"$b": hex}`` for a BLOB, ``{"$r": text}`` for a REAL JSON cannot hold."""
    if len(obj) == 1:
        if "$b" in obj:
            return bytes.fromhex(obj["$b"])
        if "$r" in obj:
            return float(obj["$r"])
    return obj


_decode_json = json.JSONDecoder(object_hook=_tagged).decode  # one decoder for every row image


def _changes_in(chunk: TxlogChunk, schemas: Mapping[str, TableSchema]) -> list[tuple[Scn, str, str]]:
    """The schema-change markers of captured tables in a chunk, as DDL records (SCN, table, statement)."""
    marks = np.flatnonzero(np.asarray(pc.equal(chunk.ops, "m")))
    found = []
    for i in marks:
        table = chunk.tables[int(i)].as_py()
        if table in schemas:
            found.append((Scn(int(chunk.scns[i])), table, json.loads(chunk.images[int(i)].as_py())["statement"]))
    return found
