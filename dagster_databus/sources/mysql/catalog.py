"""The catalog of a MySQL source: the configured tables' columns, mapped types and unique key, from
``information_schema`` of the server capture reads (``dialect.CATALOG``); and the shapes capture decoded last.
"""

from __future__ import annotations

from collections.abc import Mapping

from dagster_databus.core.schema import TableSchema
from dagster_databus.sources.generic.catalog import SqlCatalog
from dagster_databus.sources.mysql.connect import Cursor
from dagster_databus.sources.mysql.dialect import CATALOG
from dagster_databus.sources.mysql.servers import MysqlServers


class MysqlCatalog(SqlCatalog[Cursor]):
    """The configured tables' schemas, read from the server capture reads (again after it changes), and moved
    on by the binlog as capture decodes new shapes of them (``adopt``)."""

    def __init__(self, servers: MysqlServers) -> None:
        config = servers.config
        super().__init__(CATALOG, servers.name, config.tables, servers.connect, f"database {config.database!r}",
                         {"database": config.database})
        self.servers = servers
        self.config = config
        self._generation = servers.generation  # of the server the schemas were read from

    def preflight(self) -> Mapping[str, TableSchema]:
        schemas = super().preflight()
        self._generation = self.servers.generation
        return schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        current = self._current()
        return current if current is not None else self.preflight()

    def adopt(self, schemas: Mapping[str, TableSchema]) -> None:
        """These schemas become the current ones of their tables: the shapes a committed batch was decoded with
        (before any were read: the tables known, as a test knows them without a server)."""
        current = self._current()
        if current is None:
            self._schemas, self._generation = dict(schemas), self.servers.generation
        else:
            current.update(schemas)

    def _current(self) -> dict[str, TableSchema] | None:
        """The schemas read, unless the server capture reads has changed since (then they are read again)."""
        if self._generation != self.servers.generation:
            self._schemas = None
        return self._schemas
