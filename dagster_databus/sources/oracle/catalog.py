"""The catalog of an Oracle source: connections to the database, and the configured tables' columns, mapped
types and unique key from the data dictionary (``dialect.CATALOG``), with the dictionary's own names of tables and
columns (the snapshot's may be lower-cased) and the capture objects each table has (``sql.TableObjects``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagster_databus.config import OracleSourceConfig
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.sources.generic.catalog import SqlCatalog
from dagster_databus.sources.oracle.dialect import CATALOG
from dagster_databus.sources.oracle.sql import TableObjects, quote
from dagster_databus.sources.oracle.types import output_type_handler, select_expression

if TYPE_CHECKING:
    import oracledb


class OracleCatalog(SqlCatalog["oracledb.Cursor"]):
    """Connections, and the configured tables as the data dictionary has them."""

    def __init__(self, config: OracleSourceConfig) -> None:
        super().__init__(CATALOG, config.name, config.tables, self.connect, f"schema {config.user!r}")
        self.config = config
        self._actual: dict[str, str] = {}  # config table name -> name in the data dictionary
        self._columns: dict[str, dict[str, str]] = {}  # config table -> {snapshot column: dictionary column}

    def connect(self) -> oracledb.Connection:
        import oracledb

        c = self.config
        try:
            conn = oracledb.connect(user=c.user, password=c.resolved_password(), dsn=c.dsn,
                                    tcp_connect_timeout=c.connect_timeout_s)
        except oracledb.Error as exc:
            text = str(exc)
            if "ORA-01017" in text:
                raise ConfigError(self.field("password"), f"invalid username/password for {c.user!r} at {c.dsn}",
                                  "correct user and password (or password_env)") from None
            raise SourceUnavailableError(f"cannot reach Oracle source {self.name!r} at {c.dsn}: {text}",
                                         "check the dsn (host:port/service), the listener and the network",
                                         source=self.name) from None
        conn.outputtypehandler = output_type_handler  # NUMBER as Decimal, LOBs inline: exact values
        return conn

    def table(self, table: str) -> str:
        """The table's name in the data dictionary, quoted."""
        return quote(self._actual[table])

    def columns(self, table: str) -> dict[str, str]:
        """The snapshot's column names of ``table`` and their names in the data dictionary (unquoted)."""
        return self._columns[table]

    def quoted_columns(self, table: str) -> dict[str, str]:
        """The snapshot's column names of ``table`` and their quoted dictionary names (what a filter may name)."""
        return {name: quote(actual) for name, actual in self._columns[table].items()}

    def objects(self, table: str) -> TableObjects:
        """The capture objects of ``table`` (its view, shadow table, triggers), named as install renders them."""
        schema = self.schemas()[table]
        mapping = self._columns[table]
        return TableObjects(table=self._actual[table], source=self.name,
                            key=tuple(mapping[k] for k in schema.primary_key),
                            columns=tuple(mapping[c.name] for c in schema.columns))

    def select_list(self, table: str, names: Sequence[str], alias: str = "") -> str:
        """Exact-value SELECT expressions (``oracle.types.select_expression``) of ``names``, over ``alias``."""
        schema, mapping = self.schemas()[table], self._columns[table]
        prefix = f"{alias}." if alias else ""
        return ", ".join(select_expression(prefix + quote(mapping[n]), schema.column(n).source_type, quote(mapping[n]))
                         for n in names)

    def columns_of(self, cur: oracledb.Cursor, table: str, where: str) -> Sequence[tuple[Any, ...]] | None:
        """The columns of the table of that name, or else the one name that differs from it in case only."""
        cur.execute("SELECT table_name FROM user_tables WHERE table_name = :t OR "
                    "(UPPER(table_name) = UPPER(:t) AND NOT EXISTS (SELECT 1 FROM user_tables WHERE table_name = :t))",
                    t=table)
        row = cur.fetchone()
        if row is None:
            return None
        self._actual[table] = row[0]
        return self.rows(cur, self.dialect.columns, table_name=row[0])

    def column_name(self, name: str) -> str:
        return name.lower() if self.config.lowercase_names else name

    def build(self, table: str, key: Sequence[str], rows: Sequence[tuple[Any, ...]], where: str,
              recorded: Mapping[str, Column] | None = None) -> TableSchema:
        spelled = {self.column_name(row[0]): row[0] for row in rows}
        schema = super().build(table, key, rows, where, recorded)
        self._columns[table] = {c.name: spelled[c.name] for c in schema.columns}
        return schema

    def unique_sets(self, cur: oracledb.Cursor, table: str, key: tuple[str, ...], where: str) -> list[set[str]]:
        # By the dictionary's names of the table and its columns: a key is compared with them in any case.
        return super().unique_sets(cur, self._actual[table], key, where)

    def quoted_table(self, table: str) -> str:
        return self.table(table)

    def quoted_column(self, table: str, column: str) -> str:
        return quote(self._columns[table][column])
