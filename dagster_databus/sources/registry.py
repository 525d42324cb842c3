"""The source kinds: one ``SourceKind`` entry per kind, the only place outside a kind's own package (and its config
model, ``config.sources``) that knows the list. Every other layer asks the registry what it needs of a kind:

- its config model (the YAML's ``kind:`` choice), its name as messages give it, what capture installs in the
  database (the Dagster capture asset's description), what its positions count (``databus status``), and the
  settings a new source of it starts from (the Dagster component's scaffold);
- its adapter (``base.Source``, made with the source's config) and its range reader (``read_range(read, index) ->
  TableRead``: one key range of a ``RangeRead`` on a connection of its own, run where a task runs);
- which optional capabilities it has, as the protocols of ``base`` its adapter implements (``supports``):
  ``Failover``, ``Retaining``, ``Alerting``, ``Uninstallable``, ``Drifting``;
- what ``databus warm`` runs for it: a sample database that needs no server (the embedded kind's), and the
  kernels its capture compiles that the sample's pipeline does not reach.

A kind's code lives in its package, ``sources.<kind>``, laid out alike: the adapter class in ``source``, the range
reader ``reads.read_range``, the filter dialect ``dialect.FILTERS``; an entry names its adapter class and its
optional code as ``module:attribute`` text in that package. Code is imported when first used, so a process
imports only the drivers of the kinds it meets (no MySQL or Oracle driver where only SQLite is read).
``tests/unit/test_kinds.py`` holds every kind to its entry on every road, and fails where a module elsewhere
names a kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

from dagster_databus.config import MysqlSourceConfig, OracleSourceConfig, PostgresSourceConfig, SqliteSourceConfig
from dagster_databus.config.sources import SourceBase
from dagster_databus.sources.base import RangeRead, Sample, Source, TableRead

if TYPE_CHECKING:
    from dagster_databus.config import SourceConfig
    from dagster_databus.sources.filters import FilterDialect
    from dagster_databus.sources.mysql.source import MysqlSource
    from dagster_databus.sources.oracle.source import OracleSource
    from dagster_databus.sources.postgres.source import PostgresSource
    from dagster_databus.sources.sqlite.source import SqliteSource

RangeReader = Callable[[RangeRead, int], TableRead]


@dataclass(frozen=True, slots=True)
class SourceKind:
    """A kind of source (``kind:`` in the config) and where its code lives."""

    config: type[SourceBase]  # the config model (config.sources), whose ``kind`` literal is this kind's name
    label: str  # as messages name it ("MySQL/MariaDB")
    installs: str  # what install and verify do in the database, ``{name}`` the source's (the capture asset)
    positions: str  # what its SCNs count (lag is their difference)
    adapter: str  # the Source class of the kind's ``source`` module, called with the source's config
    # A source's settings beside name, kind and tables, for a user to edit: where its database is, who connects.
    example: Mapping[str, Any] = field(default_factory=dict)
    # The optional code below is "module:attribute" within the kind's package.
    sample: str | None = None  # "module:function": (folder, rows) -> Sample, for a kind that needs no server
    warm: str | None = None  # "module:function": () -> str, compiles its capture's kernels the sample misses
    # "module:function": (old, new declared type) -> bool, a column type change proven to keep every stored value
    # (``sync.evolve``); None where the log cannot show how the source converted values (no change is proven).
    retypes: str | None = None

    @property
    def name(self) -> str:
        return str(get_args(self.config.model_fields["kind"].annotation)[0])

    def _code(self, reference: str) -> object:
        """``module:attribute`` of the kind's package (``sources.<name>``), imported when first asked for."""
        return _load(f"{_PACKAGE}.{self.name}.{reference}")

    def open(self, config: SourceConfig) -> Source:
        """The adapter of a source of this kind."""
        source = cast(Callable[["SourceConfig"], object], self._code(f"source:{self.adapter}"))(config)
        if not isinstance(source, Source):
            raise TypeError(f"{self.name}.source:{self.adapter} does not implement the Source protocol "
                            "(sources.base.Source)")
        return source

    def read_range(self, read: RangeRead, index: int) -> TableRead:
        """Range ``index`` of ``read``, on a connection of its own, at the SCN it reports."""
        return cast(RangeReader, self._code("reads:read_range"))(read, index)

    def supports(self, capability: type) -> bool:
        """Whether the kind's adapter implements ``capability``, a runtime-checkable protocol of ``base``
        (``Failover``, ``Retaining``, ``Alerting``, ``Uninstallable``): known without a database."""
        return issubclass(cast(type, self._code(f"source:{self.adapter}")), capability)

    def filter_dialect(self) -> FilterDialect:
        """What a refresh filter may hold in the kind's SQL, and how it is written (``sources.filters``)."""
        from dagster_databus.sources.filters import FilterDialect

        dialect = self._code("dialect:FILTERS")
        if not isinstance(dialect, FilterDialect):
            raise TypeError(f"{self.name}.dialect:FILTERS is not a FilterDialect (sources.filters)")
        return dialect

    def keeps_values(self) -> Callable[[str, str], bool] | None:
        """The kind's proof that a column's declared type change keeps every value, if it has one (``retypes``)."""
        return None if self.retypes is None else cast(Callable[[str, str], bool], self._code(self.retypes))

    def make_sample(self, folder: Path, rows: int) -> Sample:
        """A sample database of ``rows`` rows in ``folder`` (a kind with ``sample`` only)."""
        if self.sample is None:
            raise ValueError(f"{self.label} sources have no sample database: it needs a server")
        return cast(Callable[[Path, int], Sample], self._code(self.sample))(folder, rows)

    def warm_kernels(self) -> str | None:
        """Compile (or load from the cache) the kernels its capture runs that the sample's pipeline does not
        reach; what was warmed, or None when there is nothing of its own."""
        return None if self.warm is None else cast(Callable[[], str], self._code(self.warm))()


@cache
def _load(reference: str) -> object:
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


_PACKAGE = "dagster_databus.sources"
KINDS: Mapping[str, SourceKind] = {kind.name: kind for kind in (
    SourceKind(
        SqliteSourceConfig, "SQLite",
        installs="Installs and verifies change capture in SQLite source `{name}`: the txlog, epoch counter and "
                 "per-table triggers. Re-running changes nothing.",
        positions="txlog sequence numbers",
        adapter="SqliteSource", example={"path": "app.db"}, sample="sample:make_sample"),
    SourceKind(
        MysqlSourceConfig, "MySQL/MariaDB",
        installs="Verifies that MySQL source `{name}` is ready for binlog capture (log_bin, ROW format, FULL row "
                 "image and metadata, replica id, privileges) and records where capture starts.",
        positions="binlog bytes",
        adapter="MysqlSource", warm="wire.warm:warm", retypes="retypes:keeps_values",
        example={"host": "127.0.0.1", "port": 3306, "database": "app", "user": "databus",
                 "password_env": "DATABUS_MYSQL_PASSWORD"}),
    SourceKind(
        OracleSourceConfig, "Oracle",
        installs="Installs (idempotently) and verifies Databus capture in Oracle source `{name}`: sy$txlog, "
                 "sy$sources, sync_core, sync_alert, J_COALESCE_LOG, J_CALL_SIGNAL, and per table the txn column, "
                 "triggers, delete shadow table and sy$ view. Reports missing or INVALID objects by name.",
        positions="txlog sequence numbers",
        adapter="OracleSource",
        example={"dsn": "127.0.0.1:1521/FREEPDB1", "user": "databus", "password_env": "DATABUS_ORACLE_PASSWORD"}),
    SourceKind(
        PostgresSourceConfig, "PostgreSQL",
        installs="Installs and verifies logical decoding for PostgreSQL source `{name}`: the publication of its "
                 "tables, the replication slot capture reads with pgoutput, REPLICA IDENTITY where a table needs "
                 "it, and the server's settings and rights (wal_level, slots, senders). Re-running changes "
                 "nothing.",
        positions="WAL bytes",
        adapter="PostgresSource",
        example={"host": "127.0.0.1", "port": 5432, "database": "app", "user": "databus",
                 "password_env": "DATABUS_POSTGRES_PASSWORD"}),
)}


if TYPE_CHECKING:  # mypy holds each registered adapter to the Source protocol (the entries name them as text)
    _ADAPTERS: tuple[type[Source], ...] = (SqliteSource, MysqlSource, OracleSource, PostgresSource)


def source_kind(name: str) -> SourceKind:
    """The registered kind ``name``."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unsupported source kind {name!r}") from None  # config validation prevents this


def embedded_kind() -> SourceKind:
    """The kind whose database needs no server: ``databus warm`` runs its sample, a new component starts from it."""
    return next(kind for kind in KINDS.values() if kind.sample is not None)
