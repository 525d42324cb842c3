"""Configuration: the YAML file named by ``DATABUS_CONFIG`` (default: the embedded demo).

Loading checks the file's shape and every identifier, and resolves relative paths against
the file's folder. It touches no database and writes nothing; ``sources.preflight`` checks
the databases themselves before a run writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from dagster_databus.core.cron import cron_problem
from dagster_databus.core.identifiers import PLAIN_NAME, RESERVED_PREFIX, is_plain_name
from dagster_databus.errors import ConfigError
from dagster_databus.storage.lake import Lake

CONFIG_ENV = "DATABUS_CONFIG"
DEMO_CONFIG = Path(__file__).resolve().parent.parent / "config" / "demo.yaml"
SUPPORTED_KINDS = ("sqlite", "mysql", "oracle")


def _plain(value: str) -> str:
    if not is_plain_name(value):
        raise ValueError(
            f"{value!r} is not a plain identifier; use letters, digits and underscores, "
            f"starting with a letter or underscore (pattern {PLAIN_NAME.pattern})"
        )
    if value.startswith(RESERVED_PREFIX):
        raise ValueError(f"{value!r} starts with {RESERVED_PREFIX!r}, which is reserved for metadata columns")
    return value


def _unique_table_names(value: tuple[TableConfig, ...]) -> tuple[TableConfig, ...]:
    names = [t.name.lower() for t in value]
    if len(set(names)) != len(names):
        raise ValueError("a table is listed twice")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# What a change to a captured table's columns does (docs/types.md, "Schema changes"): evolve the
# snapshot in place where the change keeps every value exact (columns added, types widened), else
# read the table again; resnapshot: always read it again; stop: hold the snapshot at the change.
SchemaChanges = Literal["evolve", "resnapshot", "stop"]


class TableConfig(_Strict):
    name: str
    primary_key: tuple[str, ...] = Field(min_length=1)
    schema_changes: SchemaChanges | None = None  # None: the source's policy
    # What a delete does to the snapshot: apply (the key's row goes: AUTO CDC's apply_as_deletes), or soft (the
    # row stays, marked __op = 'd' with the delete's SCN and commit time; readers of current rows skip it).
    deletes: Literal["apply", "soft"] = "apply"
    # A history table (SCD type 2, ``dataplane.history``) beside the snapshot: every version of every row.
    history: bool = False
    # Which columns' changes start a new version (the rest update the current version in place): these
    # only, or every column but these; neither: every column.
    track_history_columns: tuple[str, ...] | None = None
    track_history_except_columns: tuple[str, ...] = ()

    _check_name = field_validator("name")(lambda cls, v: _plain(v))

    @field_validator("primary_key")
    @classmethod
    def _check_key(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for column in value:
            _plain(column)
        if len(set(value)) != len(value):
            raise ValueError("primary_key names a column twice")
        return value

    @field_validator("track_history_columns", "track_history_except_columns")
    @classmethod
    def _check_tracked(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for column in value or ():
            _plain(column)
        return value

    @model_validator(mode="after")
    def _history_options(self) -> TableConfig:
        chosen = self.track_history_columns is not None or bool(self.track_history_except_columns)
        if chosen and not self.history:
            raise ValueError(f"table {self.name}: track_history_columns / track_history_except_columns apply to a "
                             "history table; add history: true, or remove them")
        if self.track_history_columns is not None and self.track_history_except_columns:
            raise ValueError(f"table {self.name}: give either track_history_columns (the columns that start a new "
                             "version) or track_history_except_columns (the columns that do not), not both")
        return self


class RetentionConfig(_Strict):
    """How much change log to keep; segments the snapshots have not absorbed are always kept."""

    max_age_hours: float | None = Field(default=None, gt=0)
    max_bytes: int | None = Field(default=None, gt=0)


def _schedule(value: str | None, example: str) -> str | None:
    """A ``cron`` field's value, refused with the problem and an example when it is not a schedule."""
    problem = cron_problem(value) if value is not None else None
    if problem:
        raise ValueError(f"{problem}; for example {example}")
    return value


class PollConfig(_Strict):
    chunk_rows: int = Field(default=10_000, ge=1, le=10_000_000)
    cron: str = "*/5 * * * *"
    # The capture-lag check fails when the source is more than this many SCNs ahead of the log.
    max_lag_scn: int | None = Field(default=None, ge=0)
    # The capture_lag and snapshot freshness checks fail when the log (or a snapshot) is this many
    # seconds of source commit time behind.
    max_lag_seconds: float | None = Field(default=None, gt=0)

    _check_cron = field_validator("cron")(lambda cls, v: _schedule(v, "'*/5 * * * *' (every 5 minutes) or '@hourly'"))


class ReconcileConfig(_Strict):
    """When the ``reconciled`` check (a full comparison with the source) runs: on its own cron schedule
    and/or after every N successful sync runs; never as part of every sync."""

    cron: str | None = "0 3 * * *"  # daily at 03:00; null: no schedule
    every_syncs: int | None = Field(default=None, ge=1)

    _check_cron = field_validator("cron")(
        lambda cls, v: _schedule(v, "'0 3 * * *' (daily at 03:00), or null for no schedule"))


class UpkeepConfig(_Strict):
    """Upkeep of the source's snapshot tables (``snapshot.upkeep``): small files joined, old files vacuumed,
    the Delta log checkpointed, on a schedule of its own."""

    cron: str | None = "0 4 * * *"  # daily at 04:00 (the schedule starts stopped); null: no schedule
    # VACUUM keeps files the tables stopped naming less than this long ago (time travel reaches that far),
    # and always those of the last bootstrap's version (what rebuild restores).
    retain_hours: int = Field(default=168, ge=0)

    _check_cron = field_validator("cron")(
        lambda cls, v: _schedule(v, "'0 4 * * *' (daily at 04:00), or null for no schedule"))


class _SourceBase(_Strict):
    """What every source kind has: a name, its tables, polling, retention and Dagster labels."""

    name: str
    tables: tuple[TableConfig, ...] = Field(min_length=1)
    poll: PollConfig = PollConfig()
    reconcile: ReconcileConfig = ReconcileConfig()
    upkeep: UpkeepConfig = UpkeepConfig()
    retention: RetentionConfig = RetentionConfig()
    schema_changes: SchemaChanges = "evolve"
    # Delta's change data feed on the source's snapshot tables (delta.enableChangeDataFeed): every merge also
    # records the rows it changed, for readChangeFeed (Spark) and load_cdf (delta-rs) between versions.
    change_data_feed: bool = False
    owners: tuple[str, ...] = ()  # Dagster asset owners: emails or team:<name>
    tags: dict[str, str] = Field(default_factory=dict)  # extra Dagster asset tags

    _check_name = field_validator("name")(lambda cls, v: _plain(v))
    _unique_tables = field_validator("tables")(lambda cls, v: _unique_table_names(v))

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def schema_policy(self, table: str) -> SchemaChanges:
        return self.table(table).schema_changes or self.schema_changes


class _ServerSourceBase(_SourceBase):
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


class SqliteSourceConfig(_SourceBase):
    kind: Literal["sqlite"]
    path: Path
    prune_txlog: bool = True
    busy_timeout_ms: int = Field(default=30_000, ge=0)
    # Text that is not valid UTF-8 (SQLite stores whatever bytes it is given): refuse stops capture and bootstrap
    # naming table, column and key; binary captures the tables' text columns outside the key as binary, every
    # value by its exact bytes (docs/types.md). A key is always text, and refused when not UTF-8.
    invalid_utf8: Literal["refuse", "binary"] = "refuse"


class StandbyConfig(_Strict):
    """A standby (replica) of a MySQL source's server, with the same data and ``log_slave_updates``. The
    source's ``tls`` applies to it too; its RSA key pair is its own (``server_public_key``)."""

    host: str
    port: int = Field(default=3306, ge=1, le=65535)
    server_public_key: Path | None = None


# MySQL's --ssl-mode, as docs/mysql.md ("TLS and authentication") describes each.
TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]
_VERIFYING: tuple[TlsMode, ...] = ("verify_ca", "verify_identity")


class MysqlTlsConfig(_Strict):
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


class FailoverConfig(_Strict):
    """When and how capture switches between a source's primary and its standby (docs/ha.md)."""

    # The active server counts as down after this many failed connection attempts, this far apart.
    retries: int = Field(default=3, ge=1, le=100)
    interval_s: float = Field(default=5.0, ge=0, le=3600)
    # gtid: find the position after the last captured GTID (timestamp when the servers carry none);
    # timestamp: never use GTIDs: re-read from the last commit time minus fallback_interval_s.
    position: Literal["gtid", "timestamp"] = "gtid"
    fallback_interval_s: int = Field(default=60, ge=0, le=7 * 24 * 3600)


class MysqlSourceConfig(_ServerSourceBase):
    """A MySQL or MariaDB server, captured from its binary log."""

    kind: Literal["mysql"]
    host: str = "127.0.0.1"
    port: int = Field(default=3306, ge=1, le=65535)
    database: str
    # The replica server id capture registers with; must differ from every server and replica.
    server_id: int = Field(default=0, ge=0, lt=2**32)
    on_purged: Literal["fail", "bootstrap"] = "fail"
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

    _check_database = field_validator("database")(lambda cls, v: _plain(v))

    def replica_server_id(self) -> int:
        import zlib

        return self.server_id or 4_000_000 + zlib.crc32(self.name.encode()) % 1_000_000


class OracleSourceConfig(_ServerSourceBase):
    """An Oracle schema captured with Databus's triggers + sy$txlog design (python-oracledb, thin mode)."""

    kind: Literal["oracle"]
    dsn: str
    # Seconds the alert sensor waits in sync_alert.waitForEvent per evaluation.
    alert_wait_s: int = Field(default=20, ge=1, le=300)
    # Oracle folds unquoted names to upper case; with this on, tables and columns appear in the
    # log and the snapshots in lower case (ACCOUNTS.ID -> accounts.id).
    lowercase_names: bool = False


SourceConfig = Annotated[SqliteSourceConfig | MysqlSourceConfig | OracleSourceConfig, Field(discriminator="kind")]


class SparkConfig(_Strict):
    master: str = "local[2]"
    # A Spark Connect server (sc://host:port[/;param=value...]): each run is a thin client of it instead of
    # starting its own Spark driver. Excludes master (the server has its own) and delta_jars.
    remote: str | None = None
    # With remote: add this package to the session's Python path on the server (for a server whose Python
    # lacks it; its dependencies must be installed there).
    ship_package: bool = False
    # Folder holding delta-spark's jars (delta-spark_*.jar, delta-storage-*.jar), put on the session's
    # classpath (DATABUS_DELTA_JARS names one too): for merge.engine delta-spark (or auto).
    delta_jars: Path | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("remote")
    @classmethod
    def _remote_url(cls, value: str | None) -> str | None:
        if value is not None and not (value.startswith("sc://") and len(value) > len("sc://")):
            raise ValueError(f"{value!r} is not a Spark Connect URL; write sc://host:port (15002 when left out), "
                             "for example sc://spark-connect.internal:15002")
        return value

    @model_validator(mode="after")
    def _remote_or_master(self) -> SparkConfig:
        if self.remote is None:
            if self.ship_package:
                raise ValueError("ship_package applies only with spark.remote (a Spark Connect server); remove it, "
                                 "or set spark.remote")
            return self
        if "master" in self.model_fields_set:
            raise ValueError(f"both master ({self.master!r}) and remote ({self.remote!r}) are set; a run either "
                             "starts its own Spark driver (master) or is a client of a Spark Connect server "
                             "(remote, whose own master applies): remove one of them")
        if self.delta_jars is not None:
            raise ValueError("delta_jars cannot be used with remote: a Spark Connect server's classpath is fixed "
                             "when it starts; start the server with delta-spark's jars and remove delta_jars")
        return self


MergeEngineName = Literal["spark", "delta-spark", "local", "auto"]


class MergeConfig(_Strict):
    """How snapshots are bootstrapped and merged (docs/architecture.md, "Engines").

    ``spark``: Spark tasks read the source and the change log, reduce, and write the Delta data files;
    the driver commits them through delta-rs. ``delta-spark``: Spark's own Delta MERGE (its jars must
    be on the session's classpath). ``local``: one process reads, reduces and MERGEs through delta-rs,
    no Spark (small single-machine setups). ``auto``: delta-spark where its classes load, else spark.
    """

    engine: MergeEngineName = "spark"
    # The newest change per key is reduced in bounded memory: changes beyond this many MiB spill to
    # files in spill_dir (the system temp folder, or each Spark executor's, when unset).
    memory_mb: int = Field(default=256, ge=16)
    spill_dir: Path | None = None
    # Rows per data file the spark engine writes (bootstrap and rewritten files). A merge rewrites
    # every file that holds a changed key whole: smaller files rewrite less per change, larger ones
    # mean fewer files to list and open (docs/performance.md, "File size").
    file_rows: int = Field(default=1_000_000, ge=1)
    # Tables of a source the Spark engines sync at once (each a driver thread that mostly waits on its
    # jobs, which share the cluster); the local engine syncs one at a time, on this machine's cores.
    parallel_tables: int = Field(default=4, ge=1)


class LogicalPartConfig(_Strict):
    """One physical table of a logical table: a configured table of a configured source."""

    source: str
    table: str
    # The part's value in the logical table's shard column when the table has no such column.
    shard: str | None = None

    @property
    def label(self) -> str:
        return self.shard if self.shard is not None else f"{self.source}.{self.table}"


class LogicalTableConfig(_Strict):
    """Sharded physical tables merged into one logical snapshot (as Canal's group event sink merges shards).

    The logical key is ``(shard_column, *primary key)``. When the physical tables have a column
    named ``shard_column`` its values are used; otherwise the column is added with each part's
    label, so equal keys on different shards never collide.
    """

    name: str
    parts: tuple[LogicalPartConfig, ...] = Field(min_length=2)
    shard_column: str = "shard"
    upkeep: UpkeepConfig = UpkeepConfig()  # its own upkeep job and schedule (``<name>_logical_upkeep``)

    _check_name = field_validator("name")(lambda cls, v: _plain(v))
    _check_shard_column = field_validator("shard_column")(lambda cls, v: _plain(v))


class DatabusConfig(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    lake: Lake
    # Credentials and endpoint of an object-store lake; secrets only as ${ENV_VAR} references.
    storage_options: dict[str, str] = {}
    sources: tuple[SourceConfig, ...] = Field(min_length=1)
    logical_tables: tuple[LogicalTableConfig, ...] = ()
    spark: SparkConfig = SparkConfig()
    merge: MergeConfig = MergeConfig()
    path: Path | None = None

    @model_validator(mode="after")
    def _unique_sources(self) -> DatabusConfig:
        names = [s.name.lower() for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError("two sources share a name; each source needs its own name")
        return self

    @model_validator(mode="after")
    def _logical_parts_exist(self) -> DatabusConfig:
        seen: set[str] = set()
        for i, logical in enumerate(self.logical_tables):
            if logical.name.lower() in seen:
                raise ValueError(f"logical_tables[{i}]: logical table {logical.name!r} is defined twice")
            seen.add(logical.name.lower())
            labels = [p.label for p in logical.parts]
            if len(set(labels)) != len(labels):
                raise ValueError(f"logical_tables[{i}] ({logical.name}): two parts have the same shard label; "
                                 "give each part its own 'shard'")
            for j, part in enumerate(logical.parts):
                source = next((s for s in self.sources if s.name == part.source), None)
                if source is None:
                    raise ValueError(f"logical_tables[{i}].parts[{j}]: no source named {part.source!r}; use one "
                                     f"of: {', '.join(s.name for s in self.sources)}")
                if part.table not in {t.name for t in source.tables}:
                    raise ValueError(f"logical_tables[{i}].parts[{j}]: source {part.source!r} does not capture "
                                     f"table {part.table!r}; add it to sources.{part.source}.tables first")
        return self

    def logical_table(self, name: str) -> LogicalTableConfig:
        for t in self.logical_tables:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.logical_tables) or "(none)"
        raise ConfigError("logical_tables", f"no logical table named {name!r}", f"use one of: {known}")

    def source(self, name: str) -> SourceConfig:
        for s in self.sources:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.sources)
        raise ConfigError("sources", f"no source named {name!r}", f"use one of: {known}")


def config_path_from_env() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEMO_CONFIG)


def load_config(path: str | Path | None = None) -> DatabusConfig:
    """Read and validate a config file; raise ``ConfigError`` naming the field and the fix."""
    file = Path(path) if path is not None else config_path_from_env()
    try:
        text = file.read_text()
    except OSError as exc:
        if path is not None and os.environ.get(CONFIG_ENV) != str(path):  # named by the caller (--config)
            raise ConfigError(str(file), f"cannot read config file {file}: {exc.strerror or exc}",
                              "pass the path of a readable YAML file (--config)") from None
        raise ConfigError(
            CONFIG_ENV, f"cannot read config file {file}: {exc.strerror or exc}",
            f"point {CONFIG_ENV} at a readable YAML file",
        ) from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKeyError as exc:
        raise ConfigError(str(file), str(exc), "keep one of them: YAML takes the last silently, which is rarely "
                          "what was meant") from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(file), f"not valid YAML: {exc}", "fix the YAML syntax at the line shown") from None
    return parse_config(raw, base=file.resolve().parent, origin=file)


class _DuplicateKeyError(yaml.YAMLError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (``lake:`` twice, the second ``/``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise _DuplicateKeyError(f"key {key!r} is given twice in one mapping (lines {first} and "
                                         f"{key_node.start_mark.line + 1})")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def parse_config(raw: Any, base: Path, origin: Path | None = None) -> DatabusConfig:
    if not isinstance(raw, dict):
        raise ConfigError("(top level)", "the config must be a mapping with 'lake' and 'sources'",
                          "start from the example in README.md")
    if "lake" in raw:
        raw = {**raw, "lake": _lake(raw["lake"], raw.get("storage_options"), base)}
    for i, source in enumerate(raw.get("sources") or []):
        if isinstance(source, dict) and source.get("kind") not in SUPPORTED_KINDS:
            raise ConfigError(
                f"sources[{i}].kind", f"unknown source kind {source.get('kind')!r}",
                f"use one of: {', '.join(SUPPORTED_KINDS)}",
            )
    try:
        config = DatabusConfig.model_validate({**raw, "path": origin})
    except ValidationError as exc:
        raise _config_error(exc) from None
    return _resolve_paths(config, base)


def _lake(lake: Any, options: Any, base: Path) -> Any:
    """The ``lake:`` value (a folder, ``file://``, ``s3://``, ``gs://``, ``az://``/``abfss://``) with its
    ``storage_options``; a relative folder is taken from the config's folder."""
    from dagster_databus.errors import LakeLocationError

    if not isinstance(lake, str | Path):
        return lake  # pydantic names the type error
    if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) for k in options)):
        raise ConfigError("storage_options", "must be a mapping of option names to values",
                          "write storage_options as a YAML mapping, e.g. AWS_REGION: eu-west-1")
    try:
        return Lake.parse(str(lake), base=base, options={k: str(v) for k, v in (options or {}).items()})
    except LakeLocationError as exc:
        field = "storage_options" if "storage option" in str(exc) else "lake"
        raise ConfigError(field, str(exc), "give the lake as a folder (absolute or relative to the config) or a "
                          "URI such as s3://bucket/prefix; see README.md, \"Configuration\"") from None


def _resolve_paths(config: DatabusConfig, base: Path) -> DatabusConfig:
    def resolve(p: Path) -> Path:
        p = p.expanduser()
        return p if p.is_absolute() else (base / p).resolve()

    sources = tuple(s.model_copy(update={"path": resolve(s.path)}) if s.kind == "sqlite"
                    else _resolve_mysql_paths(s, resolve) if s.kind == "mysql" else s
                    for s in config.sources)
    spark = config.spark
    if spark.delta_jars is not None:
        spark = spark.model_copy(update={"delta_jars": resolve(spark.delta_jars)})
    merge = config.merge
    if merge.spill_dir is not None:
        merge = merge.model_copy(update={"spill_dir": resolve(merge.spill_dir)})
    return config.model_copy(update={"sources": sources, "spark": spark,
                                     "merge": merge})


def _resolve_mysql_paths(source: MysqlSourceConfig, resolve: Callable[[Path], Path]) -> MysqlSourceConfig:
    """The TLS files and public keys of a MySQL source, taken from the config's folder when relative."""

    def maybe(p: Path | None) -> Path | None:
        return resolve(p) if p is not None else None

    tls = source.tls.model_copy(update={"ca": maybe(source.tls.ca), "cert": maybe(source.tls.cert),
                                        "key": maybe(source.tls.key)})
    update: dict[str, Any] = {"tls": tls, "server_public_key": maybe(source.server_public_key)}
    if source.standby is not None:
        update["standby"] = source.standby.model_copy(
            update={"server_public_key": maybe(source.standby.server_public_key)})
    return source.model_copy(update=update)


def _config_error(exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    loc = _format_loc(err["loc"])
    kind = err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "missing":
        return ConfigError(loc, "required field is missing", f"add '{loc.rsplit('.', 1)[-1]}' to the config")
    if kind == "extra_forbidden":
        return ConfigError(loc, "unknown field", "remove it or check its spelling against README.md")
    return ConfigError(loc, msg, "correct the value as described; README.md lists every field")


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in SUPPORTED_KINDS:  # the discriminator tag pydantic inserts into the path
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"
