"""The capture slot as a plain connection sees it: its state, the SCN a consistent read is stamped with (found
by peeking the slot), moving it on for a change log that starts afresh, and waiting, after a capture, for the
server to let go of the slot where the capture confirmed it; starting a replication connection's stream
from it (``stream`` reads it); and what the slot holds back on the server (``slot_retention``, ``base.Retaining``).
Only the stream consumes the slot."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Any

import psycopg2

from dagster_databus.config import PostgresSourceConfig
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConcurrentRunError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import Retention
from dagster_databus.sources.postgres.connect import Connection, PostgresConnector
from dagster_databus.sources.postgres.pgoutput import Begin, Commit, PgoutputDecoder, lsn_of, lsn_text

# The most WAL a read peeks through for its settled SCN (a slot far behind: the read's own LSN stands).
_PEEK_BYTES = 64 << 20
# How long a slot a finished capture's server process still holds is waited for (it lets go in milliseconds).
SLOT_FREE_S = 2.0
# How long a read waits to peek a slot a capture streams from: a poll ends at the WAL written when it began.
PEEK_WAIT_S = 30.0
# SQLSTATE undefined_object: what decoding a change says of a publication the catalog lacked when it was written.
UNDEFINED_OBJECT = "42704"


def publication_lost(source: str, slot: str, publication: str) -> tuple[str, str]:
    """(problem, fix) of a slot whose changes name a publication that did not exist when they were written."""
    return (f"replication slot {slot!r} of source {source!r} cannot decode the changes it holds: publication "
            f"{publication!r} was dropped (and perhaps created again) behind capture's back, and pgoutput reads each "
            "change's publication as the catalog was when it was written, so the changes since the drop are lost to "
            "capture",
            f"run `databus bootstrap --source {source}` (the log and snapshots start afresh, past them), or set "
            f"sources.{source}.on_purged: bootstrap; let only install manage the publication")


def is_publication_lost(exc: psycopg2.Error) -> bool:
    return exc.pgcode == UNDEFINED_OBJECT and "publication" in str(exc)


def settled_scn(conn: Connection, slot: str, publication: str, consistent: Scn,
                wait_s: float = PEEK_WAIT_S) -> Scn:
    """The SCN a read at ``consistent`` (an exported snapshot's LSN) is stamped with: the end of the newest
    commit of the published tables before it, where the capture slot can say. Any position from that commit up
    to ``consistent`` is exact (no change of the tables lies between); the lowest is the one a read of the same
    data gives whenever it runs, as a binlog position does. The slot is peeked (``pg_logical_slot_peek_binary_
    changes``: nothing consumed) from its confirmed position, where capture leaves it after its last commit.

    A slot that a connection streams from cannot be peeked: a capture polling it, or one that has just
    finished while its server process has not let go yet. The peek is tried again for up to ``wait_s``; only
    a capture still streaming after that leaves ``consistent``. Stamping one read ``consistent`` and a later
    read of the same data its settled position would order the later read first: a refresh's rows would then
    not replace the bootstrap's, and reconciliation would find the snapshot ahead of the source."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _peeked(conn, slot, publication, consistent)
        except psycopg2.Error as exc:
            conn.rollback()
            if "is active for PID" not in str(exc) or time.monotonic() >= deadline:
                return consistent
            time.sleep(0.02)


def _peeked(conn: Connection, slot: str, publication: str, consistent: Scn) -> Scn:
    found = slot_state(conn, slot)
    confirmed = lsn_of(found["confirmed_flush_lsn"]) if found and found["confirmed_flush_lsn"] else None
    with conn.cursor() as cur:
        if confirmed is None or confirmed > consistent.value or consistent.value - confirmed > _PEEK_BYTES:
            return consistent
        cur.execute(sqlfiles.load("postgres", "settled.sql"),
                    {"slot": slot, "publication": publication, "upto": lsn_text(consistent.value)})
        rows = cur.fetchall()
    decoder = PgoutputDecoder()
    ends = [m.end_lsn for (data,) in rows if isinstance(m := decoder.decode(bytes(data)), Commit)]
    return Scn(min(max([confirmed, *ends]), consistent.value))


def slot_state(conn: Connection, slot: str) -> dict[str, Any] | None:
    """The capture slot as ``sql/postgres/slot.sql`` describes it, or None when it does not exist."""
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("postgres", "slot.sql"), {"slot": slot})
        row = cur.fetchone()
        return None if row is None else dict(zip([d[0] for d in cur.description or ()], row, strict=True))


def let_go(conn: Connection, slot: str, through: Scn) -> None:
    """Return once the server process of a closed stream has let go of ``slot``, confirmed at ``through``: a
    bootstrap or reconciliation right after must find the slot free to peek (``settled_scn``) and where the
    capture left it. Confirms it here when the feedback was lost with the stream's connection. Best effort
    (errors are the caller's to pass over): the next poll confirms the slot again before it reads."""
    deadline = time.monotonic() + SLOT_FREE_S
    while (state := slot_state(conn, slot)) is not None and state["active"]:
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)
    confirmed = state and state["confirmed_flush_lsn"]
    if state is not None and (not confirmed or lsn_of(confirmed) < through.value):
        with conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "confirm_slot.sql"), {"slot": slot, "upto": lsn_text(through.value)})


def move_on(conn: Connection, slot: str, publication: str, lost: bool) -> Scn:
    """The slot moved on to the WAL written now, for a change log that starts afresh (install, bootstrap): where
    the log starts. A slot whose WAL the server removed (``lost``) cannot be moved, and one behind a publication
    created again since (``publication_newer.sql``) goes on failing to decode after it is moved: such a slot is
    made again first."""
    name = {"slot": slot}
    with conn.cursor() as cur:
        cur.execute(sqlfiles.load("postgres", "publication_newer.sql"), {**name, "publication": publication})
        newer = cur.fetchone()
        if lost or (newer is not None and newer[0]):
            cur.execute(sqlfiles.load("postgres", "drop_slot.sql"), name)
            cur.execute(sqlfiles.load("postgres", "create_slot.sql"), name)
        cur.execute(sqlfiles.load("postgres", "advance_slot.sql"), name)
        row = cur.fetchone()
    assert row is not None
    return Scn(lsn_of(row[0]))


def start_streaming(cursor: Any, feedback: Any, config: PostgresSourceConfig, since: Scn, protocol_2: bool) -> None:
    """Start a replication ``cursor`` streaming the slot after ``since`` (``feedback``: the cursor that sends
    statuses). With ``protocol_2`` (PostgreSQL 14+) a transaction larger than the server's
    logical_decoding_work_mem comes as it is decoded, not at its commit: the server does not spill it to its own
    disk, and capture spools it to ours meanwhile."""
    options = {"proto_version": "2" if protocol_2 else "1", "publication_names": config.publication_name}
    if protocol_2:
        options["streaming"] = "on"
    try:
        cursor.start_replication(slot_name=config.slot_name, decode=False, start_lsn=since.value, options=options,
                                 status_interval=10)
        # The log holds everything through ``since``: the server may drop it (a release the last run missed).
        feedback.send_feedback(write_lsn=since.value, flush_lsn=since.value, force=True)
    except psycopg2.Error as exc:
        text = str(exc).strip()
        if "is active for PID" in text:
            raise ConcurrentRunError(
                f"replication slot {config.slot_name!r} of source {config.name!r} is locked by another run reading it "
                f"({text.splitlines()[0]})", "wait for the other capture run to finish; a slot serves one reader at a "
                "time", source=config.name) from None
        raise SourceUnavailableError(
            f"source {config.name!r} could not stream slot {config.slot_name!r}: {text.splitlines()[0]}",
            "run `databus validate` for the source, then again", source=config.name) from None


def slot_retention(connector: PostgresConnector, config: PostgresSourceConfig,
                   slot: dict[str, Any] | None) -> Retention:
    """The WAL the capture slot (``slot``, as ``slot_state`` describes it) holds back on the server, and the commit
    time of the oldest change waiting in it (``base.Retaining``)."""
    holder = f"replication slot {config.slot_name}"
    if slot is None:
        return Retention(holder, None, "missing")
    waiting = None
    if not slot["active"]:  # a slot a capture streams from cannot be peeked
        with closing(connector.connect()) as conn, conn.cursor() as cur:
            waiting = _waiting_since(cur, config)
    retained = slot["retained_bytes"]
    return Retention(holder, int(retained) if retained is not None else 0, str(slot["wal_status"] or "unknown"),
                     waiting)


def _waiting_since(cur: Any, config: PostgresSourceConfig) -> int | None:
    """The commit time (ms) of the first transaction the slot holds for capture, 0 for none: a peek (nothing
    consumed) decoding up to its first change. None when the server refuses the peek."""
    try:
        cur.execute(sqlfiles.load("postgres", "first_waiting.sql"),
                    {"slot": config.slot_name, "publication": config.publication_name})
        row = cur.fetchone()
    except psycopg2.Error:
        cur.connection.rollback()
        return None
    if row is None:
        return 0
    begin = PgoutputDecoder().decode(bytes(row[0]))
    return begin.commit_ts_ms if isinstance(begin, Begin) else None
