"""MySQL / MariaDB capture from the binary log (Databus for MySQL).

SCN = (binlog file number << 32) | end offset of the transaction's commit event, so the
checkpoint is also the resume position. The epoch is the server's identity and binlog base
name; the checkpoint also keeps the creation time of its binlog file, so binlogs renumbered
by ``RESET MASTER`` are recognised even when the same file names come back. A source with a
standby captures from whichever server its checkpoint names; after a failover SCNs carry the
next *era* in their high bits (``sources/mysql_failover.py``, docs/ha.md). Rows are
decoded with the column names and types of the binlog's table map (``binlog_row_metadata=FULL``),
that is, the table's shape at the time of the event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pymysql

from dagster_databus.config import MysqlSourceConfig
from dagster_databus.core.batch import ChangeBatch, ChangeBatchBuilder
from dagster_databus.core.events import Op
from dagster_databus.core.progress import Progress, quiet
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import (
    CaptureNotInstalledError,
    ConcurrentRunError,
    ConfigError,
    EpochMismatchError,
    LogGapError,
    SourceUnavailableError,
    UnsupportedTypeError,
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
    check_column_name,
    in_background,
    require_mapped,
    require_unique_key,
    resolve_key,
    table_schemas,
)
from dagster_databus.sources.mysql_bootstrap import SIGNAL_TABLE, check_selection, key_ranges, snapshot_position
from dagster_databus.sources.mysql_connect import Connection
from dagster_databus.sources.mysql_types import (
    EMPTY_SET_SOURCE,
    ZERO_DATE,
    ZERO_DATE_SOURCES,
    binlog_column_type,
    binlog_source_type,
    binlog_value,
    bootstrap_value,
    compatible,
    fingerprint_part,
    mysql_column_type,
    select_expression,
)

if TYPE_CHECKING:
    from dagster_databus.log.changelog import ChangeLog
    from dagster_databus.sources.mysql_failover import Switch

_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|TRUNCATE(?:\s+TABLE)?|DROP\s+TABLE(?:\s+IF\s+EXISTS)?"
    r"|RENAME\s+TABLE|CREATE\s+(?:OR\s+REPLACE\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?)\s+([`\w.]+)",
    re.IGNORECASE | re.DOTALL,
)


Role = Literal["primary", "standby"]
# A row change read from the binlog, converted at its commit: (table, op, values, shape, commit ms, converter).
Pending = tuple[str, Op, dict[str, Any], TableSchema, int, Any]


def other_role(role: Role) -> Role:
    return "standby" if role == "primary" else "primary"


def _with_none_sources(values: dict[str, Any], none_sources: Mapping[str, str] | None) -> dict[str, Any]:
    """Row values with the NULLs that are not NULL in the source told apart: an empty SET and a zero date."""
    if not none_sources:
        return values
    out = dict(values)
    for name, reason in none_sources.items():
        if reason == EMPTY_SET_SOURCE:
            out[name] = ""
        elif reason in ZERO_DATE_SOURCES:
            out[name] = ZERO_DATE
    return out


def _file_number(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


class MysqlSource:
    kind = "mysql"
    sees_ddl = True  # DDL arrives in the binlog: a changed table is re-bootstrapped, not refused

    def __init__(self, config: MysqlSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self._schemas: dict[str, TableSchema] | None = None
        self._shapes: dict[tuple[Any, ...], tuple[TableSchema, Any]] = {}
        self.role: Role = "primary"  # the server capture reads: the checkpoint's, see attach()
        self.era = 0  # failovers so far: the high bits of every SCN this source makes

    def _field(self, suffix: str) -> str:
        return f"sources.{self.name}.{suffix}"

    # -- servers -----------------------------------------------------------------------

    def attach(self, state: Mapping[str, str]) -> None:
        """Read from the server and era a checkpoint's state names (the primary and era 0 by default)."""
        role = state.get("server", "primary")
        if role == "standby" and self.config.standby is None:
            raise ConfigError(self._field("standby"), "the change log's checkpoint was taken on the standby after "
                              "a failover, but the source no longer names a standby",
                              f"restore sources.{self.name}.standby, or run `databus bootstrap --source {self.name}`")
        self.role = "standby" if role == "standby" else "primary"
        self.era = int(state.get("era", "0"))
        self.reset_schemas()

    def address(self, role: Role | None = None) -> tuple[str, int]:
        role = role or self.role
        if role == "standby":
            assert self.config.standby is not None
            return self.config.standby.host, self.config.standby.port
        return self.config.host, self.config.port

    def resume(self, log: ChangeLog, progress: Callable[[str], None]) -> Switch | None:
        """Read from the checkpoint's server; fail over to the other one if it stays down."""
        from dagster_databus.sources.mysql_failover import resume

        return resume(self, log, progress)

    def probe(self) -> None:
        """Raise SourceUnavailableError unless the active server answers."""
        with closing(self.connect(database=False)) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")

    def reset_schemas(self) -> None:
        """Forget table shapes read from the previous server."""
        self._schemas, self._shapes = None, {}

    def describe(self, role: Role | None = None) -> str:
        host, port = self.address(role)
        return f"{role or self.role} {host}:{port}"

    def base_state(self, file: str, created: str) -> dict[str, str]:
        return {"server": self.role, "era": str(self.era), "binlog_file": file, "binlog_created": created}

    def scn(self, file: str, offset: int) -> Scn:
        return Scn.from_binlog(_file_number(file), offset, self.era)

    # -- connections -------------------------------------------------------------------

    def connection_settings(self) -> dict[str, Any]:
        c = self.config
        host, port = self.address()
        return {"host": host, "port": port, "user": c.user, "passwd": c.resolved_password(),
                "connect_timeout": c.connect_timeout_s}

    def connect(self, database: bool = True, role: Role | None = None) -> pymysql.Connection:
        """A connection to the active server, or to ``role``'s."""
        c = self.config
        host, port = self.address(role)
        try:
            return Connection(host=host, port=port, user=c.user, password=c.resolved_password(),
                                   database=c.database if database else None, autocommit=True,
                                   connect_timeout=c.connect_timeout_s, charset="utf8mb4")
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == 1045:
                raise ConfigError(self._field("password"), f"access denied for user {c.user!r} at {host}:{port}",
                                  "correct the user and password (or password_env) for this server") from None
            if code == 1044:  # the account may log in but not use the database: the server names the account
                account = re.search(r"'[^']*'@'[^']*'", str(exc.args[-1]))
                grant = f"GRANT SELECT ON `{c.database}`.* TO {account.group(0) if account else repr(c.user)}"
                raise CaptureNotInstalledError(
                    f"user {c.user!r} may not read database {c.database!r} on {host}:{port}",
                    f"as an administrator: {grant}", source=self.name) from None
            if code == 1049:
                raise ConfigError(self._field("database"),
                                  f"database {c.database!r} does not exist on {host}:{port}",
                                  "name an existing database (schema)") from None
            raise SourceUnavailableError(
                f"cannot reach MySQL source {self.name!r} ({self.describe(role)}): "
                f"{exc.args[-1] if exc.args else exc}",
                "check host and port, that the server is running and that this machine may connect to it",
                source=self.name,
            ) from None

    # -- preflight ---------------------------------------------------------------------

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            self._schemas = table_schemas(self.config.tables, partial(self._table_schema, cur))
        return self._schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

    def _table_schema(self, cur: Any, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        where = self._field(f"tables[{index}]")
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_DEFAULT FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (self.config.database, table))
        rows = cur.fetchall()
        if not rows:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s ORDER BY 1",
                        (self.config.database,))
            existing = ", ".join(r[0] for r in cur.fetchall()) or "(none)"
            raise ConfigError(f"{where}.name", f"table {table!r} does not exist in database {self.config.database!r}",
                              f"use one of the database's tables: {existing}")
        columns, unmapped = [], []
        for name, _data_type, column_type, default in rows:
            check_column_name(name, table, where)
            default = None if default is None or str(default).upper() == "NULL" else str(default)
            ctype = mysql_column_type(column_type)
            if ctype is None:
                unmapped.append(f"{name} {column_type}")
                continue
            columns.append(Column(name=name, type=ctype, source_type=column_type, default=default))
        require_mapped(self.name, table, unmapped, "MySQL", "change the column to a mapped type")
        key = resolve_key(columns, key, table, where)
        cur.execute("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s AND NON_UNIQUE = 0", (self.config.database, table))
        unique: dict[str, set[str]] = {}
        for index_name, column in cur.fetchall():
            unique.setdefault(index_name, set()).add(column)
        require_unique_key(key, unique.values(), table, where)
        return TableSchema(source=self.name, table=table, columns=tuple(columns), primary_key=key)

    # -- verify (the "install" of a binlog source) --------------------------------------

    def installed(self) -> bool:
        return True  # nothing is installed in the server: its settings and privileges are what verify checks

    def verify(self) -> list[str]:
        """Every server setting or privilege capture needs that is missing, each with its fix.

        With a standby, the other server is checked too when it answers (it must log what it
        replicates, ``log_slave_updates``), so a failover is not the first time it is looked at.
        """
        self.preflight()
        with closing(self.connect()) as conn, conn.cursor() as cur:
            problems = self._server_problems(cur, standby=False)
        if self.config.standby is not None:
            spare = other_role(self.role)
            try:
                with closing(self.connect(database=False, role=spare)) as conn, conn.cursor() as cur:
                    other = self._server_problems(cur, standby=True)
                    cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                                (self.config.database,))
                    if cur.fetchone() is None:
                        other.append(f"database {self.config.database!r} does not exist here: make this server a "
                                     "replica of the other one (CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos)")
                    problems += [f"{self.describe(spare)}: {p}" for p in other]
            except SourceUnavailableError:
                pass  # a standby that is down now is not a reason to stop capturing from the server that is up
        return problems

    def _server_problems(self, cur: Any, standby: bool) -> list[str]:
        problems = []
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
                    "'binlog_row_image', 'binlog_row_metadata', 'server_id', 'log_slave_updates')")
        settings = {k.lower(): str(v) for k, v in cur.fetchall()}
        wanted = [("log_bin", "ON", "enable binary logging: add 'log_bin' (and 'server_id') under [mysqld] "
                   "and restart the server"),
                  ("binlog_format", "ROW", "SET GLOBAL binlog_format = 'ROW' (and binlog_format=ROW under "
                   "[mysqld] to keep it)"),
                  ("binlog_row_image", "FULL", "SET GLOBAL binlog_row_image = 'FULL' (and binlog_row_image=FULL "
                   "under [mysqld])")]
        if "binlog_row_metadata" in settings:
            wanted.append(("binlog_row_metadata", "FULL", "SET GLOBAL binlog_row_metadata = 'FULL' (and "
                           "binlog_row_metadata=FULL under [mysqld]); capture needs column names in the binlog"))
        if standby:
            wanted.append(("log_slave_updates", "ON", "add log_slave_updates under [mysqld] and restart: a standby "
                           "must write what it replicates to its own binlog for capture to read it after a failover"))
        for name, value, fix in wanted:
            if settings.get(name, "").upper() != value:
                problems.append(f"{name} is {settings.get(name, 'unset')!r}, needs {value!r}: {fix}")
        if settings.get("server_id") == "0":
            problems.append("server_id is 0, so the server cannot serve replicas: set server_id under [mysqld]")
        elif settings.get("server_id") == str(self.config.replica_server_id()):
            problems.append(f"the capture's replica server id {self.config.replica_server_id()} equals the "
                            f"server's own server_id: set sources.{self.name}.server_id to another number")
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0].upper() for r in cur.fetchall())
        # The account as the server matched it ('weak'@'127.0.0.1', not 'weak'@'%'), so the hint pastes as is.
        user, _, host = str(self._query_one(cur, "SELECT CURRENT_USER()")[0]).rpartition("@")
        account = f"'{user}'@'{host}'"
        for privilege in ("REPLICATION SLAVE", "REPLICATION CLIENT|BINLOG MONITOR", "SELECT"):
            options = privilege.split("|")
            if "ALL PRIVILEGES ON *.*" not in grants and not any(o in grants for o in options):
                problems.append(f"user {self.config.user!r} lacks {options[0]}: GRANT {options[0]} ON "
                                f"{'*.*' if privilege != 'SELECT' else '`' + self.config.database + '`.*'} TO "
                                f"{account}")
        return problems

    def require_installed(self) -> None:
        problems = self.verify()
        if problems:
            raise CaptureNotInstalledError(
                f"MySQL source {self.name!r} ({self.describe()}) is not ready for binlog capture:\n  - "
                + "\n  - ".join(problems),
                "apply each fix above, then materialize the '" + self.name + "/capture' asset again",
                source=self.name,
            )

    def install(self) -> InstallReport:
        """Nothing to create for capture; for watermark reads, the signal table (``sql/mysql/signal.sql``)."""
        self.require_installed()
        changed: tuple[str, ...] = ()
        with closing(self.connect()) as conn, conn.cursor() as cur:
            if self._reads_here(cur)[0] == "watermark" and self._signal_problem(cur):
                try:
                    cur.execute(sqlfiles.load("mysql", "signal.sql"))
                except pymysql.err.MySQLError as exc:
                    grant = (f"GRANT CREATE, INSERT, DELETE ON `{self.config.database}`.`{SIGNAL_TABLE}` TO "
                             f"'{self.config.user}'")
                    raise CaptureNotInstalledError(
                        f"cannot create the signal table {self.config.database}.{SIGNAL_TABLE} for watermark "
                        f"reads: {exc.args[-1] if exc.args else exc}",
                        f"as an administrator: {grant}; or set bootstrap_reads: lock", source=self.name) from None
                changed = (SIGNAL_TABLE,)
        return InstallReport(epoch=self.epoch(), version="binlog", changed=changed,
                             unchanged=tuple(t.name for t in self.config.tables))

    # -- positions ---------------------------------------------------------------------

    def _query_one(self, cur: Any, sql: str) -> Any:
        cur.execute(sql)
        return cur.fetchone()

    def epoch(self) -> str:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_uuid', 'server_id', "
                        "'log_bin_basename', 'gtid_domain_id')")
            v = {k.lower(): str(val) for k, val in cur.fetchall()}
        identity = v.get("server_uuid") or f"server-{v.get('server_id')}-domain-{v.get('gtid_domain_id', '0')}"
        return f"{identity}:{v.get('log_bin_basename', '').rsplit('/', 1)[-1]}"

    def _master_status(self, cur: Any) -> tuple[str, int]:
        row = self._query_one(cur, "SHOW MASTER STATUS")
        if not row:
            raise CaptureNotInstalledError(f"MySQL source {self.name!r} has binary logging off",
                                           "enable log_bin under [mysqld] and restart the server", source=self.name)
        return row[0], int(row[1])

    def high_water_mark(self) -> Scn:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            file, pos = self._master_status(cur)
        return self.scn(file, pos)

    def binlog_created(self, file: str) -> str:
        """The creation time of a binlog file (its format description event), as text."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import FormatDescriptionEvent

        stream = BinLogStreamReader(connection_settings=self.connection_settings(), pymysql_wrapper=Connection,
                                    server_id=self.config.replica_server_id(), resume_stream=True,
                                    log_file=file, log_pos=4, blocking=False,
                                    only_events=[FormatDescriptionEvent])
        try:
            for event in stream:
                return str(event.timestamp)
        except pymysql.err.OperationalError as exc:
            self._refuse_second_reader(exc)
            raise
        finally:
            stream.close()
        return ""

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A server-side named lock per replica server id, held on its own connection for the run (a crash
        frees it with the connection). Without it two runs can each open the binlog while the other is
        between reads, and the server turns both away (``_refuse_second_reader``)."""
        name = f"databus.binlog.{self.config.replica_server_id()}"
        conn = self.connect(database=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, 0), IS_USED_LOCK(%s)", (name, name))
                got, holder = cur.fetchone()
            if got != 1:
                raise ConcurrentRunError(
                    f"the binlog of source {self.name!r} is locked by another run (lock {name!r} held by "
                    f"connection {holder} on {self.describe()})",
                    "runs of one source must not overlap (one schedule or sensor per source); nothing was "
                    "committed by this run, and the next run continues from the log as the other left it",
                    source=self.name)
            try:
                yield
            finally:
                # Released here rather than with the connection: the server frees a closed connection's
                # locks a moment after the close, when the next run of this process may be asking already.
                with suppress(pymysql.err.MySQLError), conn.cursor() as cur:
                    cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        finally:
            conn.close()

    def _refuse_second_reader(self, exc: pymysql.err.OperationalError) -> None:
        """The server allows one binlog reader per replica server id: another capture of this source is
        reading (MariaDB refuses the newcomer, 4052; MySQL drops the older reader, 1236)."""
        text = str(exc.args[-1]) if exc.args else ""
        if exc.args and (exc.args[0] == 4052 or "same server_uuid/server_id" in text):
            raise ConcurrentRunError(
                f"another capture of source {self.name!r} is reading the binlog with replica server id "
                f"{self.config.replica_server_id()} ({text})",
                "runs of one source must not overlap (one schedule or sensor per source); nothing was committed "
                "by this run, and the next run continues from the log as the other left it",
                source=self.name) from None

    def start_position(self) -> tuple[Scn, dict[str, str]]:
        with closing(self.connect()) as conn, conn.cursor() as cur:
            file, pos = self._master_status(cur)
        return self.scn(file, pos), self.base_state(file, self.binlog_created(file))

    def gtid_pos(self, cur: Any) -> str:
        """MariaDB's GTID position of the binlog end (``@@gtid_binlog_pos``), '' elsewhere."""
        try:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        except pymysql.err.MySQLError:
            return ""
        row = cur.fetchone()
        return str(row[0] or "") if row else ""

    def _check_position(self, cur: Any, since: Scn, epoch: str | None, state: Mapping[str, str]) -> str:
        current_epoch = self.epoch()
        if epoch is not None and epoch != current_epoch:
            raise EpochMismatchError(
                f"MySQL source {self.name!r} is now {current_epoch}, but the change log's checkpoint belongs to "
                f"{epoch}: the server was replaced or its binlogs renamed, so positions cannot be compared",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        cur.execute("SHOW BINARY LOGS")
        sizes = {r[0]: int(r[1]) for r in cur.fetchall()}
        files = list(sizes)
        era, number, offset = since.binlog_parts()
        if era != self.era:
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is SCN {since} of failover era {era}, but capture is in "
                f"era {self.era} ({self.describe()}): the checkpoint's state and its SCN disagree",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        base = files[-1].rsplit(".", 1)[0]
        name = state.get("binlog_file") or f"{base}.{number:06d}"
        numbers = [_file_number(f) for f in files]
        if number > max(numbers):
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is in binlog {name}, beyond the server's newest "
                f"{files[-1]}: the binlogs were reset (RESET MASTER) or the server restored",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        if name not in files:
            raise LogGapError(
                f"binlog {name} holding the checkpoint of source {self.name!r} (offset {offset}) was purged from "
                f"the server (oldest left: {files[0]}): the changes after the checkpoint are gone",
                f"run `databus bootstrap --source {self.name}`, or set sources.{self.name}.on_purged: bootstrap; "
                "keep binlogs longer (binlog_expire_logs_seconds / expire_logs_days) than the poll interval",
                source=self.name)
        if offset > sizes[name]:
            raise EpochMismatchError(
                f"the checkpoint of source {self.name!r} is at offset {offset} of {name}, but that file is only "
                f"{sizes[name]} bytes: the binlogs were reset (RESET MASTER) and the name reused",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        created = state.get("binlog_created")
        if created and created != self.binlog_created(name):
            raise EpochMismatchError(
                f"binlog {name} on source {self.name!r} is not the file the checkpoint was taken in (created "
                f"{self.binlog_created(name)}, expected {created}): the binlogs were reset (RESET MASTER)",
                f"run `databus bootstrap --source {self.name}`", source=self.name)
        return name

    # -- polling -----------------------------------------------------------------------

    def poll(self, since: Scn, epoch: str | None, stats: PollStats,
             state: Mapping[str, str] | None = None) -> Iterator[ChangeBatch]:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            FormatDescriptionEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        self.schemas()
        with closing(self.connect()) as conn, conn.cursor() as cur:
            start_file = self._check_position(cur, since, epoch, state or {})
            bound_file, bound_pos = self._master_status(cur)
        bound = self.scn(bound_file, bound_pos)
        stats.source_hwm = bound
        if since >= bound:
            return
        tables = {t.name for t in self.config.tables}
        stream = BinLogStreamReader(
            connection_settings=self.connection_settings(), pymysql_wrapper=Connection,
            server_id=self.config.replica_server_id(),
            resume_stream=True, blocking=False, log_file=start_file, log_pos=since.binlog_parts()[2],
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent, RotateEvent,
                         FormatDescriptionEvent, MariadbGtidEvent],
        )
        chunk = ChangeBatchBuilder()
        pending: list[Pending] = []
        created = (state or {}).get("binlog_created", "")
        # The last transaction read: its GTID and commit time find the position again on a standby.
        done = {k: v for k, v in (state or {}).items() if k in ("gtid", "commit_ts")}
        gtid = ""
        current_file = start_file
        try:
            for event in stream:
                if isinstance(event, RotateEvent):
                    current_file = event.next_binlog
                    continue
                if isinstance(event, FormatDescriptionEvent):
                    created = str(event.timestamp)
                    continue
                position = self.scn(current_file, event.packet.log_pos)
                if isinstance(event, MariadbGtidEvent):
                    pending = []
                    gtid = event.gtid
                    continue
                if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    if event.schema == self.config.database and event.table in tables:
                        pending += self._row_changes(event, event.timestamp * 1000)
                    continue
                commit = isinstance(event, XidEvent)
                if isinstance(event, QueryEvent):
                    query = event.query.strip() if isinstance(event.query, str) else event.query.decode()
                    if query.upper() == "BEGIN":
                        pending = []
                        continue
                    commit = query.upper() == "COMMIT"
                    if not commit:
                        self._note_ddl(event, query, position, stats)
                if position <= since:
                    pending = []
                    continue
                if commit or isinstance(event, QueryEvent):  # a COMMIT, or DDL: its own transaction
                    done = {"gtid": gtid, "commit_ts": str(event.timestamp)} if gtid else {
                        "commit_ts": str(event.timestamp)}
                stats.until = position
                stats.state = {**self.base_state(current_file, created), **done}
                if commit and pending:
                    if self._changes_shape(pending) and chunk.events:
                        # One shape per table in a batch: the batch before the change is written first.
                        stats.chunks += 1
                        yield chunk.build()
                        chunk = ChangeBatchBuilder()
                    self._add_window(chunk, pending, position)
                    pending = []
                    if chunk.events >= self.config.poll.chunk_rows:
                        stats.chunks += 1
                        yield chunk.build()
                        chunk = ChangeBatchBuilder()
                if position >= bound:
                    break
        except pymysql.err.OperationalError as exc:
            self._refuse_second_reader(exc)
            if exc.args and exc.args[0] == 1236:
                raise LogGapError(
                    f"the server refused to stream binlog {current_file} for source {self.name!r}: {exc.args[-1]}",
                    f"run `databus bootstrap --source {self.name}`, or set sources.{self.name}.on_purged: bootstrap",
                    source=self.name) from None
            raise SourceUnavailableError(
                f"lost the binlog connection to source {self.name!r}: {exc.args[-1] if exc.args else exc}",
                "run again: capture resumes from the last durable checkpoint", source=self.name) from None
        finally:
            stream.close()
        if chunk.events:
            stats.chunks += 1
            yield chunk.build()

    def _row_changes(self, event: Any, ts_ms: int) -> list[Pending]:
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        schema, convert = self._event_schema(event)
        out = []
        for row in event.rows:
            if isinstance(event, UpdateRowsEvent):
                before = _with_none_sources(row["before_values"], row.get("before_none_sources"))
                after = _with_none_sources(row["after_values"], row.get("after_none_sources"))
                if any(before[k] != after[k] for k in schema.primary_key):
                    out.append((event.table, Op.DELETE, before, schema, ts_ms, convert))
                    out.append((event.table, Op.INSERT, after, schema, ts_ms, convert))
                else:
                    out.append((event.table, Op.UPDATE, after, schema, ts_ms, convert))
            elif isinstance(event, DeleteRowsEvent):
                out.append((event.table, Op.DELETE, _with_none_sources(row["values"], row.get("none_sources")),
                            schema, ts_ms, convert))
            else:
                out.append((event.table, Op.INSERT, _with_none_sources(row["values"], row.get("none_sources")),
                            schema, ts_ms, convert))
        return out

    def _event_schema(self, event: Any) -> tuple[TableSchema, Any]:
        """The table's shape as the binlog's table map describes it at this event, and the converter of its
        rows (cached per shape: SET members or BINARY widths may differ between shapes of one schema)."""
        shape = (event.table, tuple(tuple((k, repr(v)) for k, v in sorted(c.data.items())) for c in event.columns))
        cached = self._shapes.get(shape)
        if cached is None:
            schema = self._shape_schema(event)
            by_name = {c.name: c for c in event.columns}
            cached = self._shapes[shape] = (schema, schema.column_converter(
                lambda column: binlog_value(by_name[column.name], column, self.config.zero_dates)))
        return cached

    def _shape_schema(self, event: Any) -> TableSchema:
        known = self.schemas()[event.table]
        by_name = {c.name: c for c in known.columns}
        columns = []
        for col in event.columns:
            ctype = binlog_column_type(col)
            same = by_name.get(col.name)
            if same is not None and compatible(same, col, ctype):
                columns.append(same)
                continue
            if ctype is None:
                raise UnsupportedTypeError(
                    f"source {self.name!r}, table {event.table!r}: the binlog has column {col.name} as "
                    f"{binlog_source_type(col)}, a type with no mapping to a change-log and snapshot type",
                    "change the column to a mapped type (docs/types.md), then run "
                    f"`databus bootstrap --source {self.name}`", source=self.name, table=event.table)
            columns.append(Column(name=col.name, type=ctype, source_type=binlog_source_type(col)))
        schema = TableSchema(source=self.name, table=event.table, columns=tuple(columns),
                             primary_key=known.primary_key)
        return known if schema == known else schema

    def _changes_shape(self, pending: list[Pending]) -> bool:
        current = self.schemas()
        return any(schema is not current[table] and schema != current[table] for table, _, _, schema, _, _ in pending)

    def _add_window(self, chunk: ChangeBatchBuilder, pending: list[Pending], position: Scn) -> None:
        """The transaction's row changes into ``chunk``; the shapes they were decoded with become the
        current ones (for ``schemas()``)."""
        for seq, (_, op, values, schema, ts_ms, convert) in enumerate(pending):
            chunk.add(schema, convert, op.value, values, position, seq, ts_ms)
        assert self._schemas is not None
        self._schemas.update({table: schema for table, _, _, schema, _, _ in pending})

    def _note_ddl(self, event: Any, query: str, position: Scn, stats: PollStats) -> None:
        match = _DDL.match(query)
        if not match:
            return
        target = match.group(2).replace("`", "")
        schema, _, table = target.rpartition(".")
        schema = schema or (event.schema.decode() if isinstance(event.schema, bytes) else event.schema)
        if schema == self.config.database and table in {t.name for t in self.config.tables}:
            stats.ddl.append((position, table, query))

    # -- bootstrap ---------------------------------------------------------------------

    def snapshot(self, table: str, batch_rows: int | None = None) -> TableSnapshot:
        """A consistent, keyset-paginated read of ``table`` at a known binlog position, on one connection."""
        batch_rows = batch_rows or self.config.bootstrap_chunk_rows
        schema = self.preflight()[table]  # the live shape: the read below sees it
        conn = self.connect()
        cur = conn.cursor()
        scn = self._read_only_snapshot(cur)
        columns = ", ".join(select_expression(c) for c in schema.columns)
        key = [f"`{k}`" for k in schema.primary_key]
        first = f"SELECT {columns} FROM `{table}` ORDER BY {', '.join(key)} LIMIT %s"
        after = (f"SELECT {columns} FROM `{table}` WHERE ({', '.join(key)}) > ({', '.join(['%s'] * len(key))}) "
                 f"ORDER BY {', '.join(key)} LIMIT %s")
        key_index = [schema.column_names.index(k) for k in schema.primary_key]
        convert = schema.batch(lambda c: bootstrap_value(c, self.config.zero_dates), f"bootstrap of {table}")

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                cur.execute(first, (batch_rows,))
                while rows := cur.fetchall():
                    yield convert(rows)
                    if len(rows) < batch_rows:
                        break
                    cur.execute(after, (*[rows[-1][i] for i in key_index], batch_rows))
            finally:
                cur.execute("COMMIT")
                conn.close()

        return TableSnapshot(scn=scn, schema=schema, batches=batches())

    def fingerprint(self, table: str, progress: Progress = quiet) -> SourceFingerprint:
        """Computed by the server in one aggregate query (``sql/mysql/fingerprint.sql``): no rows travel."""
        from dagster_databus.core.fingerprint import Fingerprint

        schema = self.preflight()[table]
        conn = self.connect()
        cur = conn.cursor()
        try:
            scn = self._read_only_snapshot(cur)
        except BaseException:
            conn.close()
            raise
        progress(f"{table}: the server computes the fingerprint at SCN {scn} (one aggregate query over the "
                 "whole table; it reports no progress of its own)")

        def work() -> Fingerprint:
            fingerprint = Fingerprint()
            try:
                cur.execute(self._fingerprint_sql("fingerprint.sql", schema))
                for bucket, rows, digest_sum in cur.fetchall():
                    fingerprint.add_bucket(int(bucket), int(rows), int(digest_sum))
                cur.execute("COMMIT")
            finally:
                conn.close()
            return fingerprint

        return SourceFingerprint(scn, schema, in_background(work), pushed_down=True)

    def rows_in_buckets(self, table: str, buckets: Sequence[int]) -> TableSnapshot:
        schema = self.preflight()[table]
        conn = self.connect()
        cur = conn.cursor()
        scn = self._read_only_snapshot(cur)
        cur.execute(self._fingerprint_sql("fingerprint_rows.sql", schema, buckets))
        convert = schema.batch(lambda c: bootstrap_value(c, self.config.zero_dates), f"reconciliation of {table}")

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                while rows := cur.fetchmany(self.config.bootstrap_chunk_rows):
                    yield convert(rows)
            finally:
                cur.execute("COMMIT")
                conn.close()

        return TableSnapshot(scn=scn, schema=schema, batches=batches())

    def _read_only_snapshot(self, cur: Any) -> Scn:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP in UTC, as the binlog and the snapshot have it
        return self._consistent_snapshot(cur)

    @staticmethod
    def _fingerprint_sql(name: str, schema: TableSchema, buckets: Sequence[int] = ()) -> str:
        parts = {c.name: fingerprint_part(c) for c in schema.columns}
        return sqlfiles.render(
            "mysql", name, table=f"`{schema.table}`",
            key_text=f"CONCAT({', '.join(parts[k] for k in schema.primary_key)})",
            row_text=f"CONCAT({', '.join(parts[c] for c in schema.column_names)})",
            columns=", ".join(select_expression(c) for c in schema.columns),
            buckets=", ".join(str(int(b)) for b in buckets) or "NULL")

    def ranges(self, table: str, rows_per_range: int, rows: RowSelection = ALL_ROWS) -> RangeRead:
        """Key ranges each read in its own consistent snapshot, pinned to a binlog position as
        ``bootstrap_reads`` says (``mysql_bootstrap.snapshot_position``); with ``lock`` the whole table is one
        range pinned under a brief global read lock."""
        schema = self.preflight()[table]
        with closing(self.connect()) as conn, conn.cursor() as cur:
            reads = self._bootstrap_reads(cur)
            ranges = (key_ranges(cur, table, schema.primary_key, rows_per_range, rows) if reads != "lock"
                      else (rows.keys,))
        c = self.config
        host, port = self.address()
        connection = {"host": host, "port": port, "user": c.user, "password": c.resolved_password(),
                      "database": c.database, "connect_timeout": c.connect_timeout_s}
        spec = {"connection": connection, "zero_dates": c.zero_dates, "era": self.era,
                "page_rows": min(rows_per_range, 10_000), "reads": reads}
        return RangeRead("mysql", self.name, schema, spec, ranges, scn=None, where=rows.where)

    def _reads_here(self, cur: Any) -> tuple[str, bool]:
        """(``bootstrap_reads`` with ``auto`` resolved for this server, whether it reports snapshot positions)."""
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
        reports = cur.fetchone() is not None
        reads = self.config.bootstrap_reads
        return (("snapshot" if reports else "watermark") if reads == "auto" else reads), reports

    def _bootstrap_reads(self, cur: Any) -> str:
        """``bootstrap_reads`` resolved for this server and checked: a watermark read's signal table first."""
        reads, reports = self._reads_here(cur)
        if reads == "snapshot" and not reports:
            raise ConfigError(self._field("bootstrap_reads"), f"{self.describe()} reports no binlog position for a "
                              "consistent snapshot (binlog_snapshot_file is MariaDB's)",
                              "set bootstrap_reads: watermark (or auto), or lock")
        if reads == "watermark":
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_order_commits'")
            order = cur.fetchone()  # MySQL's; MariaDB always commits in binlog order
            if order is not None and str(order[1]).upper() == "OFF":
                raise ConfigError(self._field("bootstrap_reads"), f"{self.describe()} has binlog_order_commits OFF, "
                                  "so a committed watermark does not show that earlier transactions are visible",
                                  "SET GLOBAL binlog_order_commits = ON (and in my.cnf), or set bootstrap_reads: lock")
            problem = self._signal_problem(cur)
            if problem:
                raise CaptureNotInstalledError(problem, f"run `databus install --source {self.name}`, or set "
                                               "bootstrap_reads: lock", source=self.name)
        return reads

    def _signal_problem(self, cur: Any) -> str | None:
        """Why watermark reads cannot write their signal row here, or None."""
        cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (self.config.database, SIGNAL_TABLE))
        if cur.fetchone() is None:
            return (f"the signal table {self.config.database}.{SIGNAL_TABLE} that watermark reads write to does not "
                    "exist")
        return None

    def check_selection(self, table: str, rows: RowSelection) -> None:
        schema = self.preflight()[table]
        with closing(self.connect()) as conn, conn.cursor() as cur:
            check_selection(cur, table, schema.primary_key, rows)

    def _consistent_snapshot(self, cur: Any) -> Scn:
        return snapshot_position(cur, self.era, self.name)

    def release(self, through: Scn) -> None:
        """Binlogs are the server's to expire; capture keeps nothing on the source."""
