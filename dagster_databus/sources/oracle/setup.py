"""The capture objects of an Oracle source (``sql/oracle/``: the core objects, each table's view, shadow
table and triggers, the scheduler jobs), installed idempotently, checked and removed.

Install applies the rendered scripts: a CREATE whose object exists is skipped (checked in the data
dictionary), code units are CREATE OR REPLACE, and a hash of everything rendered is kept in
``sync_core_settings`` so an unchanged re-install does nothing at all.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from contextlib import closing
from typing import TYPE_CHECKING, Any

from dagster_databus.errors import CaptureNotInstalledError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import InstallReport, not_installed, require_installed
from dagster_databus.sources.oracle.catalog import OracleCatalog
from dagster_databus.sources.oracle.sql import CORE_SCRIPTS, Statement, install_scripts, split_script

if TYPE_CHECKING:
    import oracledb

CAPTURE_VERSION = "1"
CORE_OBJECTS = (("SEQUENCE", "SY$SCN_SEQ"), ("TABLE", "SYNC_CORE_SETTINGS"), ("TABLE", "SY$SOURCES"),
                ("TABLE", "SY$TXLOG"), ("PACKAGE", "SYNC_CORE"), ("PACKAGE BODY", "SYNC_CORE"),
                ("PACKAGE", "SYNC_ALERT"), ("PACKAGE BODY", "SYNC_ALERT"))
JOBS = ("J_COALESCE_LOG", "J_CALL_SIGNAL")
MAX_SOURCES = 126  # sy$txlog.mask is a NUMBER: 38 digits hold bits 0..125
_NO_SUCH_TABLE = 942  # ORA-00942: table or view does not exist


class OracleInstall:
    """Install, verify and uninstall of the capture objects of the source's tables."""

    def __init__(self, catalog: OracleCatalog) -> None:
        self.catalog = catalog
        self.name = catalog.name

    def rendered(self) -> list[tuple[str, list[Statement]]]:
        """Every script of the install, rendered, in order: (script, statements)."""
        return install_scripts({table: self.catalog.objects(table) for table in self.catalog.schemas()})

    def install(self) -> InstallReport:
        scripts = self.rendered()
        digest = hashlib.sha256("\n".join(s.text for _, st in scripts for s in st).encode()).hexdigest()
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            found = settings(cur)
            if found and found.get("install_hash") == digest and not self._problems(cur):
                return InstallReport(epoch=epoch_of(cur, found), version=CAPTURE_VERSION, changed=(),
                                     unchanged=tuple(self.catalog.schemas()))
            core, tables = scripts[: len(CORE_SCRIPTS)], scripts[len(CORE_SCRIPTS):]
            for _, statements in core[:1]:
                _apply(cur, statements)
            self._register_source(cur)
            for _, statements in [*core[1:], *tables]:
                _apply(cur, statements)
            cur.execute("SELECT COUNT(*) FROM sync_core_settings")
            if _count(cur) == 0:
                cur.execute("INSERT INTO sync_core_settings (raise_dbms_alerts, epoch_id) VALUES ('Y', :e)",
                            e=uuid.uuid4().hex)
            cur.execute("UPDATE sync_core_settings SET databus_version = :v, install_hash = :h",
                        v=CAPTURE_VERSION, h=digest)
            conn.commit()
            problems = self._problems(cur)
            if problems:
                raise CaptureNotInstalledError(
                    f"Oracle capture objects of source {self.name!r} are not healthy after install: "
                    + "; ".join(problems), "check the user's privileges (docs/oracle.md) and the errors in "
                    "USER_ERRORS, then run the install again", source=self.name)
            return InstallReport(epoch=epoch_of(cur, settings(cur)), version=CAPTURE_VERSION,
                                 changed=tuple(self.catalog.schemas()), unchanged=())

    def installed(self) -> bool:
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            cur.execute("SELECT COUNT(*) FROM user_tables WHERE table_name = 'SY$TXLOG'")
            return bool(_count(cur))

    def verify(self) -> list[str]:
        self.catalog.preflight()
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            return self._problems(cur)

    def notes(self) -> list[str]:
        """Nothing beyond verify's problems to say of an Oracle source."""
        return []

    def require_installed(self) -> None:
        require_installed(self, lambda problems: not_installed(
            f"capture is not installed correctly in Oracle source {self.name!r}:", problems,
            f"materialize the '{self.name}/capture' asset to install or repair the objects", source=self.name))

    def uninstall(self) -> tuple[str, ...]:
        """Remove everything install created for this source's tables, then the core objects when no other
        source uses them; what was dropped ("trigger ORDERS_TRG", ...)."""
        dropped: list[str] = []
        with closing(self.catalog.connect()) as conn, closing(conn.cursor()) as cur:
            for table in self.catalog.schemas():
                dropped += _apply(cur, split_script(self.catalog.objects(table).render("uninstall/01_table.sql")))
            cur.execute("DELETE FROM sy$sources WHERE name = :n", n=self.name)
            cur.execute("SELECT COUNT(*) FROM sy$sources")
            remaining = _count(cur)
            conn.commit()
            if remaining == 0:  # other sources still use the core objects otherwise
                dropped += _apply(cur, split_script(sqlfiles.load("oracle", "uninstall/02_core.sql")))
        return tuple(dropped)

    def _register_source(self, cur: oracledb.Cursor) -> None:
        cur.execute("SELECT bitnum FROM sy$sources WHERE name = :n", n=self.name)
        if cur.fetchone() is not None:
            return
        cur.execute("SELECT bitnum FROM sy$sources ORDER BY bitnum")
        used = {r[0] for r in cur.fetchall()}
        free = [b for b in range(MAX_SOURCES) if b not in used]
        if not free:
            raise CaptureNotInstalledError(
                f"sy$sources already maps {MAX_SOURCES} sources, the most sy$txlog.mask can hold; "
                f"source {self.name!r} cannot be registered",
                "remove sources that are no longer captured from sy$sources, or capture into another schema",
                source=self.name)
        cur.execute("INSERT INTO sy$sources (name, bitnum) VALUES (:n, :b)", n=self.name, b=free[0])

    def _problems(self, cur: oracledb.Cursor) -> list[str]:
        problems = []
        cur.execute("SELECT object_type, object_name, status FROM user_objects")
        objects = {(t, n): s for t, n, s in cur.fetchall()}
        expected = list(CORE_OBJECTS)
        for table in self.catalog.schemas():
            values = self.catalog.objects(table).values
            expected += [("VIEW", values["view"].strip('"')), ("TABLE", values["shadow"].strip('"')),
                         ("INDEX", values["txn_index"].strip('"')), ("TRIGGER", values["trigger"].strip('"')),
                         ("TRIGGER", values["delete_trigger"].strip('"'))]
        for kind, name in expected:
            status = objects.get((kind, name))
            if status is None:
                problems.append(f"{kind.lower()} {name} is missing")
            elif status != "VALID":
                problems.append(f"{kind.lower()} {name} is {status}")
        cur.execute("SELECT trigger_name, status FROM user_triggers WHERE trigger_name LIKE 'SY$T%'")
        problems += [f"trigger {n} is {s}" for n, s in cur.fetchall() if s != "ENABLED"]
        cur.execute("SELECT job_name, enabled, state FROM user_scheduler_jobs WHERE job_name IN "
                    "('J_COALESCE_LOG', 'J_CALL_SIGNAL')")
        jobs = {n: (e, s) for n, e, s in cur.fetchall()}
        for job in JOBS:
            if job not in jobs:
                problems.append(f"scheduler job {job} is missing")
            elif jobs[job][0] != "TRUE" or jobs[job][1] in ("BROKEN", "DISABLED", "FAILED"):
                problems.append(f"scheduler job {job} is {jobs[job][1]} (enabled={jobs[job][0]})")
        if ("TABLE", "SY$SOURCES") in objects:
            cur.execute("SELECT COUNT(*) FROM sy$sources WHERE name = :n", n=self.name)
            if _count(cur) == 0:
                problems.append(f"source {self.name} is not registered in sy$sources")
        return problems


def settings(cur: oracledb.Cursor) -> dict[str, str]:
    """The install's settings row; empty when install has not created ``sync_core_settings`` yet."""
    import oracledb

    try:
        cur.execute("SELECT databus_version, install_hash, epoch_id FROM sync_core_settings")
    except oracledb.DatabaseError as exc:
        if getattr(exc.args[0] if exc.args else None, "code", None) != _NO_SUCH_TABLE:
            raise  # any other failure (privileges, a lost connection) is not "not installed"
        return {}
    row = cur.fetchone()
    return dict(zip(("databus_version", "install_hash", "epoch_id"), row, strict=True)) if row else {}


def epoch_of(cur: oracledb.Cursor, settings: Mapping[str, str]) -> str:
    """The source's lineage: the database's name and the install's epoch id."""
    cur.execute("SELECT SYS_CONTEXT('USERENV', 'DB_NAME') FROM dual")
    return f"{_first(cur)}:{settings.get('epoch_id')}"


def _apply(cur: oracledb.Cursor, statements: list[Statement]) -> list[str]:
    """Run the statements whose work is not done yet; what the DROPs among them dropped, by kind and name."""
    dropped = []
    for statement in statements:
        if _already_there(cur, statement):
            continue
        cur.execute(statement.text)
        if statement.drops:
            dropped.append(f"{statement.drops[0].lower()} {statement.drops[1]}")
        elif statement.drops_column:
            dropped.append(f"column {'.'.join(statement.drops_column)}")
    return dropped


def _already_there(cur: oracledb.Cursor, statement: Statement) -> bool:
    if statement.creates and statement.creates[0] in ("TABLE", "SEQUENCE", "INDEX"):
        kind, name = statement.creates
        cur.execute("SELECT COUNT(*) FROM user_objects WHERE object_type = :k AND object_name = :n", k=kind, n=name)
        return _count(cur) > 0
    if statement.adds_column:
        table, column = statement.adds_column
        cur.execute("SELECT COUNT(*) FROM user_tab_columns WHERE table_name = :t AND column_name = :c",
                    t=table, c=column)
        return _count(cur) > 0
    if statement.drops:
        kind, name = statement.drops
        cur.execute("SELECT COUNT(*) FROM user_objects WHERE object_type = :k AND object_name = :n", k=kind, n=name)
        return _count(cur) == 0
    if statement.drops_column:
        table, column = statement.drops_column
        cur.execute("SELECT COUNT(*) FROM user_tab_columns WHERE table_name = :t AND column_name = :c",
                    t=table, c=column)
        return _count(cur) == 0
    return False


def _first(cur: oracledb.Cursor) -> Any:
    """The first column of the one row a query returns (a COUNT, a SYS_CONTEXT, a sequence value)."""
    row = cur.fetchone()
    assert row is not None  # an aggregate, or a query of dual: always one row
    return row[0]


def _count(cur: oracledb.Cursor) -> int:
    """The COUNT(*) a query returns."""
    return int(_first(cur))
