"""``PostgresSource``, the capture adapter of a PostgreSQL database (``base.Source``): a record of its four
parts, each in the module named after it, over one connector:

- ``catalog`` (``catalog.PostgresCatalog``): the tables' schemas from ``pg_catalog``, moved on by relation
  messages;
- ``setup`` (``setup.PostgresSetup``): the publication, the slot, REPLICA IDENTITY (installed after the
  catalog's checks); the server's settings and rights;
- ``stream`` (``stream.PostgresStream``): the slot read with ``pgoutput``, positions as WAL LSNs;
- ``reads`` (``reads.PostgresReads``): reads at an exported snapshot's LSN, in process or by key range in tasks;

beneath them ``connect`` (``PostgresConnector``): plain and replication connections, typed connection errors.
"""

from __future__ import annotations

from collections.abc import Mapping

from dagster_databus.config import PostgresSourceConfig
from dagster_databus.core.scn import Scn
from dagster_databus.sources.base import Retention
from dagster_databus.sources.postgres.catalog import PostgresCatalog
from dagster_databus.sources.postgres.connect import PostgresConnector
from dagster_databus.sources.postgres.reads import PostgresReads
from dagster_databus.sources.postgres.setup import PostgresSetup
from dagster_databus.sources.postgres.slots import slot_retention
from dagster_databus.sources.postgres.stream import PostgresStream


class PostgresSource:
    kind = "postgres"
    sees_ddl = True  # column changes arrive as relation messages, TRUNCATE as its own message
    install_repairs = False  # verify's problems are server settings and rights, each with its own fix

    def __init__(self, config: PostgresSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self.connector = connector = PostgresConnector(config)
        self.catalog = catalog = PostgresCatalog(connector)
        self.setup = PostgresSetup(connector, config, catalog)
        self.stream = PostgresStream(connector, catalog)
        self.reads = PostgresReads(connector, catalog)

    def retention(self) -> Retention:
        """The WAL the capture slot holds back on the server (``base.Retaining``)."""
        return slot_retention(self.connector, self.config, self.stream.slot())

    def drift(self, since: Scn, state: Mapping[str, str]) -> list[str]:
        """The slot or publication replaced behind capture's back since the checkpoint (``Drifting``)."""
        return self.stream.drift.problems(since, state)

    def uninstall(self) -> tuple[str, ...]:
        """Drop the slot and the publication install created (``Uninstallable``)."""
        return self.setup.uninstall()
