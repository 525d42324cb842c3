"""Oracle capture: Databus's trigger + ``sy$txlog`` design, with python-oracledb (thin mode).

Install applies ``sql/oracle/`` idempotently: a CREATE whose object exists is skipped (checked in
the data dictionary), code units are CREATE OR REPLACE, and a hash of everything rendered is
kept in ``sync_core_settings`` so an unchanged re-install does nothing at all. A poll takes the
database SCN at its start as its bound, finds chunk ends over ``sy$txlog`` (whole transactions),
and reads each table's ``sy$<table>`` view and delete-shadow table with Databus for Oracle's query shape.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from functools import partial
from typing import Any

from dagster_databus.config import OracleSourceConfig
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Position, Scn
from dagster_databus.errors import (
    CaptureNotInstalledError,
    ConfigError,
    EpochMismatchError,
    SourceUnavailableError,
)
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.base import (
    ALL_KEYS,
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
from dagster_databus.sources.oracle.bootstrap import check_selection, key_ranges, pages_as_of
from dagster_databus.sources.oracle.sql import (
    CORE_SCRIPTS,
    Statement,
    TableObjects,
    install_scripts,
    poll_query,
    quote,
    split_script,
)
from dagster_databus.sources.oracle.types import (
    oracle_column_type,
    oracle_declared,
    oracle_value,
    output_type_handler,
    select_expression,
)

CAPTURE_VERSION = "1"
CORE_OBJECTS = (("SEQUENCE", "SY$SCN_SEQ"), ("TABLE", "SYNC_CORE_SETTINGS"), ("TABLE", "SY$SOURCES"),
                ("TABLE", "SY$TXLOG"), ("PACKAGE", "SYNC_CORE"), ("PACKAGE BODY", "SYNC_CORE"),
                ("PACKAGE", "SYNC_ALERT"), ("PACKAGE BODY", "SYNC_ALERT"))
JOBS = ("J_COALESCE_LOG", "J_CALL_SIGNAL")
MAX_SOURCES = 126  # sy$txlog.mask is a NUMBER: 38 digits hold bits 0..125
_NO_SUCH_TABLE = 942  # ORA-00942: table or view does not exist


class OracleSource:
    kind = "oracle"
    sees_ddl = False
    install_repairs = True  # verify's problems are the capture objects, which install creates or updates

    def __init__(self, config: OracleSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self._schemas: dict[str, TableSchema] | None = None
        self._actual: dict[str, str] = {}  # config table name -> name in the data dictionary
        self._columns: dict[str, dict[str, str]] = {}  # config table -> {snapshot column: dictionary column}

    def _field(self, suffix: str) -> str:
        return f"sources.{self.name}.{suffix}"

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> Any:
        import oracledb

        c = self.config
        try:
            conn = oracledb.connect(user=c.user, password=c.resolved_password(), dsn=c.dsn,
                                    tcp_connect_timeout=c.connect_timeout_s)
        except oracledb.Error as exc:
            text = str(exc)
            if "ORA-01017" in text:
                raise ConfigError(self._field("password"), f"invalid username/password for {c.user!r} at {c.dsn}",
                                  "correct user and password (or password_env)") from None
            raise SourceUnavailableError(f"cannot reach Oracle source {self.name!r} at {c.dsn}: {text}",
                                         "check the dsn (host:port/service), the listener and the network",
                                         source=self.name) from None
        conn.outputtypehandler = output_type_handler  # NUMBER as Decimal, LOBs inline: exact values
        return conn

    # -- preflight ---------------------------------------------------------------------

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            self._schemas = table_schemas(self.config.tables, partial(self._table_schema, cur))
        return self._schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def _out(self, name: str) -> str:
        return name.lower() if self.config.lowercase_names else name

    def _table_schema(self, cur: Any, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        where = self._field(f"tables[{index}]")
        cur.execute("SELECT table_name FROM user_tables WHERE table_name = :t OR "
                    "(UPPER(table_name) = UPPER(:t) AND NOT EXISTS (SELECT 1 FROM user_tables WHERE table_name = :t))",
                    t=table)
        row = cur.fetchone()
        if row is None:
            cur.execute("SELECT table_name FROM user_tables WHERE table_name NOT LIKE 'SY$%' ORDER BY 1")
            existing = ", ".join(r[0] for r in cur.fetchall()) or "(none)"
            raise ConfigError(f"{where}.name", f"table {table!r} does not exist in schema {self.config.user!r}",
                              f"use one of the schema's tables: {existing}")
        actual = row[0]
        self._actual[table] = actual
        cur.execute("SELECT column_name, data_type, data_precision, data_scale FROM user_tab_columns "
                    "WHERE table_name = :t AND column_name <> 'TXN' ORDER BY column_id", t=actual)
        columns, mapping, unmapped = [], {}, []
        for name, data_type, precision, scale in cur.fetchall():
            out = self._out(name)
            check_column_name(out, table, where)
            declared = oracle_declared(data_type, precision, scale)
            ctype = oracle_column_type(declared)
            if ctype is None:
                unmapped.append(f"{name} {declared}")
                continue
            mapping[out] = name
            columns.append(Column(name=out, type=ctype, source_type=declared))
        require_mapped(self.name, table, unmapped, "Oracle", "change the column to a mapped type")
        self._columns[table] = mapping
        key = resolve_key(columns, key, table, where)
        cur.execute("SELECT c.constraint_name, cc.column_name FROM user_constraints c JOIN user_cons_columns cc "
                    "ON cc.constraint_name = c.constraint_name WHERE c.table_name = :t AND c.constraint_type IN "
                    "('P', 'U')", t=actual)
        reverse = {v: k for k, v in mapping.items()}
        unique: dict[str, set[str]] = {}
        for constraint, column in cur.fetchall():
            unique.setdefault(constraint, set()).add(reverse.get(column, column))
        require_unique_key(key, unique.values(), table, where)
        return TableSchema(source=self.name, table=table, columns=tuple(columns), primary_key=key)

    # -- install / verify / uninstall --------------------------------------------------

    def _objects(self, table: str) -> TableObjects:
        schema = self.schemas()[table]
        mapping = self._columns[table]
        return TableObjects(table=self._actual[table], source=self.name,
                            key=tuple(mapping[k] for k in schema.primary_key),
                            columns=tuple(mapping[c.name] for c in schema.columns))

    def rendered(self) -> list[tuple[str, list[Statement]]]:
        """Every script of the install, rendered, in order: (script, statements)."""
        return install_scripts({table: self._objects(table) for table in self.schemas()})

    def install(self) -> InstallReport:
        scripts = self.rendered()
        digest = hashlib.sha256("\n".join(s.text for _, st in scripts for s in st).encode()).hexdigest()
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            settings = self._settings(cur)
            if settings and settings.get("install_hash") == digest and not self._problems(cur):
                return InstallReport(epoch=self._epoch(cur, settings), version=CAPTURE_VERSION, changed=(),
                                     unchanged=tuple(self.schemas()))
            core, tables = scripts[: len(CORE_SCRIPTS)], scripts[len(CORE_SCRIPTS):]
            for _, statements in core[:1]:
                self._apply(cur, statements)
            self._register_source(cur)
            for _, statements in [*core[1:], *tables]:
                self._apply(cur, statements)
            cur.execute("SELECT COUNT(*) FROM sync_core_settings")
            if cur.fetchone()[0] == 0:
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
            return InstallReport(epoch=self._epoch(cur, self._settings(cur)), version=CAPTURE_VERSION,
                                 changed=tuple(self.schemas()), unchanged=())

    def _apply(self, cur: Any, statements: list[Statement]) -> None:
        for statement in statements:
            if self._already_there(cur, statement):
                continue
            cur.execute(statement.text)

    def _already_there(self, cur: Any, statement: Statement) -> bool:
        if statement.creates and statement.creates[0] in ("TABLE", "SEQUENCE", "INDEX"):
            kind, name = statement.creates
            cur.execute("SELECT COUNT(*) FROM user_objects WHERE object_type = :k AND object_name = :n", k=kind, n=name)
            return cur.fetchone()[0] > 0
        if statement.adds_column:
            table, column = statement.adds_column
            cur.execute("SELECT COUNT(*) FROM user_tab_columns WHERE table_name = :t AND column_name = :c",
                        t=table, c=column)
            return cur.fetchone()[0] > 0
        if statement.drops:
            kind, name = statement.drops
            cur.execute("SELECT COUNT(*) FROM user_objects WHERE object_type = :k AND object_name = :n", k=kind, n=name)
            return cur.fetchone()[0] == 0
        if statement.drops_column:
            table, column = statement.drops_column
            cur.execute("SELECT COUNT(*) FROM user_tab_columns WHERE table_name = :t AND column_name = :c",
                        t=table, c=column)
            return cur.fetchone()[0] == 0
        return False

    def _register_source(self, cur: Any) -> None:
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

    def _settings(self, cur: Any) -> dict[str, str]:
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

    def _problems(self, cur: Any) -> list[str]:
        problems = []
        cur.execute("SELECT object_type, object_name, status FROM user_objects")
        objects = {(t, n): s for t, n, s in cur.fetchall()}
        expected = list(CORE_OBJECTS)
        for table in self.schemas():
            values = self._objects(table).values
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
            if cur.fetchone()[0] == 0:
                problems.append(f"source {self.name} is not registered in sy$sources")
        return problems

    def installed(self) -> bool:
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            cur.execute("SELECT COUNT(*) FROM user_tables WHERE table_name = 'SY$TXLOG'")
            return bool(cur.fetchone()[0])

    def verify(self) -> list[str]:
        self.preflight()
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            return self._problems(cur)

    def require_installed(self) -> None:
        require_installed(self, lambda problems: not_installed(
            f"capture is not installed correctly in Oracle source {self.name!r}:", problems,
            f"materialize the '{self.name}/capture' asset to install or repair the objects", source=self.name))

    def uninstall(self) -> None:
        """Remove everything install created for this source's tables, then the core objects."""
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            for table in self.schemas():
                self._apply(cur, split_script(self._objects(table).render("uninstall/01_table.sql")))
            cur.execute("DELETE FROM sy$sources WHERE name = :n", n=self.name)
            cur.execute("SELECT COUNT(*) FROM sy$sources")
            remaining = cur.fetchone()[0]
            conn.commit()
            if remaining == 0:  # other sources still use the core objects otherwise
                self._apply(cur, split_script(sqlfiles.load("oracle", "uninstall/02_core.sql")))

    # -- positions ---------------------------------------------------------------------

    def _epoch(self, cur: Any, settings: Mapping[str, str]) -> str:
        cur.execute("SELECT SYS_CONTEXT('USERENV', 'DB_NAME') FROM dual")
        return f"{cur.fetchone()[0]}:{settings.get('epoch_id')}"

    def epoch(self) -> str:
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            return self._epoch(cur, self._settings(cur))

    def _current_scn(self, cur: Any) -> Scn:
        cur.execute("SELECT DBMS_FLASHBACK.GET_SYSTEM_CHANGE_NUMBER FROM dual")
        return Scn(int(cur.fetchone()[0]))

    def high_water_mark(self) -> Scn:
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            return self._current_scn(cur)

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        return Scn.BEGINNING, {}  # every change since install is in sy$txlog

    # -- polling -----------------------------------------------------------------------

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[list[Window]]:
        schemas = self.schemas()
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            current = self._epoch(cur, self._settings(cur))
            if epoch is not None and not Position(epoch, since).same_epoch(Position(current, since)):
                raise EpochMismatchError(
                    f"Oracle source {self.name!r} is now epoch {current}, the change log's checkpoint is {epoch}: "
                    "the capture objects were re-installed or the database replaced",
                    f"run `databus bootstrap --source {self.name}`", source=self.name)
            cur.execute("SELECT bitnum FROM sy$sources WHERE name = :n", n=self.name)
            mask = 2 ** int(cur.fetchone()[0])
            until = self._current_scn(cur)
            stats.source_hwm = until
            chunk_end_sql = sqlfiles.load("oracle", "poll/chunk_end.sql")
            while True:
                cur.execute(chunk_end_sql, sinceScn=since.value, sourceMask=mask, untilScn=until.value,
                            rowsPerChunk=self.config.poll.chunk_rows)
                end, transactions = cur.fetchone()
                if not transactions:
                    break
                end_scn = Scn(int(end))
                windows = self._read_chunk(cur, schemas, since, end_scn)
                since = end_scn
                stats.until = end_scn
                stats.chunks += 1
                if windows:
                    yield windows

    def _select_list(self, table: str, names: Sequence[str], alias: str = "") -> str:
        """Exact-value SELECT expressions (``oracle.types.select_expression``) of ``names``, over ``alias``."""
        schema, mapping = self.schemas()[table], self._columns[table]
        prefix = f"{alias}." if alias else ""
        return ", ".join(select_expression(prefix + quote(mapping[n]), schema.column(n).source_type, quote(mapping[n]))
                         for n in names)

    def _read_chunk(self, cur: Any, schemas: Mapping[str, TableSchema], since: Scn, end: Scn) -> list[Window]:
        by_scn: dict[int, list[tuple[int, str, Op, dict[str, Any], int]]] = {}
        for table, schema in schemas.items():
            objects = self._objects(table).values
            reverse = {v: k for k, v in self._columns[table].items()}
            queries = ((sqlfiles.render("oracle", "poll/deletes.sql", shadow=objects["shadow"]), Op.DELETE,
                        schema.primary_key),
                       (poll_query("simple", objects["view"], bounded=True), Op.UPDATE, schema.column_names))
            for order, (sql, op, names) in enumerate(queries):
                cur.execute(f"SELECT q.scn, q.event_timestamp, {self._select_list(table, names, 'q')} FROM ({sql}) q",
                            sinceScn=since.value, untilScn=end.value)
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

    # -- bootstrap ---------------------------------------------------------------------

    def snapshot(self, table: str, batch_rows: int | None = None) -> TableSnapshot:
        """A flashback read ``AS OF SCN`` of the database SCN now, by primary-key keyset pages, on one connection."""
        batch_rows = batch_rows or self.config.bootstrap_chunk_rows
        schema = self.preflight()[table]
        mapping = self._columns[table]
        conn = self._connect()
        with closing(conn.cursor()) as cur:
            scn = self._current_scn(cur)
        actual = quote(self._actual[table])
        keys = [quote(mapping[k]) for k in schema.primary_key]
        # The raw key columns trail the exact-value expressions: keyset paging binds them as they are.
        select = ", ".join([self._select_list(table, schema.column_names), *keys])
        convert = schema.batch(oracle_value, f"bootstrap of {table} as of SCN {scn.value}")
        batches = pages_as_of(conn, actual, select, keys, scn.value, batch_rows, ALL_KEYS, None, len(schema.columns),
                              convert)
        return TableSnapshot(scn=scn, schema=schema, batches=batches)

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS) -> RangeRead:
        """Key ranges of the table as of the database SCN now; every range is read as of that SCN."""
        schema = self.preflight()[table]
        mapping = self._columns[table]
        actual = quote(self._actual[table])
        keys = [quote(mapping[k]) for k in schema.primary_key]
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            scn = self._current_scn(cur)
            ranges = key_ranges(cur, actual, keys, scn.value, rows_per_range, rows, self._quoted_columns(table))
        c = self.config
        spec = {"connection": {"user": c.user, "password": c.resolved_password(), "dsn": c.dsn},
                "table": actual, "key": keys, "page_rows": min(rows_per_range, 10_000),
                "columns": [[quote(mapping[col.name]), col.source_type] for col in schema.columns]}
        return RangeRead("oracle", self.name, schema, spec, ranges, scn=scn, where=rows.where)

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (a UNIQUE key may)."""
        problems = []
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            for table, schema in self.preflight().items():
                keys = [quote(self._columns[table][k]) for k in schema.primary_key]
                cur.execute(null_key_query(quote(self._actual[table]), keys) + " FETCH FIRST 1 ROWS ONLY")
                problem = null_key_problem(schema, cur.fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def notes(self) -> list[str]:
        """Nothing beyond verify's problems to say of an Oracle source."""
        return []

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.preflight()[table]
        keys = [quote(self._columns[table][k]) for k in schema.primary_key]
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            check_selection(cur, quote(self._actual[table]), keys, rows, self._quoted_columns(table))

    def _quoted_columns(self, table: str) -> dict[str, str]:
        """The snapshot's column names of ``table`` and their quoted dictionary names (what a filter may name)."""
        return {name: quote(actual) for name, actual in self._columns[table].items()}

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        return streamed_fingerprint(self.snapshot(table), progress)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        return in_buckets(self.snapshot(table), buckets)

    def reading(self) -> AbstractContextManager[None]:
        """LogMiner and shadow-table reads serve any number of sessions; the change log's commit fences
        the loser."""
        return nullcontext()

    def release(self, through: Scn) -> None:
        if through.is_beginning:
            return
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            for table in self.schemas():
                shadow = self._objects(table).values["shadow"]
                cur.execute(sqlfiles.render("oracle", "poll/prune_shadow.sql", shadow=shadow), throughScn=through.value)
            cur.execute(sqlfiles.load("oracle", "poll/prune.sql"), throughScn=through.value)
            conn.commit()

    # -- alerts ------------------------------------------------------------------------

    def wait_for_changes(self, max_wait_s: int) -> str | None:
        """Block up to ``max_wait_s`` in sync_alert.waitForEvent; the source name if changes were signalled."""
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            registered = cur.callfunc("sync_alert.registerSourceWithVersion", int, [self.name, 1])
            if registered is None:
                raise CaptureNotInstalledError(f"source {self.name!r} is not registered in sy$sources",
                                               f"materialize the '{self.name}/capture' asset", source=self.name)
            try:
                return cur.callfunc("sync_alert.waitForEvent", str, [max_wait_s])
            finally:
                cur.callproc("sync_alert.unregisterAllSources")
