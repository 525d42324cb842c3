"""One config model per source kind, and the union the ``kind`` field chooses from. A new kind is a
class here and an entry in ``SourceConfig`` (and its entry in ``sources.registry``, which names its code);
``resolved`` takes its relative paths from the config's folder. What the other layers ask of every source's
config is a method of ``SourceBase``, which a kind overrides, never a test of the model's class."""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from dagster_databus.config.fields import (
    PollConfig,
    ReconcileConfig,
    RetentionConfig,
    SchemaChanges,
    Strict,
    TableConfig,
    UpkeepConfig,
    VerifyConfig,
    VerifyPolicy,
    plain_name,
    unique_table_names,
)
from dagster_databus.errors import ConfigError, DatabusError


class SourceBase(Strict):
    """What every source kind has: a name, its tables, polling, retention and Dagster labels."""

    name: str
    tables: tuple[TableConfig, ...] = Field(min_length=1)
    poll: PollConfig = PollConfig()
    reconcile: ReconcileConfig = ReconcileConfig()
    verify: VerifyConfig = VerifyConfig()
    upkeep: UpkeepConfig = UpkeepConfig()
    retention: RetentionConfig = RetentionConfig()
    schema_changes: SchemaChanges = "evolve"
    # When the source no longer holds the changes after the checkpoint (a MySQL binlog purged; a PostgreSQL slot
    # invalidated, or its publication or slot dropped and created again; a SQLite file restored from an older copy,
    # or its txlog pruned by another lake): fail and name the fix, or start the log and snapshots afresh.
    on_purged: Literal["fail", "bootstrap"] = "fail"
    # Delta's change data feed on the source's snapshot tables (delta.enableChangeDataFeed): every merge also
    # records the rows it changed, for readChangeFeed (Spark) and load_cdf (delta-rs) between versions.
    change_data_feed: bool = False
    owners: tuple[str, ...] = ()  # Dagster asset owners: emails or team:<name>
    tags: dict[str, str] = Field(default_factory=dict)  # extra Dagster asset tags

    _check_name = field_validator("name")(lambda cls, v: plain_name(v))
    _unique_tables = field_validator("tables")(lambda cls, v: unique_table_names(v))

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def chosen_tables(self, named: Sequence[str] | None) -> list[str]:
        """The tables a command or run names (all of the source's when none); an unknown one is refused."""
        tables = list(named) if named else [t.name for t in self.tables]
        unknown = [t for t in tables if t not in {t.name for t in self.tables}]
        if unknown:
            raise DatabusError(f"source {self.name!r} captures no table named {', '.join(unknown)}",
                               f"name tables from the config: {', '.join(t.name for t in self.tables)}")
        return tables

    def schema_policy(self, table: str) -> SchemaChanges:
        return self.table(table).schema_changes or self.schema_changes

    def verify_policy(self, table: str) -> VerifyPolicy:
        return self.table(table).verify or self.verify.policy

    def resolved(self, resolve: Callable[[Path], Path]) -> SourceBase:
        """This source with the files it names taken from the config's folder when relative."""
        return self

    def in_lake(self, lake: str) -> SourceBase:
        """This source with what is named after the lake its change log is in (``lake``, a URI) filled in."""
        return self

    def when_purged(self) -> Literal["fail", "bootstrap"]:
        """What capture does when the source no longer holds the changes after the checkpoint (``on_purged``)."""
        return self.on_purged

    def exclusive_database(self) -> str | None:
        """For a database whose capture objects all its sources would share (so one source's pruning would cut
        another's changes), what identifies it however it is named (a file's resolved path); None where several
        sources may capture one database."""
        return None


class ServerSourceBase(SourceBase):
    """A database server reached over the network with a user and a password."""

    user: str
    password: str = ""
    password_env: str | None = None
    connect_timeout_s: int = Field(default=10, ge=1, le=600)
    bootstrap_chunk_rows: int = Field(default=50_000, ge=1)

    def resolved_password(self) -> str:
        if self.password_env is None:
            return self.password
        value = os.environ.get(self.password_env)
        if value is None:
            raise ConfigError(f"sources.{self.name}.password_env",
                              f"environment variable {self.password_env} is not set",
                              f"export {self.password_env}=<password>, or put the password in 'password'")
        return value


class SqliteSourceConfig(SourceBase):
    kind: Literal["sqlite"]
    path: Path
    prune_txlog: bool = True
    busy_timeout_ms: int = Field(default=30_000, ge=0)
    # Text that is not valid UTF-8 (SQLite stores whatever bytes it is given): refuse stops capture and bootstrap
    # naming table, column and key; binary captures the tables' text columns outside the key as binary, every
    # value by its exact bytes (docs/types.md). A key is always text, and refused when not UTF-8.
    invalid_utf8: Literal["refuse", "binary"] = "refuse"

    def resolved(self, resolve: Callable[[Path], Path]) -> SqliteSourceConfig:
        return self.model_copy(update={"path": resolve(self.path)})

    def exclusive_database(self) -> str:
        """The database file (its txlog serves one source)."""
        return str(Path(self.path).resolve())


class StandbyConfig(Strict):
    """A standby (replica) of a MySQL source's server, with the same data and ``log_slave_updates``. The
    source's ``tls`` applies to it too; its RSA key pair is its own (``server_public_key``)."""

    host: str
    port: int = Field(default=3306, ge=1, le=65535)
    server_public_key: Path | None = None


# MySQL's --ssl-mode, as docs/mysql.md ("TLS and authentication") describes each.
TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]
_VERIFYING: tuple[TlsMode, ...] = ("verify_ca", "verify_identity")


class MysqlTlsConfig(Strict):
    """TLS to a MySQL source's servers, the primary and its standby. Only the modes' rules are checked here:
    the files are read when a connection is made (in the process that makes it, a Spark task's too), so
    processes that never connect (the Dagster webserver, consumers) need not hold a client key."""

    mode: TlsMode = "preferred"
    # The CA certificate(s), PEM, the server's certificate must chain to; verify_* without it: the system's
    # trust store (a server whose certificate a public CA signed, as some managed services' are).
    ca: Path | None = None
    # A client certificate and its private key, PEM: for accounts created REQUIRE X509 / SUBJECT / ISSUER.
    cert: Path | None = None
    key: Path | None = Field(default=None, validate_default=True)

    @field_validator("ca")
    @classmethod
    def _ca_is_verified(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        mode = info.data.get("mode")
        if value is not None and mode not in _VERIFYING:
            raise ValueError(f"ca is what verify_ca and verify_identity check the server's certificate against, and "
                             f"mode {mode} checks nothing: set mode: verify_ca (or verify_identity), or remove ca")
        return value

    @field_validator("cert")
    @classmethod
    def _cert_needs_tls(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        mode = info.data.get("mode")
        if value is not None and mode in ("disabled", "preferred"):
            raise ValueError(f"a client certificate is presented only over TLS, which mode {mode} does not insist "
                             "on: set mode: required, verify_ca or verify_identity, or remove cert and key")
        return value

    @field_validator("key")
    @classmethod
    def _key_with_cert(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        cert = info.data.get("cert")
        if (value is None) != (cert is None) and "cert" in info.data:
            given, missing = ("key", "cert") if cert is None else ("cert", "key")
            raise ValueError(f"{given} is given without {missing}: the client certificate (cert) and its private "
                             "key (key) go together; give both, or neither")
        return value


class FailoverConfig(Strict):
    """When and how capture switches between a source's primary and its standby (docs/ha.md)."""

    # The active server counts as down after this many failed connection attempts, this far apart.
    retries: int = Field(default=3, ge=1, le=100)
    interval_s: float = Field(default=5.0, ge=0, le=3600)
    # gtid: find the position after the last captured GTID (timestamp when the servers carry none);
    # timestamp: never use GTIDs: re-read from the last commit time minus fallback_interval_s.
    position: Literal["gtid", "timestamp"] = "gtid"
    fallback_interval_s: int = Field(default=60, ge=0, le=7 * 24 * 3600)


class MysqlSourceConfig(ServerSourceBase):
    """A MySQL or MariaDB server, captured from its binary log."""

    kind: Literal["mysql"]
    host: str = "127.0.0.1"
    port: int = Field(default=3306, ge=1, le=65535)
    database: str
    # The replica server id capture registers with; must differ from every server and replica.
    server_id: int = Field(default=0, ge=0, lt=2**32)
    # MySQL's zero dates ('0000-00-00', '2024-00-15') have no value in Delta's date and timestamp types:
    # "error" stops capture at the first one (naming table, column and row); "null" stores them as NULL.
    zero_dates: Literal["error", "null"] = "error"
    standby: StandbyConfig | None = None
    failover: FailoverConfig = FailoverConfig()
    tls: MysqlTlsConfig = MysqlTlsConfig()
    # The primary's RSA public key (PEM), for caching_sha2_password (and sha256_password) full authentication
    # without TLS; unset, the client asks the server for it (docs/mysql.md, "TLS and authentication").
    server_public_key: Path | None = None
    # How a bootstrap's key range is pinned to a binlog position (docs/architecture.md, "Online snapshots"):
    # snapshot: the position MariaDB reports for a consistent snapshot; watermark: a write to the signal
    # table _databus_signal (install creates it) that orders the read after every commit before the
    # position; lock: the whole table as one range under a brief global read lock. auto: snapshot where the
    # server reports the position (MariaDB), else watermark (MySQL).
    bootstrap_reads: Literal["auto", "snapshot", "watermark", "lock"] = "auto"

    _check_database = field_validator("database")(lambda cls, v: plain_name(v))

    def replica_server_id(self) -> int:
        return self.server_id or 4_000_000 + zlib.crc32(self.name.encode()) % 1_000_000

    def resolved(self, resolve: Callable[[Path], Path]) -> MysqlSourceConfig:
        """The TLS files and public keys, taken from the config's folder when relative."""

        def maybe(p: Path | None) -> Path | None:
            return resolve(p) if p is not None else None

        tls = self.tls.model_copy(update={"ca": maybe(self.tls.ca), "cert": maybe(self.tls.cert),
                                          "key": maybe(self.tls.key)})
        update: dict[str, Any] = {"tls": tls, "server_public_key": maybe(self.server_public_key)}
        if self.standby is not None:
            update["standby"] = self.standby.model_copy(
                update={"server_public_key": maybe(self.standby.server_public_key)})
        return self.model_copy(update=update)


class OracleSourceConfig(ServerSourceBase):
    """An Oracle schema captured with Databus's triggers + sy$txlog design (python-oracledb, thin mode)."""

    kind: Literal["oracle"]
    dsn: str
    # Seconds the alert sensor waits in sync_alert.waitForEvent per evaluation.
    alert_wait_s: int = Field(default=20, ge=1, le=300)
    # Oracle folds unquoted names to upper case; with this on, tables and columns appear in the
    # log and the snapshots in lower case (ACCOUNTS.ID -> accounts.id).
    lowercase_names: bool = False


_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


class PostgresSourceConfig(ServerSourceBase):
    """A PostgreSQL database captured by logical decoding (``pgoutput``) from a replication slot (docs/postgres.md)."""

    kind: Literal["postgres"]
    host: str = "127.0.0.1"
    port: int = Field(default=5432, ge=1, le=65535)
    database: str
    schema_: str = Field(default="public", alias="schema")  # the tables' schema (``schema`` in the YAML)
    slot: str | None = None  # the logical replication slot; unset: databus_<name>
    publication: str | None = None  # the publication of the configured tables; unset: databus_<name>
    # libpq's sslmode (disable, allow, prefer, require, verify-ca, verify-full): managed services want require+.
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "prefer"
    # How long a consistent read (a bootstrap, a refresh) waits for the transactions running when it starts (a
    # prepared one left open among them) before it gives up, transient: creating its temporary slot needs them gone.
    snapshot_wait_s: int = Field(default=900, ge=1)

    _check_database = field_validator("database")(lambda cls, v: plain_name(v))
    _check_schema = field_validator("schema_")(lambda cls, v: plain_name(v))
    _check_publication = field_validator("publication")(lambda cls, v: v if v is None else plain_name(v))

    @field_validator("slot")
    @classmethod
    def _slot_spelling(cls, value: str | None) -> str | None:
        if value is not None and not _SLOT_NAME.fullmatch(value):
            raise ValueError(f"slot {value!r}: PostgreSQL names a replication slot with lower-case letters, digits and "
                             "underscores only, at most 63 of them; choose such a name")
        return value

    @model_validator(mode="after")
    def _names_fit(self) -> PostgresSourceConfig:
        # PostgreSQL cuts a longer name at 63 bytes in silence: install could not find its own objects again.
        name = self.publication_name
        if len(name.encode()) > 63:
            raise ValueError(f"the publication name {name!r} is longer than PostgreSQL's 63 bytes (it is derived from "
                             "the source's name when publication is not set): set publication to a shorter name")
        return self

    def in_lake(self, lake: str) -> PostgresSourceConfig:
        """The slot named after the source and the lake when ``slot`` is unset: a slot serves one change log
        (it is confirmed as that log commits), so the same source captured into two lakes reads two slots."""
        if self.slot is not None:
            return self
        digest = f"{zlib.crc32((lake + chr(0) + self.name).encode()):08x}"  # the whole name: a long one is cut
        return self.model_copy(update={"slot": f"databus_{self.name.lower()[:45]}_{digest}"})

    @property
    def slot_name(self) -> str:
        return self.slot or f"databus_{self.name.lower()[:55]}"

    @property
    def publication_name(self) -> str:
        return self.publication or f"databus_{self.name}".lower()


SourceConfig = Annotated[SqliteSourceConfig | MysqlSourceConfig | OracleSourceConfig | PostgresSourceConfig,
                         Field(discriminator="kind")]
# The ``kind`` values, in the union's order: what an unknown kind's error lists.
SUPPORTED_KINDS: tuple[str, ...] = tuple(get_args(model.model_fields["kind"].annotation)[0]
                                         for model in get_args(get_args(SourceConfig)[0]))
