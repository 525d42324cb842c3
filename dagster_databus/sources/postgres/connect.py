"""psycopg2 connections to a PostgreSQL source: plain ones for queries and logical replication ones for the
slot's stream, with ``application_name`` ``databus:<source>``, the source's ``sslmode`` and connect timeout.

A refused login comes back from libpq as an ``OperationalError`` whose text is all there is to tell the
kinds apart (no SQLSTATE before the session exists), so ``connect_spec`` reads the text: a server that is
down or busy is ``SourceUnavailableError`` (transient), wrong credentials or a missing database are
``ConfigError`` naming the field, a server that refuses this user (pg_hba.conf, no REPLICATION) is
``CaptureNotInstalledError``. Text it does not know stays transient, as an unreachable server's would.

``PostgresConnector.spec`` is the same settings as plain data (the password resolved), for Spark tasks."""

from __future__ import annotations

from typing import Any, Literal, overload

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from dagster_databus.config import PostgresSourceConfig
from dagster_databus.errors import CaptureNotInstalledError, ConfigError, DatabusError, SourceUnavailableError

Connection = psycopg2.extensions.connection
ReplicationConnection = psycopg2.extras.LogicalReplicationConnection

# Messages (libpq's and the server's, as PostgreSQL words them in English) that a setting has to change for,
# each with the field at fault. Everything else is treated as a server that cannot be reached now.
_PASSWORD = ("password authentication failed", "no password supplied", "fe_sendauth: no password",
             "authentication failed for user")
_SSL_CONFIG = ("server does not support ssl", "root certificate file", "certificate verify failed",
               "server certificate for", "sslmode value", "does not match host name")


# Every session's output settings, the replication one's too (its pgoutput text comes from the same output
# functions): values print the same by either road and the converters (``types``) read one form of each.
SESSION_OPTIONS = ("-c DateStyle=ISO -c IntervalStyle=iso_8601 -c TimeZone=UTC -c extra_float_digits=3 "
                   "-c client_encoding=UTF8 -c bytea_output=hex")


def _field(spec: dict[str, Any], name: str) -> str:
    return f"sources.{spec['source']}.{name}"


@overload
def connect_spec(spec: dict[str, Any], replication: Literal[False] = False,
                 autocommit: bool = True) -> Connection: ...


@overload
def connect_spec(spec: dict[str, Any], replication: Literal[True],
                 autocommit: bool = True) -> ReplicationConnection: ...


def connect_spec(spec: dict[str, Any], replication: bool = False, autocommit: bool = True) -> Connection:
    """A connection made from ``PostgresConnector.spec()``'s settings: a plain one (``autocommit`` as asked),
    or with ``replication`` a ``LogicalReplicationConnection`` (the walsender protocol, for a slot's stream).
    Typed errors as the module says."""
    params = {k: v for k, v in spec.items() if k not in ("source", "password_field")}
    try:
        # psycopg2's stubs type connect() with keyword settings as Any: the factory decides the class.
        conn: Connection = psycopg2.connect(connection_factory=ReplicationConnection if replication else None,
                                            **params)
        if not replication:
            conn.autocommit = autocommit
        return conn
    except psycopg2.OperationalError as exc:
        raise connect_error(spec, str(exc), replication) from None


def connect_error(spec: dict[str, Any], message: str, replication: bool = False) -> DatabusError:
    """The typed error for a refused connection: ``message`` is libpq's text."""
    where = f"{spec['host']}:{spec['port']}"
    source, user, database = spec["source"], spec["user"], spec["dbname"]
    text = message.strip()
    low = text.lower()
    first = text.splitlines()[0] if text else "no reason given"
    if any(m in low for m in _PASSWORD):
        return ConfigError(_field(spec, spec.get("password_field", "password")),
                           f"PostgreSQL at {where} refused the password of user {user!r}",
                           "correct the user and password (or password_env) for this server")
    if "role" in low and "does not exist" in low:
        return ConfigError(_field(spec, "user"), f"user (role) {user!r} does not exist on PostgreSQL at {where}",
                           f"name an existing user, or as an administrator: CREATE ROLE {user} LOGIN PASSWORD '...'")
    if "database" in low and "does not exist" in low:
        return ConfigError(_field(spec, "database"), f"database {database!r} does not exist on PostgreSQL at {where}",
                           "name an existing database (psql -l lists them)")
    if "no pg_hba.conf entry" in low:
        kind = "replication connections" if "replication connection" in low or replication else "connections"
        line = (f"host replication {user} <this machine>/32 scram-sha-256" if replication
                else f"host {database} {user} <this machine>/32 scram-sha-256")
        return CaptureNotInstalledError(
            f"PostgreSQL at {where} does not accept {kind} from this machine for user {user!r} ({first})",
            f"as an administrator, add a pg_hba.conf line such as '{line}' and SELECT pg_reload_conf() (managed "
            "services: allow this network in the instance's settings)", source=source)
    if "replication role" in low or "permission denied to start wal sender" in low:
        return CaptureNotInstalledError(
            f"user {user!r} may not open a replication connection to PostgreSQL at {where}: it has neither "
            "REPLICATION nor superuser",
            f"as an administrator: ALTER ROLE {user} REPLICATION (Amazon RDS/Aurora: GRANT rds_replication TO "
            f"{user}; Cloud SQL: ALTER USER {user} WITH REPLICATION)", source=source)
    if "permission denied for database" in low or "not permitted to log in" in low:
        return CaptureNotInstalledError(
            f"user {user!r} may not connect to database {database!r} on PostgreSQL at {where} ({first})",
            f"as an administrator: GRANT CONNECT ON DATABASE {database} TO {user} (and ALTER ROLE {user} LOGIN)",
            source=source)
    if any(m in low for m in _SSL_CONFIG):
        return ConfigError(_field(spec, "sslmode"),
                           f"TLS to PostgreSQL at {where} failed as sslmode {spec.get('sslmode')!r} asks ({first})",
                           "enable TLS on the server (ssl = on), give libpq the CA (PGSSLROOTCERT or "
                           "~/.postgresql/root.crt) for verify-ca/verify-full, or choose a weaker sslmode")
    if "max_wal_senders" in low or "replication slots" in low:
        return SourceUnavailableError(
            f"PostgreSQL at {where} has no walsender free for a replication connection ({first})",
            "wait for other replication clients to finish, or raise max_wal_senders (restart needed)",
            source=source)
    return SourceUnavailableError(
        f"cannot reach PostgreSQL source {source!r} at {where}: {first}",
        "check host and port, that the server is running and accepts TCP connections from this machine "
        "(listen_addresses, firewall)", source=source)


class PostgresConnector:
    """Connections to one source's database, as its config says."""

    def __init__(self, config: PostgresSourceConfig) -> None:
        self.config = config
        self.name = config.name

    def describe(self) -> str:
        return f"{self.config.host}:{self.config.port}/{self.config.database}"

    def field(self, suffix: str) -> str:
        """The config field ``suffix`` of this source, as errors name it."""
        return f"sources.{self.name}.{suffix}"

    def spec(self) -> dict[str, Any]:
        """libpq's connection settings, the password resolved, plus ``source`` (and which field holds the
        password) for errors: plain picklable data, what ``connect_spec`` takes in a Spark task."""
        c = self.config
        return {"host": c.host, "port": c.port, "user": c.user, "password": c.resolved_password(),
                "dbname": c.database, "sslmode": c.sslmode, "connect_timeout": c.connect_timeout_s,
                "application_name": f"databus:{c.name}", "options": SESSION_OPTIONS, "source": c.name,
                "password_field": "password_env" if c.password_env is not None else "password"}

    def connect(self, autocommit: bool = True) -> Connection:
        """A plain connection to the source's database."""
        return connect_spec(self.spec(), autocommit=autocommit)

    def replication(self) -> ReplicationConnection:
        """A logical replication connection to the source's database (``START_REPLICATION`` on its slot)."""
        return connect_spec(self.spec(), replication=True)
