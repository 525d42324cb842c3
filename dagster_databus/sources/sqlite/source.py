"""SQLite capture: Databus's trigger + txlog design ported to an embedded database.

Triggers append every row change to ``_databus_txlog``; its rowid is the SCN. SQLite shows
triggers no transaction id, but writers are serialized, so a poll that takes the write lock and
records the newest SCN as a *cut* divides the stream between whole transactions: the changes
between two cuts are one window (one or more whole source transactions, never part of one).

The triggers do nothing but write that row. Whether a table's columns still match the ones its
triggers were rendered for is checked by install (and, for the moment between, by the poll) against
``_databus_shapes``; the changes a mismatch may have touched are recorded as drift ranges, which the
table's ``schema_changes`` policy acts on.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.config import SqliteSourceConfig
from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.identifiers import quote_literal, quote_sqlite
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Position, Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import (
    CaptureNotInstalledError,
    ConfigError,
    EpochMismatchError,
    LogGapError,
    SchemaDriftError,
    SchemaMismatchError,
)
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import (
    ALL_ROWS,
    InstallReport,
    PollStats,
    RangeRead,
    RowSelection,
    SourceFingerprint,
    TableSnapshot,
    not_installed,
    require_installed,
)
from dagster_databus.sources.catalog import (
    check_column_name,
    null_key_problem,
    null_key_query,
    require_mapped,
    require_unique_key,
    resolve_key,
    table_schemas,
)
from dagster_databus.sources.fingerprints import in_buckets, streamed_fingerprint
from dagster_databus.sources.sqlite.batch import TxlogChunk, chunk_batch, joined_ints
from dagster_databus.sources.sqlite.bootstrap import check_selection, key_ranges
from dagster_databus.sources.sqlite.text import (
    change_error,
    first_invalid_change,
    first_invalid_row,
    invalid_text_error,
    named_invalid_text,
    naming_invalid_text,
)
from dagster_databus.sources.sqlite.types import carried_as_bytes, read_expression, sqlite_column_type, sqlite_value

# 3: a plain rowid txlog, windows by cuts, drift found by the poll (2: the triggers read the epoch and
# checked the columns per row; 2 also made REAL values travel as exact text).
CAPTURE_VERSION = "3"
CORE_TABLES = ("_databus_settings", "_databus_txlog", "_databus_cuts", "_databus_shapes", "_databus_drift")
NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_TEXT_AFFINITY = ("CHAR", "CLOB", "TEXT")


class SqliteSource:
    kind = "sqlite"
    # Triggers see rows only, but install compares each table's columns with its triggers' and puts a
    # marker in the stream where they changed; the poll reports it as a DDL record.
    sees_ddl = True
    install_repairs = True  # verify's problems are the txlog and triggers, which install creates or updates

    def __init__(self, config: SqliteSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self._schemas: dict[str, TableSchema] | None = None

    # -- connections -------------------------------------------------------------------

    def _field(self, suffix: str) -> str:
        return f"sources.{self.name}.{suffix}"

    def _connect(self) -> sqlite3.Connection:
        path = Path(self.config.path)
        if not path.exists():
            raise ConfigError(
                self._field("path"), f"database file {path} does not exist",
                "correct the path, or create the database first (make demo creates the demo database)",
            )
        if path.is_dir():
            raise ConfigError(self._field("path"), f"{path} is a directory, not a database file",
                              "point path at the SQLite database file")
        try:
            # mode=rw: never create a database by accident; capture must write its txlog.
            conn = sqlite3.connect(
                f"file:{path}?mode=rw", uri=True, isolation_level=None,
                timeout=self.config.busy_timeout_ms / 1000,
                # Bootstrap batches are pulled by delta-rs from its own thread, one at a time.
                check_same_thread=False,
            )
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            raise ConfigError(
                self._field("path"), f"cannot open {path} as a writable SQLite database: {exc}",
                "check that the file is a SQLite database and that this user can read and write it "
                "(and its folder, for the journal)",
            ) from None
        return conn

    # -- preflight ---------------------------------------------------------------------

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self._connect()) as conn:
            self._require_owner(conn)
            self._schemas = table_schemas(self.config.tables, partial(self._table_schema, conn))
        return self._schemas

    def _require_owner(self, conn: sqlite3.Connection) -> None:
        """Refuse a database another source captures (its name is recorded by that source's install)."""
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (CORE_TABLES[0],)).fetchone() is None:
            return  # never installed: no owner yet
        row = conn.execute(sqlfiles.load("sqlite", "owner.sql")).fetchone()
        if row is None or row[0] == self.name:
            return
        owner, path = row[0], self.config.path
        raise ConfigError(
            self._field("path"),
            f"database {path} is already captured by source {owner!r} (recorded by its install): one database "
            f"is captured by one source, since its txlog, pruning and schema checks serve them all, and source "
            f"{self.name!r} would lose changes to {owner!r}'s pruning",
            f"capture these tables in source {owner!r} (list them under its tables) instead of in a second source "
            f"on the same file, in this config or another; if source {owner!r} is gone for good (renamed or "
            f"removed), release the database with DELETE FROM _databus_settings WHERE name = 'owner_source' in "
            f"{path}, then run `databus install --source {self.name}` and `databus bootstrap --source {self.name}`",
        )

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def _table_schema(self, conn: sqlite3.Connection, index: int, table: str,
                      key: tuple[str, ...]) -> TableSchema:
        where = self._field(f"tables[{index}]")
        info = conn.execute(f"PRAGMA table_info({quote_sqlite(table)})").fetchall()
        if not info:
            self._refuse_renamed_away(conn, table, where)
            existing = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_databus\\_%' "
                "ESCAPE '\\' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            raise ConfigError(
                f"{where}.name", f"table {table!r} does not exist in {self.config.path}",
                f"use one of the database's tables: {', '.join(existing) or '(none)'}",
            )
        columns, unmapped = [], []
        for _cid, name, decl, _notnull, default, _pk in info:
            check_column_name(name, table, where)
            ctype = sqlite_column_type(decl or "")
            if ctype is None:
                unmapped.append(f"{name} {decl}")
                continue
            columns.append(Column(name=name, type=ctype, source_type=decl or "",
                                  default=None if default is None or default.upper() == "NULL" else default))
        require_mapped(self.name, table, unmapped, "SQLite", "declare DECIMAL(p,s) with 1 <= p and s <= p")
        key = resolve_key(columns, key, table, where)
        require_unique_key(key, self._unique_sets(conn, table, info), table, where)
        if self.config.invalid_utf8 == "binary":  # text outside the key as its exact bytes (a key stays text)
            columns = [replace(c, type=ColumnType("binary")) if c.type.kind == "string" and c.name not in key else c
                       for c in columns]
        return TableSchema(source=self.name, table=table, columns=tuple(columns), primary_key=key)

    def _refuse_renamed_away(self, conn: sqlite3.Connection, table: str, where: str) -> None:
        """Raise when the missing ``table`` was renamed: its capture triggers moved with it to the table it is now."""
        homes = _trigger_homes(conn)
        moved = sorted({homes[n] for n in self._trigger_names(table).values() if n in homes})
        if not moved:
            return
        raise ConfigError(
            f"{where}.name",
            f"table {table!r} does not exist in {self.config.path}: it was renamed to {moved[0]!r} (the capture "
            f"triggers of {table} moved with it), and no table {table!r} was created again",
            f"rename it back (ALTER TABLE {quote_sqlite(moved[0])} RENAME TO {quote_sqlite(table)}): the changes made "
            f"to it meanwhile are then captured as {table}'s; or, to capture it under its new name, set {where}.name "
            f"to {moved[0]} (its snapshot is then read afresh)",
        )

    @staticmethod
    def _unique_sets(conn: sqlite3.Connection, table: str, info: list[Any]) -> list[set[str]]:
        """The declared primary key and every UNIQUE index, as column sets."""
        sets = [{row[1] for row in info if row[5]}]
        for index in conn.execute(f"PRAGMA index_list({quote_sqlite(table)})").fetchall():
            if index[2]:  # unique
                sets.append({r[2] for r in conn.execute(f"PRAGMA index_info({quote_sqlite(index[1])})")
                             if r[2] is not None})
        return sets

    # -- install / verify --------------------------------------------------------------

    def _trigger_names(self, table: str) -> dict[str, str]:
        return {f"trg_{kind}": f"_databus_{table}_{kind}" for kind in ("insert", "update", "rekey", "delete")}

    def _render_triggers(self, schema: TableSchema, rowid_key: str | None) -> str:
        """The table's triggers; ``rowid_key`` names its INTEGER PRIMARY KEY rowid alias, if it has one."""
        key = [schema.column(k) for k in schema.primary_key]
        # Binary-exact: under the column's own collation (NOCASE, RTRIM, ...) 'a' and 'A' may be equal, but the
        # snapshot's keys are the stored values, so a change of case is a new key (a delete and an insert).
        unchanged = " AND ".join(f"OLD.{quote_sqlite(k)} IS NEW.{quote_sqlite(k)} COLLATE BINARY"
                                 for k in schema.primary_key)
        names = {k: quote_sqlite(v) for k, v in self._trigger_names(schema.table).items()}
        return sqlfiles.render(
            "sqlite", "table_triggers.sql", table=quote_sqlite(schema.table),
            table_literal=quote_literal(schema.table), new_row=_image("NEW", schema.columns, rowid_key),
            old_key=_image("OLD", key, rowid_key),
            key_names=", ".join([*(quote_sqlite(k) for k in schema.primary_key),
                                 *(("rowid", "_rowid_", "oid") if rowid_key is not None else ())]),
            key_unchanged=unchanged, now_ms=NOW_MS, **names,
        )

    def _wanted_triggers(self, conn: sqlite3.Connection, schema: TableSchema) -> tuple[str, set[str]]:
        """The table's trigger script and the CREATE TRIGGER statements in it."""
        script = self._render_triggers(schema, _rowid_alias(conn, schema.table))
        return script, {stmt for stmt in _split(script) if stmt.upper().startswith("CREATE TRIGGER")}

    def install(self) -> InstallReport:
        """Create or update the capture objects in one write transaction. A version 2 install is
        converted in place; a table whose columns changed (or whose triggers went missing, or moved to a table
        it was renamed to) since its triggers were rendered gets a drift range over the changes that may be
        wrong, then new triggers."""
        schemas = self.preflight()
        changed, unchanged = [], []
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                existing_sql = self._trigger_sql(conn)
                migrate = "epoch" in (c[0] for c in _shape(conn, "_databus_txlog"))
                if migrate:
                    for statement in _split(sqlfiles.load("sqlite", "migrate_v2.sql")):
                        conn.execute(statement)
                core = sqlfiles.render("sqlite", "install.sql", epoch_id=uuid.uuid4().hex,
                                       version=CAPTURE_VERSION)
                for statement in _split(core):
                    conn.execute(statement)
                self._require_owner(conn)  # again, holding the write lock
                conn.execute(sqlfiles.load("sqlite", "set_owner.sql"), {"source": self.name})
                if migrate:
                    for statement in _split(sqlfiles.load("sqlite", "migrate_v2_rows.sql")):
                        conn.execute(statement)
                changes = {c.table: c for c in self._note_changes(conn, schemas)}
                for table, schema in schemas.items():
                    script, wanted = self._wanted_triggers(conn, schema)
                    if wanted != {existing_sql.get(name) for name in self._trigger_names(table).values()}:
                        for statement in _split(script):
                            conn.execute(statement)
                        changed.append(table)
                    else:
                        unchanged.append(table)
                    conn.execute(sqlfiles.load("sqlite", "set_shape.sql"),
                                 {"tbl": table, "columns": json.dumps(_shape(conn, table, _carried(schema)))})
                    change = changes.get(table)
                    if (change is not None and change.reason == "columns" and change.through > change.after
                            and self.config.schema_policy(table) != "stop" and not self._repair(conn, schema, change)):
                        self._note_unrepaired(conn, change)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            epoch = self._settings(conn)["epoch_id"]
        return InstallReport(epoch=epoch, version=CAPTURE_VERSION, changed=tuple(changed),
                             unchanged=tuple(unchanged))

    def _note_changes(self, conn: sqlite3.Connection, schemas: Mapping[str, TableSchema]) -> list[_Change]:
        """Holding the write lock (install, before it renders triggers): for each captured table whose columns
        differ from those its triggers were rendered for, or whose triggers are missing or attached to another
        table (renamed away), a marker row placing the change in the stream and a drift range over the changes
        since the last check, which old triggers may have written wrong (or, triggers missing, not at all; or,
        moved, for the other table: those are dropped). The check moves to the newest SCN."""
        checked = int(self._settings(conn).get("checked_scn", "0"))
        shapes = _shapes(conn)
        hwm = conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0]
        changes = []
        for table, stale in self._stale(conn, schemas, shapes).items():
            if table not in shapes:
                continue  # never captured here: nothing to compare with
            reason = "columns" if stale.reason == "columns" else "triggers"
            statement = _describe_stale(table, stale, shapes[table], checked)
            marker = conn.execute(sqlfiles.load("sqlite", "mark_change.sql"), {
                "tbl": table, "change": json.dumps({"statement": statement, "reason": reason})}).fetchone()[0]
            if stale.reason == "moved":
                # The changes logged under the table's name since the last check may be the renamed table's:
                # none of them may reach this table's snapshot (it is read again instead).
                conn.execute(sqlfiles.load("sqlite", "drop_moved.sql"),
                             {"tbl": table, "after_scn": checked, "marker_scn": marker})
            conn.execute(sqlfiles.load("sqlite", "record_drift.sql"), {
                "tbl": table, "after_scn": checked, "through_scn": marker, "columns": json.dumps(stale.now),
                "reason": reason})
            changes.append(_Change(table, checked, hwm, reason, shapes[table]))
        conn.execute(sqlfiles.load("sqlite", "set_checked.sql"), {"scn": hwm})
        return changes

    def _stale(self, conn: sqlite3.Connection, schemas: Mapping[str, TableSchema],
               shapes: Mapping[str, Any]) -> dict[str, _Stale]:
        """The captured tables whose triggers are attached to another table (it was renamed, and a table of its
        name created again: the triggers moved with the renamed one), missing (dropped with the table), or
        whose columns are not those (``shapes``) the triggers were rendered for (a table without a recorded
        shape counts as changed)."""
        homes = _trigger_homes(conn)
        stale = {}
        for table, schema in schemas.items():
            now = _shape(conn, table, _carried(schema))
            names = self._trigger_names(table).values()
            elsewhere = sorted({homes[n] for n in names if n in homes and homes[n].lower() != table.lower()})
            if elsewhere:
                stale[table] = _Stale("moved", now, elsewhere[0])
            elif any(name not in homes for name in names):
                stale[table] = _Stale("missing", now)
            elif table not in shapes or _names_and_types(shapes[table]) != _names_and_types(now):
                stale[table] = _Stale("columns", now)
        return stale

    def _repair(self, conn: sqlite3.Connection, schema: TableSchema, change: _Change) -> bool:
        """After new triggers: each key the changes in the drift range touched, written again as the table
        holds it now (``repair_rows.sql``). False when the key cannot be matched in the old images (a key
        column renamed, or one whose images tag its values): the table must then be read again."""
        old_names = {c[0] for c in change.before}
        if any(k not in old_names or _tagged_affinity(schema.column(k).source_type) for k in schema.primary_key):
            return False
        rowid = _rowid_alias(conn, schema.table)
        image = _image("cur", schema.columns, rowid)
        script = sqlfiles.render(
            "sqlite", "repair_rows.sql", table=quote_sqlite(schema.table), table_literal=quote_literal(schema.table),
            image=image, now_ms=NOW_MS,
            key=", ".join(f"cur.{quote_sqlite(k)} COLLATE BINARY" for k in schema.primary_key),
            extracted=", ".join(f"json_extract(row, '$.{k}')" for k in schema.primary_key),
            extracted_t=", ".join(f"json_extract(t.row, '$.{k}')" for k in schema.primary_key))
        for statement in _split(script):
            conn.execute(statement, {"after_scn": change.after, "through_scn": change.through})
        return True

    def _require_current(self, conn: sqlite3.Connection, schemas: Mapping[str, TableSchema]) -> None:
        """Holding the poll's write lock: every captured table still has the triggers and columns install
        rendered them for (install checked just before; this closes the gap), so the check moves up. The
        database is still this source's."""
        self._require_owner(conn)
        stale = self._stale(conn, schemas, _shapes(conn))
        if stale:
            raise self._install_error([_moved_problem(table, found.moved_to) if found.moved_to else
                                       f"table {table}: its columns or triggers changed while capture started"
                                       for table, found in stale.items()])
        hwm = conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0]
        conn.execute(sqlfiles.load("sqlite", "set_checked.sql"), {"scn": hwm})

    def uninstall(self) -> None:
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            for table in self.config.tables:
                names = {k: quote_sqlite(v) for k, v in self._trigger_names(table.name).items()}
                for statement in _split(sqlfiles.render("sqlite", "uninstall_table.sql", **names)):
                    conn.execute(statement)
            for statement in _split(sqlfiles.load("sqlite", "uninstall.sql")):
                conn.execute(statement)
            conn.execute("COMMIT")

    @staticmethod
    def _trigger_sql(conn: sqlite3.Connection) -> dict[str, str]:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
        return {name: (sql or "").strip() for name, sql in rows}

    @staticmethod
    def _settings(conn: sqlite3.Connection) -> dict[str, str]:
        return dict(conn.execute("SELECT name, value FROM _databus_settings").fetchall())

    def installed(self) -> bool:
        with closing(self._connect()) as conn:
            return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (CORE_TABLES[0],)).fetchone() is not None

    def verify(self) -> list[str]:
        schemas = self.preflight()
        problems: list[str] = []
        with closing(self._connect()) as conn:
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            problems += [f"capture table {t} is missing" for t in CORE_TABLES if t not in present]
            triggers = self._trigger_sql(conn)
            homes = _trigger_homes(conn)
            for table, schema in schemas.items():
                _, wanted = self._wanted_triggers(conn, schema)
                names = list(self._trigger_names(table).values())
                missing = [n for n in names if n not in triggers]
                elsewhere = sorted({homes[n] for n in names if n in homes and homes[n].lower() != table.lower()})
                if elsewhere:
                    problems.append(_moved_problem(table, elsewhere[0]))
                elif missing:
                    problems.append(f"table {table}: trigger(s) {', '.join(missing)} missing")
                elif {triggers[n] for n in names} != wanted:
                    problems.append(f"table {table}: triggers are out of date with the table's columns")
        return problems

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (SQLite allows it in a PRIMARY KEY
        that is not an INTEGER PRIMARY KEY, and in UNIQUE columns)."""
        problems = []
        with closing(self._connect()) as conn:
            for schema in self.schemas().values():
                query = null_key_query(quote_sqlite(schema.table), [quote_sqlite(k) for k in schema.primary_key])
                problem = null_key_problem(schema, conn.execute(query + " LIMIT 1").fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def notes(self) -> list[str]:
        """What ``databus validate`` (its only caller: a scan of every captured table is too slow for the checks
        of every sync) says of the source beyond its capture objects. It looks for what capture and the bootstrap
        would refuse: text that is not UTF-8 in the columns read as text (every captured table scanned once)
        and in the changes the txlog holds, and raises ``SchemaMismatchError`` naming each table, column and key."""
        schemas = self.schemas()
        refused: list[SchemaMismatchError] = []
        with closing(self._connect()) as conn:
            for schema in schemas.values():
                row = first_invalid_row(conn, schema)
                if row is not None:
                    column, key, raw = row
                    refused.append(invalid_text_error(schema, column, raw, f"the row of key {key}"))
            change = first_invalid_change(conn, list(schemas))
            if change is not None:
                error = change_error(schemas[change[1]], change[0], change[2])
                refused += [error] if error is not None else []
        if refused:
            raise SchemaMismatchError("; ".join(e.problem for e in refused), refused[0].fix, source=self.name)
        return [f"text is valid UTF-8 in the {len(schemas)} captured table(s) and in the txlog"]

    def require_installed(self) -> None:
        require_installed(self, self._install_error)

    def _install_error(self, problems: Sequence[str]) -> CaptureNotInstalledError:
        return not_installed(
            f"capture is not installed correctly in source {self.name!r} ({self.config.path}):", problems,
            f"materialize the '{self.name}/capture' asset (or run `databus install --source {self.name}`) "
            "to install or update the txlog and triggers")

    @staticmethod
    def _note_unrepaired(conn: sqlite3.Connection, change: _Change) -> None:
        """The marker says the stale changes were not repaired, so the schema_changes policy reads the table again."""
        conn.execute(sqlfiles.load("sqlite", "mark_unrepaired.sql"), {"tbl": change.table, "after_scn": change.after})

    def epoch(self) -> str:
        with closing(self._connect()) as conn:
            try:
                return self._settings(conn)["epoch_id"]
            except sqlite3.OperationalError:
                self.require_installed()
                raise

    def high_water_mark(self) -> Scn:
        with closing(self._connect()) as conn:
            return Scn(conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0])

    # -- polling -----------------------------------------------------------------------

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        # Every change since install is in the txlog; a gap check guards pruned ranges.
        return Scn.BEGINNING, {}

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[ChangeBatch]:
        schemas = self.schemas()
        chunk_rows = self.config.poll.chunk_rows
        with closing(self._connect()) as conn:
            settings = self._settings(conn)
            self._check_lineage(settings, since, epoch, conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(sqlfiles.load("sqlite", "cut.sql"))
                self._require_current(conn, schemas)
                cut = conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0]
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

    def _refuse_drift(self, conn: sqlite3.Connection, tables: Sequence[str], since: Scn, until: Scn) -> None:
        """Raise for the first change of ``tables`` (those whose schema_changes policy is stop) in (since, until]
        that a drift range covers. Other tables' stale changes go on into the log: install wrote their
        repairs after them, and the marker between makes the merge apply the policy."""
        if not tables:
            return
        first = conn.execute(sqlfiles.load("sqlite", "first_stale.sql"), {
            "since_scn": since.value, "until_scn": until.value, "tables": json.dumps(list(tables))}).fetchone()
        if first is not None:
            raise self._stale_error(first[0], first[1], first[3], first[4])

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

    def _check_lineage(self, settings: dict[str, str], since: Scn, epoch: str | None,
                       conn: sqlite3.Connection) -> None:
        if epoch is not None and not Position(epoch, since).same_epoch(Position(settings["epoch_id"], since)):
            raise EpochMismatchError(
                f"source {self.name!r} ({self.config.path}) has capture epoch {settings['epoch_id']} but the "
                f"change log's checkpoint belongs to epoch {epoch}: the database was replaced, restored or its "
                "capture objects were re-installed, so positions cannot be compared",
                f"run `databus bootstrap --source {self.name}`: it sets the source's change log and snapshots "
                "aside and starts them afresh from the source's current position",
                source=self.name,
            )
        hwm = Scn(conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0])
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

    def _stale_error(self, table: str, scn: int, reason: str, statement: str | None = None) -> SchemaDriftError:
        problem = (f"table {table!r} of source {self.name!r} changed its columns while its capture triggers "
                   f"still had the old ones: the change at SCN {scn} (and any after it until the triggers were "
                   "re-installed) may lack the new columns" if reason == "columns" else
                   f"the capture triggers of table {table!r} of source {self.name!r} were missing until install "
                   f"put them back (SCN {scn}): the table's changes meanwhile never reached the txlog")
        if reason == "triggers" and statement and statement.startswith("RENAME TABLE"):
            problem += f" ({statement})"
        return SchemaDriftError(
            problem,
            f"re-install capture (materialize '{self.name}/capture'), then run "
            f"`databus bootstrap --source {self.name}` so the snapshots are read afresh from the source",
            source=self.name, table=table, scn=scn,
        )

    # -- bootstrap ---------------------------------------------------------------------

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS) -> RangeRead:
        """Key ranges each read in its own read transaction with the txlog high-water mark it sees."""
        schema = self.schemas()[table]
        with closing(self._connect()) as conn, naming_invalid_text(conn, schema, f"bootstrap of {table}"):
            ranges = key_ranges(conn, table, schema.primary_key, rows_per_range, rows, schema.column_names)
        spec = {"path": str(Path(self.config.path).resolve()), "busy_timeout_s": self.config.busy_timeout_ms / 1000,
                "page_rows": min(rows_per_range, 10_000)}
        return RangeRead("sqlite", self.name, schema, spec, ranges, scn=None, where=rows.where)

    def check_selection(self, table: str, rows: RowSelection) -> None:
        with closing(self._connect()) as conn:
            schema = self.schemas()[table]
            check_selection(conn, table, schema.primary_key, rows, schema.column_names)

    def snapshot(self, table: str, batch_rows: int | None = None) -> TableSnapshot:
        batch_rows = batch_rows or 50_000
        schema = self.schemas()[table]
        conn = self._connect()
        # One read transaction: the txlog high-water mark and the table's rows come from
        # the same database state, so the snapshot is exactly the source at that SCN.
        conn.execute("BEGIN")
        scn = Scn(conn.execute(sqlfiles.load("sqlite", "high_water_mark.sql")).fetchone()[0])
        columns = ", ".join(read_expression(c) for c in schema.columns)
        order = ", ".join(quote_sqlite(k) for k in schema.primary_key)
        cursor = conn.execute(f"SELECT {columns} FROM {quote_sqlite(table)} ORDER BY {order}")
        convert = schema.batch(sqlite_value, f"bootstrap of {table}")

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                while rows := cursor.fetchmany(batch_rows):
                    yield convert(rows)
            finally:
                conn.execute("COMMIT")
                conn.close()

        return TableSnapshot(scn=scn, schema=schema,
                             batches=named_invalid_text(batches(), schema, f"bootstrap of {table}", self._connect))

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return streamed_fingerprint(self.snapshot(table), progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        return in_buckets(self.snapshot(table), buckets)

    def reading(self) -> AbstractContextManager[None]:
        """Two polls of one txlog do not disturb each other; the change log's commit fences the loser."""
        return nullcontext()

    def release(self, through: Scn) -> None:
        if not self.config.prune_txlog or through.is_beginning:
            return
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            for statement in _split(sqlfiles.load("sqlite", "prune.sql")):
                conn.execute(statement, {"through_scn": through.value})
            conn.execute("COMMIT")



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


def _image(alias: str, columns: Sequence[Column], rowid_key: str | None) -> str:
    """The arguments of ``json_object`` for a row image of ``columns`` (``_image_value`` each)."""
    return ", ".join(f"{quote_literal(c.name)}, {_image_value(alias, c, rowid_key)}" for c in columns)


def _image_value(alias: str, column: Column, rowid_key: str | None) -> str:
    """The column's value in a row image: as it is, but a BLOB as {"$b": hex} (JSON cannot hold one, and the
    application's write must not fail) and a REAL as {"$r": exact text} where the affinity can store one."""
    ref = f"{alias}.{quote_sqlite(column.name)}"
    if column.name == rowid_key:  # always an integer: SQLite refuses anything else
        return ref
    blob = f"WHEN 'blob' THEN json_object('$b', hex({ref}))"
    if carried_as_bytes(column):  # text too, so bytes that are not UTF-8 arrive exactly
        blob = f"WHEN 'blob' THEN json_object('$b', hex({ref})) WHEN 'text' THEN json_object('$b', hex({ref}))"
    if not _tagged_affinity(column.source_type):
        return f"CASE typeof({ref}) {blob} ELSE {ref} END"
    real = f"WHEN 'real' THEN json_object('$r', printf('%!.20e', {ref}))"
    return f"CASE typeof({ref}) {blob} {real} ELSE {ref} END"


def _tagged_affinity(declared: str) -> bool:
    """Whether the images tag this column's REALs: not for TEXT affinity (stores no REAL), nor INTEGER (stores
    one only if it is not a whole number, which a long column refuses whatever its digits)."""
    upper = declared.upper()
    return "INT" not in upper and not any(a in upper for a in _TEXT_AFFINITY)


@dataclass(frozen=True, slots=True)
class _Stale:
    """Why a captured table's triggers no longer match it: ``columns`` changed, triggers ``missing`` (dropped
    with the table), or ``moved`` with the table when it was renamed (to ``moved_to``) and created again."""

    reason: str  # columns | missing | moved
    now: list[list[Any]]  # the table's columns now (``_shape``)
    moved_to: str | None = None


def _describe_stale(table: str, stale: _Stale, before: Sequence[Sequence[Any]], checked: int) -> str:
    """The marker's statement for a stale table: what a DDL record holds and ``snapshot.evolve`` reads (a rename
    or missing triggers are never evolved in place: the table is read again)."""
    if stale.reason == "moved":
        return (f"RENAME TABLE {table} TO {stale.moved_to}: {table} was renamed to {stale.moved_to!r} and created "
                f"again; the capture triggers of {table} were missing from the new table (they had moved with "
                f"{stale.moved_to}), so its changes were never captured, and the changes logged for {table} after "
                f"SCN {checked}, which may be {stale.moved_to}'s, were dropped")
    if stale.reason == "missing":
        return f"capture triggers of {table} were missing: changes made meanwhile were never captured"
    return _describe_change(table, before, stale.now)


def _moved_problem(table: str, moved_to: str) -> str:
    return (f"table {table}: its capture triggers are attached to table {moved_to}: {table} was renamed to "
            f"{moved_to!r} and created again, and changes of {moved_to} are logged as {table}'s. Install moves the "
            f"triggers back to {table}, drops what they logged since the last check, and the table's schema_changes "
            "policy has it read again (or stops)")


def _trigger_homes(conn: sqlite3.Connection) -> dict[str, str]:
    """Each trigger's name with the table it is attached to (a rename of the table takes its triggers along)."""
    return dict(conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'").fetchall())


@dataclass(frozen=True, slots=True)
class _Change:
    """A captured table's columns (or triggers) found changed by install: stale changes in (after, through]."""

    table: str
    after: int
    through: int
    reason: str  # columns | triggers
    before: list[list[Any]]  # the shape the old triggers were rendered for


def _names_and_types(shape: Sequence[Sequence[Any]]) -> list[tuple[str, str, str]]:
    return [(c[0], c[1], _carried_form(c)) for c in shape]


def _carried_form(column: Sequence[Any]) -> str:
    """How a shape's column travels: "bytes" for text carried as binary (``invalid_utf8: binary``), else ""."""
    return str(column[4]) if len(column) > 4 else ""


def _carried(schema: TableSchema) -> frozenset[str]:
    return frozenset(c.name for c in schema.columns if carried_as_bytes(c))


def _describe_change(table: str, before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]) -> str:
    """The change as the ALTER statements that make ``after`` of ``before`` (SQLite reports no DDL): what a
    DDL record holds and ``snapshot.evolve`` reads."""
    parts = []
    for i in range(max(len(before), len(after))):
        old, new = (before[i] if i < len(before) else None), (after[i] if i < len(after) else None)
        if old is not None and new is not None and old[0] != new[0]:
            parts.append(f"RENAME COLUMN {old[0]} TO {new[0]}")
        elif old is not None and new is not None and old[1] != new[1]:
            parts.append(f"CHANGE COLUMN {old[0]} {old[1]} TO {new[1]}")
        elif old is not None and new is not None and _carried_form(old) != _carried_form(new):
            form = "BINARY" if _carried_form(new) else "TEXT"  # invalid_utf8 changed: the values' type did
            parts.append(f"CHANGE COLUMN {old[0]} {old[1]} TO {new[1]} CARRIED AS {form}")
        elif new is None and old is not None:
            parts.append(f"DROP COLUMN {old[0]}")
        elif old is None and new is not None:
            extra = (" NOT NULL" if len(new) > 2 and new[2] else "") + (
                f" DEFAULT {new[3]}" if len(new) > 3 and new[3] is not None and str(new[3]).upper() != "NULL" else "")
            parts.append(f"ADD COLUMN {new[0]} {new[1]}{extra}")
    return f"ALTER TABLE {table} " + ", ".join(parts)


def _shapes(conn: sqlite3.Connection) -> dict[str, list[list[Any]]]:
    """Each table's columns as its triggers were last rendered for them (``_shape``), from ``_databus_shapes``."""
    return {t: json.loads(c) for t, c in conn.execute("SELECT tbl, columns FROM _databus_shapes").fetchall()}


def _shape(conn: sqlite3.Connection, table: str, carried: frozenset[str] = frozenset()) -> list[list[Any]]:
    """The table's columns as [name, declared type, not null, default] in column order: what its triggers
    depend on (name and type) and what an added column gives existing rows; a column ``carried`` as bytes
    (``invalid_utf8: binary``) has a fifth entry, "bytes", since its triggers and its type differ."""
    return [[row[1], row[2] or "", row[3], row[4], *(["bytes"] if row[1] in carried else [])]
            for row in conn.execute(f"PRAGMA table_info({quote_sqlite(table)})")]


def _rowid_alias(conn: sqlite3.Connection, table: str) -> str | None:
    """The table's INTEGER PRIMARY KEY column when it is the rowid (which only ever holds an integer)."""
    keys = [row for row in conn.execute(f"PRAGMA table_info({quote_sqlite(table)})") if row[5]]
    listed = conn.execute("SELECT wr FROM pragma_table_list WHERE name = ? AND schema = 'main'", (table,)).fetchone()
    if len(keys) == 1 and (keys[0][2] or "").upper() == "INTEGER" and listed is not None and not listed[0]:
        return str(keys[0][1])
    return None


def _split(script: str) -> list[str]:
    """Statements of a script, keeping trigger bodies (which contain ';') whole."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        stripped = line.strip()
        if not buffer and (not stripped or stripped.startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip().rstrip(";").strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
