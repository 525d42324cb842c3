"""The database file of a SQLite source: opening it for capture, and what the capture tables say of it (the
install's settings, the txlog's newest SCN)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from dagster_databus.config import SqliteSourceConfig
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.sources import sqlfiles

# The tables install creates (the first, the settings, tells whether install has run here).
CORE_TABLES = ("_databus_settings", "_databus_txlog", "_databus_cuts", "_databus_shapes", "_databus_drift",
               "_databus_layouts", "_databus_displaced")
# SQLite's primary result codes for a lock another connection holds (the extended codes keep them in the low byte).
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class BusyAwareConnection(sqlite3.Connection):
    """A connection on which a lock that outlasts the busy timeout is a transient ``SourceUnavailableError``
    (exit 75): the writer holding it commits eventually, so running again succeeds."""

    database: SqliteDatabase

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _BUSY:
                raise self.database.locked(exc) from None
            raise


class SqliteDatabase:
    """The source's database file, opened for capture."""

    def __init__(self, config: SqliteSourceConfig) -> None:
        self.config = config
        self.name = config.name

    def field(self, suffix: str) -> str:
        """The config field ``suffix`` of this source, as errors name it."""
        return f"sources.{self.name}.{suffix}"

    def connect(self) -> sqlite3.Connection:
        path = Path(self.config.path)
        if not path.exists():
            raise ConfigError(
                self.field("path"), f"database file {path} does not exist",
                "correct the path, or create the database first (make demo creates the demo database)",
            )
        if path.is_dir():
            raise ConfigError(self.field("path"), f"{path} is a directory, not a database file",
                              "point path at the SQLite database file")
        try:
            # mode=rw: never create a database by accident; capture must write its txlog.
            conn = sqlite3.connect(
                f"file:{path}?mode=rw", uri=True, isolation_level=None,
                timeout=self.config.busy_timeout_ms / 1000,
                # Bootstrap batches are pulled by delta-rs from its own thread, one at a time.
                check_same_thread=False, factory=BusyAwareConnection,
            )
            conn.database = self
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except SourceUnavailableError:
            raise
        except sqlite3.Error as exc:
            raise ConfigError(
                self.field("path"), f"cannot open {path} as a writable SQLite database: {exc}",
                "check that the file is a SQLite database and that this user can read and write it "
                "(and its folder, for the journal)",
            ) from None
        return conn

    def locked(self, exc: sqlite3.OperationalError) -> SourceUnavailableError:
        """The transient error for a lock that outlasted ``busy_timeout_ms``."""
        return SourceUnavailableError(
            f"source {self.name!r}: {self.config.path} stayed locked for longer than busy_timeout_ms="
            f"{self.config.busy_timeout_ms} ({exc}): another connection holds a write transaction on it (a "
            "writer of the application, or another databus run on this source)",
            "run again once that writer has committed (a retry of this exit status does it); if the application "
            f"holds write transactions for that long, raise sources.{self.name}.busy_timeout_ms",
            source=self.name, transient=True)


def installed(conn: sqlite3.Connection) -> bool:
    """Whether install has run in this database (its settings table exists, current or not)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (CORE_TABLES[0],)).fetchone() is not None


def settings(conn: sqlite3.Connection) -> dict[str, str]:
    """The install's settings (epoch id, version, owner, prune watermark, checked SCN)."""
    rows: list[tuple[str, str]] = conn.execute("SELECT name, value FROM _databus_settings").fetchall()
    return dict(rows)


def high_water_mark(conn: sqlite3.Connection) -> Scn:
    """The txlog's newest SCN (``high_water_mark.sql``)."""
    row: tuple[int] = conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()
    return Scn(row[0])
