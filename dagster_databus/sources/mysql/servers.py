"""The servers of a MySQL/MariaDB source: which one capture reads (the primary, or the standby after a
failover), its address, and connections to it. The base of ``MysqlSource``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import closing
from typing import Any, Literal

import pymysql

from dagster_databus.config import MysqlSourceConfig
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CaptureNotInstalledError, ConfigError, SourceUnavailableError
from dagster_databus.sources.mysql.connect import Connection, TlsRefused, tls_kwargs

Role = Literal["primary", "standby"]


def other_role(role: Role) -> Role:
    return "standby" if role == "primary" else "primary"


def file_number(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


class MysqlServers:
    """Roles and connections; each module of this package adds one job on top (``source.MysqlSource``)."""

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
        return Scn.from_binlog(file_number(file), offset, self.era)

    # -- connections -------------------------------------------------------------------

    def connection_settings(self, role: Role | None = None) -> dict[str, Any]:
        """pymysql keyword arguments (for ``connect.Connection``) that reach and log in to the active server,
        or ``role``'s, with the source's TLS settings: plain data, as the binlog stream and Spark tasks take."""
        c = self.config
        host, port = self.address(role)
        return {"host": host, "port": port, "user": c.user, "password": c.resolved_password(),
                "connect_timeout": c.connect_timeout_s, **tls_kwargs(c, standby=(role or self.role) == "standby")}

    def connect(self, database: bool = True, role: Role | None = None) -> pymysql.Connection:
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
            raise ConfigError(self._field(setting), exc.problem, exc.fix) from None
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == 1045:
                fix = "correct the user and password (or password_env) for this server"
                if "server_public_key" in settings and c.tls.mode in ("disabled", "preferred"):
                    fix += ("; without TLS the password travels under the RSA key server_public_key names: check "
                            "it is this server's current public key")
                raise ConfigError(self._field("password"), f"access denied for user {c.user!r} at {host}:{port}",
                                  fix) from None
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

    def _query_one(self, cur: Any, sql: str) -> Any:
        cur.execute(sql)
        return cur.fetchone()
