"""SQLite capture: Databus's trigger + txlog design ported to an embedded database.

Triggers append every row change to ``_databus_txlog``; its rowid is the SCN. SQLite shows
triggers no transaction id, but writers are serialized, so a poll that takes the write lock and
records the newest SCN as a *cut* divides the stream between whole transactions: the changes
between two cuts are one window (one or more whole source transactions, never part of one).

The triggers do nothing but write that row. Whether a table's columns still match the ones its
triggers were rendered for is checked by install (and, for the moment between, by the poll) against
``_databus_shapes``; the changes a mismatch may have touched are recorded as drift ranges, which the
table's ``schema_changes`` policy acts on.

``SqliteSource`` (``base.Source``) is a record of its four parts, each in the module named after it, all on
the ``database`` file: ``catalog`` (the tables' schemas, the database's owner), ``setup``
(``setup.SqliteTriggers``: the capture objects installed, verified and removed; their drift in ``drift``, their
SQL in ``render``), ``stream`` (``stream.SqlitePoller``: the txlog read into change batches, and pruned) and
``reads`` (``reads.SqliteReads``: consistent reads, key ranges, fingerprints).
"""

from __future__ import annotations

from dagster_databus.config import SqliteSourceConfig
from dagster_databus.sources.sqlite.catalog import SqliteCatalog
from dagster_databus.sources.sqlite.database import SqliteDatabase
from dagster_databus.sources.sqlite.reads import SqliteReads
from dagster_databus.sources.sqlite.setup import SqliteTriggers
from dagster_databus.sources.sqlite.stream import SqlitePoller


class SqliteSource:
    kind = "sqlite"
    # Triggers see rows only, but install compares each table's columns with its triggers' and puts a
    # marker in the stream where they changed; the poll reports it as a DDL record.
    sees_ddl = True
    install_repairs = True  # verify's problems are the txlog and triggers, which install creates or updates

    def __init__(self, config: SqliteSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self.database = database = SqliteDatabase(config)
        self.catalog = catalog = SqliteCatalog(database)
        self.setup = setup = SqliteTriggers(database, catalog)
        self.stream = SqlitePoller(database, catalog, setup)
        self.reads = SqliteReads(database, catalog)

    def uninstall(self) -> tuple[str, ...]:
        """Remove the capture objects (the txlog and its tables, every table's triggers; ``Uninstallable``)."""
        return self.setup.uninstall()
