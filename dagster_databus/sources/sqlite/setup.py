"""The capture objects of a SQLite source: the txlog, cut, shape, drift and layout tables, the images view and
each table's triggers, installed, checked and removed. Install is re-runnable: an unchanged install changes
nothing, a version 2 install is converted in place, a version 3 one gets version 4's triggers (the JSON rows
it wrote are read as they are), and a table whose columns or triggers changed gets its drift noted
(``drift``) before its triggers are rendered again."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from contextlib import closing

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import CaptureNotInstalledError
from dagster_databus.log.compat import OldForm
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import InstallReport, not_installed, require_installed
from dagster_databus.sources.sqlite import drift, layouts
from dagster_databus.sources.sqlite.catalog import SqliteCatalog
from dagster_databus.sources.sqlite.database import CORE_TABLES, SqliteDatabase, high_water_mark, settings
from dagster_databus.sources.sqlite.database import installed as installed_in
from dagster_databus.sources.sqlite.displace import displace_names, displacing, unmatched_notes
from dagster_databus.sources.sqlite.render import (
    found_triggers,
    rowid_alias,
    split,
    trigger_homes,
    trigger_names,
    trigger_sql,
    wanted_triggers,
)
from dagster_databus.sources.sqlite.text import text_notes

# 4: the triggers write the values as they are, in value columns, with their layout's marker; the view
# _databus_images makes the JSON images version 3's triggers wrote (3: a plain rowid txlog, windows by cuts,
# drift found by the poll; 2: the triggers read the epoch and checked the columns per row, and made REAL
# values travel as exact text). Version 4 installs made before the displace triggers (a table with UNIQUE
# constraints beside its key: ``displace``) get them, and ``_databus_displaced``, when install runs again: their
# triggers no longer match the ones rendered.
CAPTURE_VERSION = "4"
# The older installs install converts, and when that conversion can go (``log.compat``).
OLD_FORMS = (
    OldForm("a SQLite source's capture objects of capture version 2 (triggers that read the epoch and checked "
            "the columns per row)", "SQLite capture version 2",
            "dagster_databus.sources.sqlite.setup:SqliteTriggers",
            "no deployed SQLite source is still at version 2: install converts it (migrate_v2*.sql)"),
    OldForm("a SQLite source's txlog rows of capture version 3 (JSON row images written by the triggers)",
            "SQLite capture version 3", "dagster_databus.sources.sqlite.render:layout_images",
            "no deployed SQLite txlog holds version 3 rows: they are pruned once every log has read past them"),
)


class SqliteTriggers:
    """Install, verify and uninstall of the capture objects, and the check, under a poll's write lock, that
    they are still current."""

    def __init__(self, database: SqliteDatabase, catalog: SqliteCatalog) -> None:
        self.database = database
        self.catalog = catalog
        self.config = database.config
        self.name = database.name

    def install(self) -> InstallReport:
        """Create or update the capture objects in one write transaction. A version 2 install is
        converted in place; a table whose columns changed (or whose triggers went missing, or moved to a table
        it was renamed to) since its triggers were rendered gets a drift range over the changes that may be
        wrong, then new triggers."""
        schemas = self.catalog.preflight()
        changed, unchanged = [], []
        with closing(self.database.connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                existing_sql = trigger_sql(conn)
                migrate = "epoch" in (c[0] for c in drift.shape(conn, "_databus_txlog"))
                if migrate:
                    for statement in split(sqlfiles.load("sqlite", "migrate_v2.sql")):
                        conn.execute(statement)
                core = sqlfiles.render("sqlite", "install.sql", epoch_id=uuid.uuid4().hex,
                                       version=CAPTURE_VERSION)
                for statement in split(core):
                    conn.execute(statement)
                self.catalog.require_owner(conn)  # again, holding the write lock
                conn.execute(sqlfiles.load("sqlite", "set_owner.sql"), {"source": self.name})
                if migrate:
                    for statement in split(sqlfiles.load("sqlite", "migrate_v2_rows.sql")):
                        conn.execute(statement)
                changes = {c.table: c for c in drift.note_changes(conn, schemas)}
                layouts.widen(conn, list(schemas.values()), self.name)
                rowids = {table: rowid_alias(conn, table) for table in schemas}
                uniques = {table: displacing(conn, schema, rowids[table]) for table, schema in schemas.items()}
                stored = {table: layouts.layout(conn, schema, rowids[table], store=True)
                          for table, schema in schemas.items()}
                layouts.make_view(conn)  # before repairs, which read the images of the rows they repair
                for table, schema in schemas.items():
                    script, wanted = wanted_triggers(schema, rowids[table], stored[table], uniques[table])
                    if wanted != found_triggers(table, existing_sql):
                        for statement in split(script):
                            conn.execute(statement)
                        changed.append(table)
                    else:
                        unchanged.append(table)
                    conn.execute(sqlfiles.load("sqlite", "set_shape.sql"),
                                 {"tbl": table, "columns": json.dumps(drift.shape(conn, table, drift.carried(schema)))})
                    change = changes.get(table)
                    if (change is not None and change.reason == "columns" and change.through > change.after
                            and self.config.schema_policy(table) != "stop" and not drift.repair(conn, schema, change)):
                        drift.note_unrepaired(conn, change)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            epoch = settings(conn)["epoch_id"]
        return InstallReport(epoch=epoch, version=CAPTURE_VERSION, changed=tuple(changed),
                             unchanged=tuple(unchanged))

    def installed(self) -> bool:
        with closing(self.database.connect()) as conn:
            return installed_in(conn)

    def verify(self) -> list[str]:
        schemas = self.catalog.preflight()
        problems: list[str] = []
        with closing(self.database.connect()) as conn:
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            problems += [f"capture table {t} is missing" for t in CORE_TABLES if t not in present]
            triggers = trigger_sql(conn)
            homes = trigger_homes(conn)
            if "_databus_layouts" in present and not layouts.view_current(conn):
                problems.append(f"capture view {layouts.VIEW} is missing or out of date")
            for table, schema in schemas.items():
                rowid = rowid_alias(conn, table)
                current = layouts.layout(conn, schema, rowid) if "_databus_layouts" in present else None
                _, wanted = wanted_triggers(schema, rowid, current, displacing(conn, schema, rowid))
                names = list(trigger_names(table).values())
                missing = [n for n in names if n not in triggers]
                elsewhere = sorted({homes[n] for n in names if n in homes and homes[n].lower() != table.lower()})
                if elsewhere:
                    problems.append(drift.moved_problem(table, elsewhere[0]))
                elif missing:
                    problems.append(f"table {table}: trigger(s) {', '.join(missing)} missing")
                elif found_triggers(table, triggers) != wanted:
                    problems.append(f"table {table}: triggers are out of date with the table's columns")
        return problems

    def require_installed(self) -> None:
        require_installed(self, self.install_error)

    def notes(self) -> list[str]:
        """What ``databus validate`` (its only caller: a scan of every captured table is too slow for the checks
        of every sync) says of the source beyond its capture objects: ``text.text_notes``'s scan for text that
        is not UTF-8, which raises ``SchemaMismatchError`` naming each table, column and key; unique indexes a REPLACE
        conflict deletes rows through unseen (``displace.unmatched_notes``)."""
        schemas = self.catalog.schemas()
        with closing(self.database.connect()) as conn:
            return [*text_notes(conn, schemas, self.name),
                    *(note for table in schemas for note in unmatched_notes(conn, table))]

    def install_error(self, problems: Sequence[str]) -> CaptureNotInstalledError:
        return not_installed(
            f"capture is not installed correctly in source {self.name!r} ({self.config.path}):", problems,
            f"materialize the '{self.name}/capture' asset (or run `databus install --source {self.name}`) "
            "to install or update the txlog and triggers")

    def require_current(self, conn: sqlite3.Connection, schemas: Mapping[str, TableSchema]) -> None:
        """Holding the poll's write lock: every captured table still has the triggers and columns install
        rendered them for (install checked just before; this closes the gap), so the check moves up. The
        database is still this source's."""
        self.catalog.require_owner(conn)
        stale = drift.stale(conn, schemas, drift.shapes(conn))
        if stale:
            raise self.install_error([drift.moved_problem(table, found.moved_to) if found.moved_to else
                                      f"table {table}: its columns or triggers changed while capture started"
                                      for table, found in stale.items()])
        conn.execute(sqlfiles.load("sqlite", "set_checked.sql"), {"scn": high_water_mark(conn).value})

    def uninstall(self) -> tuple[str, ...]:
        """Drop every table's triggers, then the txlog and the tables beside it, in one transaction; what was
        dropped ("trigger _databus_orders_insert", ...)."""
        statements = [statement for table in self.config.tables for statement in split(sqlfiles.render(
            "sqlite", "uninstall_table.sql", **{k: quote_ansi(v) for k, v in
                                                (trigger_names(table.name) | displace_names(table.name)).items()}))]
        statements += split(sqlfiles.load("sqlite", "uninstall.sql"))
        dropped = []
        with closing(self.database.connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            existing = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
            for statement in statements:
                conn.execute(statement)
                # Each is DROP <kind> IF EXISTS <quoted name>.
                words = statement.split()
                if words[-1].strip('";') in existing:
                    dropped.append(f"{words[1].lower()} {words[-1].strip(chr(34) + ';')}")
            conn.execute("COMMIT")
        return tuple(dropped)
