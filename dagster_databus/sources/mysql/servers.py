"""The servers of a MySQL/MariaDB source: which one capture reads (the primary, or the standby after a
failover), its address, connections to it, and the one binlog reader per replica server id it allows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from typing import Any, Literal

from dagster_databus.config import MysqlSourceConfig
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError, ConcurrentRunError, ConfigError, SourceUnavailableError
from dagster_databus.sources.base import FailoverState
from dagster_databus.sources.mysql.charsets import ServerCharsets, server_charsets
from dagster_databus.sources.mysql.connect import (
    Connection,
    Cursor,
    MySQLError,
    OperationalError,
    TlsRefused,
    tls_kwargs,
)
from dagster_databus.sources.mysql.versions import ServerVersion

Role = Literal["primary", "standby"]


def other_role(role: Role) -> Role:
    return "standby" if role == "primary" else "primary"


def file_number(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


class MysqlServers:
    """Roles and connections. ``generation`` moves whenever the server capture reads may have changed (a
    checkpoint attached, a failover): what was read from the previous server (table schemas, binlog shapes)
    is read again by whoever cached it."""

    def __init__(self, config: MysqlSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self.role: Role = "primary"  # the server capture reads: the checkpoint's, see attach()
        self.era = 0  # failovers so far: the high bits of every SCN this source makes
        self.generation = 0

    def field(self, suffix: str) -> str:
        """The config field ``suffix`` of this source, as errors name it."""
        return f"sources.{self.name}.{suffix}"

    # -- which server ------------------------------------------------------------------

    def attach(self, state: Mapping[str, str]) -> None:
        """Read from the server and era a checkpoint's state names (the primary and era 0 by default)."""
        role = FailoverState.of(state).reading
        if role == "standby" and self.config.standby is None:
            raise ConfigError(self.field("standby"), "the change log's checkpoint was taken on the standby after "
                              "a failover, but the source no longer names a standby",
                              f"restore sources.{self.name}.standby, or run `databus bootstrap --source {self.name}`")
        self.role = "standby" if role == "standby" else "primary"
        self.era = int(state.get("era", "0"))
        self.generation += 1

    def switch(self) -> None:
        """Read from the other server from now on, in the next failover era (``failover.fail_over``)."""
        self.role = other_role(self.role)
        self.era += 1
        self.generation += 1

    def address(self, role: Role | None = None) -> tuple[str, int]:
        role = role or self.role
        if role == "standby":
            assert self.config.standby is not None
            return self.config.standby.host, self.config.standby.port
        return self.config.host, self.config.port

    def probe(self) -> None:
        """Raise SourceUnavailableError unless the active server answers."""
        with closing(self.connect(database=False)) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")

    def describe(self, role: Role | None = None) -> str:
        host, port = self.address(role)
        return f"{role or self.role} {host}:{port}"

    def base_state(self, file: str, created: str) -> dict[str, str]:
        return {**FailoverState(server=self.role).entries(), "era": str(self.era), "binlog_file": file,
                "binlog_created": created}

    def scn(self, file: str, offset: int) -> Scn:
        return Scn.from_binlog(file_number(file), offset, self.era)

    # -- connections -------------------------------------------------------------------

    def connection_settings(self, role: Role | None = None) -> dict[str, Any]:
        """pymysql keyword arguments (for ``connect.Connection``) that reach and log in to the active server,
        or ``role``'s, with the source's TLS settings: plain data, as the binlog stream and Spark tasks take."""
        c = self.config
        host, port = self.address(role)
        return {"host": host, "port": port, "user": c.user, "password": c.resolved_password(),
                "connect_timeout": c.connect_timeout_s, **tls_kwargs(c, standby=(role or self.role) == "standby")}

    def connect(self, database: bool = True, role: Role | None = None) -> Connection:
        """A connection to the active server, or to ``role``'s."""
        c = self.config
        host, port = self.address(role)
        settings = self.connection_settings(role)
        try:
            return Connection(**settings, database=c.database if database else None, autocommit=True,
                              charset="utf8mb4")
        except TlsRefused as exc:
            standby = (role or self.role) == "standby"
            setting = f"standby.{exc.setting}" if standby and exc.setting == "host" else exc.setting
            raise ConfigError(self.field(setting), exc.problem, exc.fix) from None
        except OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == 1045:
                fix = "correct the user and password (or password_env) for this server"
                if "server_public_key" in settings and c.tls.mode in ("disabled", "preferred"):
                    fix += ("; without TLS the password travels under the RSA key server_public_key names: check "
                            "it is this server's current public key")
                raise ConfigError(self.field("password"), f"access denied for user {c.user!r} at {host}:{port}",
                                  fix) from None
            if code == 1044:  # the account may log in but not use the database: the server names the account
                account = re.search(r"'[^']*'@'[^']*'", str(exc.args[-1]))
                grant = f"GRANT SELECT ON `{c.database}`.* TO {account.group(0) if account else repr(c.user)}"
                raise CaptureNotInstalledError(
                    f"user {c.user!r} may not read database {c.database!r} on {host}:{port}",
                    f"as an administrator: {grant}", source=self.name) from None
            if code == 1049:
                raise ConfigError(self.field("database"),
                                  f"database {c.database!r} does not exist on {host}:{port}",
                                  "name an existing database (schema)") from None
            raise SourceUnavailableError(
                f"cannot reach MySQL source {self.name!r} ({self.describe(role)}): "
                f"{exc.args[-1] if exc.args else exc}",
                "check host and port, that the server is running and that this machine may connect to it",
                source=self.name,
            ) from None

    @contextmanager
    def cursor(self) -> Iterator[Cursor]:
        """A cursor of a connection of its own to the active server, both closed after use."""
        with closing(self.connect()) as conn, conn.cursor() as cur:
            yield cur

    def charsets(self, cur: Cursor) -> ServerCharsets:
        """The active server's collations and character sets (``charsets``), read once per process."""
        host, port = self.address()
        return server_charsets(cur, host, port, str(ServerVersion.of(cur)), self.cursor)

    # -- one binlog reader per replica server id ---------------------------------------

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A server-side named lock per replica server id, held on its own connection for the run (a crash
        frees it with the connection). Without it two runs can each open the binlog while the other is
        between reads, and the server turns both away (``refuse_second_reader``)."""
        name = f"databus.binlog.{self.config.replica_server_id()}"
        conn = self.connect(database=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, 0), IS_USED_LOCK(%s)", (name, name))
                row = cur.fetchone()
                assert row is not None  # a SELECT without FROM returns its one row
                got, holder = row
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
                with suppress(MySQLError), conn.cursor() as cur:
                    cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        finally:
            conn.close()

    def refuse_second_reader(self, exc: Exception) -> None:
        """Raise ``ConcurrentRunError`` if ``exc`` (a pymysql ``OperationalError``) is the server refusing a
        second binlog reader with this replica server id: another capture of this source is reading (MariaDB
        refuses the newcomer, 4052; MySQL drops the older reader, 1236)."""
        text = str(exc.args[-1]) if exc.args else ""
        if exc.args and (exc.args[0] == 4052 or "same server_uuid/server_id" in text):
            raise ConcurrentRunError(
                f"another capture of source {self.name!r} is reading the binlog with replica server id "
                f"{self.config.replica_server_id()} ({text})",
                "runs of one source must not overlap (one schedule or sensor per source); nothing was committed "
                "by this run, and the next run continues from the log as the other left it",
                source=self.name) from None
