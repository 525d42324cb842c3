"""Creating a slot with an exported snapshot, waited for in sight: the server waits, with no word, for every
transaction that holds a transaction id to end, and a prepared transaction (``PREPARE TRANSACTION``) left open
ends only when someone commits or rolls it back. So the creation runs in a thread while this one says, every
``REPORT_EVERY_S``, what it waits for (a prepared transaction's gid and age, a session's process), and gives up
after the source's ``snapshot_wait_s`` with a transient error that names them and the SQL to resolve them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from contextlib import closing
from typing import Any

import psycopg2

from dagster_databus.errors import DatabusError, SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.postgres.connect import ReplicationConnection, connect_spec

# The first word after a second (a creation that waits for nothing is done by then), then every 10 s.
FIRST_REPORT_S = 1.0
REPORT_EVERY_S = 10.0
log = logging.getLogger(__name__)


def create_waiting(conn: ReplicationConnection, command: str, spec: Mapping[str, Any],
                   wait_s: float) -> tuple[Any, ...]:
    """``command`` (a ``CREATE_REPLICATION_SLOT``) run on ``conn`` and its row, reporting what it waits for and
    cancelled after ``wait_s`` seconds (``SourceUnavailableError``, ``conn`` closed). Its own errors come back."""
    outcome: dict[str, Any] = {}

    def create() -> None:
        try:
            with conn.cursor() as cur:
                cur.execute(command)
                outcome["row"] = cur.fetchone()
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome["error"] = exc

    worker = threading.Thread(target=create, name="databus-create-slot", daemon=True)
    started = time.monotonic()
    worker.start()
    report_at = FIRST_REPORT_S
    while True:
        waited = time.monotonic() - started
        try:
            worker.join(max(0.0, min(report_at, wait_s) - waited))
        except BaseException:  # interrupted (Ctrl-C): the server stops waiting, the slot goes with the connection
            _cancel(conn, worker)
            raise
        if not worker.is_alive():
            break
        waited = time.monotonic() - started
        holders = waits(spec)
        if waited >= wait_s:
            _cancel(conn, worker)
            raise SourceUnavailableError(
                f"source {spec['source']!r}: a consistent read gave up after {wait_s:.0f} s (sources."
                f"{spec['source']}.snapshot_wait_s) waiting for transactions that began before it to end, which "
                f"creating its temporary slot needs: {'; '.join(holders) or 'none is left now'}",
                f"{_fix(holders)}; or raise snapshot_wait_s, then run again", source=spec["source"])
        log.warning("source %r: a consistent read has waited %.0f s of %.0f s (snapshot_wait_s) for transactions "
                    "that began before it to end: %s. %s", spec["source"], waited, wait_s,
                    "; ".join(holders) or "(none left)", _fix(holders))
        report_at = waited + REPORT_EVERY_S
    if "error" in outcome:
        raise outcome["error"]
    return tuple(outcome["row"])


def _cancel(conn: ReplicationConnection, worker: threading.Thread) -> None:
    """Stop the server's wait and close ``conn``: the temporary slot goes with it."""
    conn.cancel()
    worker.join(5.0)
    conn.close()


def waits(spec: Mapping[str, Any]) -> list[str]:
    """What a slot's creation waits for now, oldest first, each named; nothing when it cannot be read."""
    try:
        with closing(connect_spec(dict(spec))) as conn, conn.cursor() as cur:
            cur.execute(sqlfiles.load("postgres", "snapshot_waits.sql"))
            rows = cur.fetchall()
    except (psycopg2.Error, DatabusError):  # a courtesy: the wait and its bound go on without it
        return []
    return [f"prepared transaction {name!r} (database {db}, owner {user}, prepared {age} s ago)"
            if kind == "prepared" else f"the transaction of server process {name} (database {db}, user {user}, "
            f"running {age} s)" for kind, name, db, user, age in rows]


def _fix(holders: list[str]) -> str:
    fixes = []
    if any(h.startswith("prepared") for h in holders):
        fixes.append("inspect prepared transactions with SELECT * FROM pg_prepared_xacts, and end each with "
                     "COMMIT PREPARED '<gid>' or ROLLBACK PREPARED '<gid>' (in its database, as its owner or a "
                     "superuser) once you know which is right")
    if any(not h.startswith("prepared") for h in holders):
        fixes.append("inspect sessions with SELECT * FROM pg_stat_activity WHERE pid = <pid>, and let each "
                     "transaction finish (or end it: SELECT pg_terminate_backend(<pid>))")
    return "; ".join(fixes) or "run again when the long transactions have ended"
