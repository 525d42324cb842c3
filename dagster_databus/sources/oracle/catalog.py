"""The catalog of an Oracle source: connections to the database, and the configured tables' columns, mapped
types and unique key from the data dictionary, with the dictionary's own names of tables and columns (the
snapshot's may be lower-cased) and the capture objects each table has (``sql.TableObjects``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from functools import partial
from typing import TYPE_CHECKING

from dagster_databus.config import OracleSourceConfig
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.sources.catalog import (
    check_column_name,
    null_key_problem,
    null_key_query,
    require_mapped,
    require_unique_key,
    resolve_key,
    table_schemas,
)
from dagster_databus.sources.oracle.sql import TableObjects, quote
from dagster_databus.sources.oracle.types import (
    oracle_column_type,
    oracle_declared,
    output_type_handler,
    select_expression,
)

if TYPE_CHECKING:
    import oracledb


class OracleCatalog:
    """Connections, and the configured tables as the data dictionary has them."""

    def __init__(self, config: OracleSourceConfig) -> None:
        self.config = config
        self.name = config.name
        self._schemas: dict[str, TableSchema] | None = None
        self._actual: dict[str, str] = {}  # config table name -> name in the data dictionary
        self._columns: dict[str, dict[str, str]] = {}  # config table -> {snapshot column: dictionary column}

    def field(self, suffix: str) -> str:
        """The config field ``suffix`` of this source, as errors name it."""
        return f"sources.{self.name}.{suffix}"

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

    def preflight(self) -> Mapping[str, TableSchema]:
        with closing(self.connect()) as conn, closing(conn.cursor()) as cur:
            self._schemas = table_schemas(self.config.tables, partial(self._table_schema, cur))
        return self._schemas

    def schemas(self) -> Mapping[str, TableSchema]:
        return self._schemas if self._schemas is not None else self.preflight()

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

    def null_keys(self) -> list[str]:
        """A problem for each configured table whose key columns hold NULL (a UNIQUE key may)."""
        problems = []
        with closing(self.connect()) as conn, closing(conn.cursor()) as cur:
            for table, schema in self.preflight().items():
                keys = [quote(self._columns[table][k]) for k in schema.primary_key]
                cur.execute(null_key_query(quote(self._actual[table]), keys) + " FETCH FIRST 1 ROWS ONLY")
                problem = null_key_problem(schema, cur.fetchone() is not None)
                if problem:
                    problems.append(problem)
        return problems

    def _out(self, name: str) -> str:
        return name.lower() if self.config.lowercase_names else name

    def _table_schema(self, cur: oracledb.Cursor, index: int, table: str, key: tuple[str, ...]) -> TableSchema:
        where = self.field(f"tables[{index}]")
        cur.execute("SELECT table_name FROM user_tables WHERE table_name = :t OR "
                    "(UPPER(table_name) = UPPER(:t) AND NOT EXISTS (SELECT 1 FROM user_tables WHERE table_name = :t))",
                    t=table)
        row = cur.fetchone()
        if row is None:
            cur.execute("SELECT table_name FROM user_tables WHERE table_name NOT LIKE 'SY$%' ORDER BY 1")
            existing = ", ".join(r[0] for r in cur.fetchall()) or "(none)"
            raise ConfigError(f"{where}.name", f"table {table!r} does not exist in schema {self.config.user!r}",
                              f"use one of the schema's tables: {existing}")
        actual = row[0]
        self._actual[table] = actual
        cur.execute("SELECT column_name, data_type, data_precision, data_scale FROM user_tab_columns "
                    "WHERE table_name = :t AND column_name <> 'TXN' ORDER BY column_id", t=actual)
        columns, mapping, unmapped = [], {}, []
        for name, data_type, precision, scale in cur.fetchall():
            out = self._out(name)
            check_column_name(out, table, where)
            declared = oracle_declared(data_type, precision, scale)
            ctype = oracle_column_type(declared)
            if ctype is None:
                unmapped.append(f"{name} {declared}")
                continue
            mapping[out] = name
            columns.append(Column(name=out, type=ctype, source_type=declared))
        require_mapped(self.name, table, unmapped, "Oracle", "change the column to a mapped type")
        self._columns[table] = mapping
        key = resolve_key(columns, key, table, where)
        cur.execute("SELECT c.constraint_name, cc.column_name FROM user_constraints c JOIN user_cons_columns cc "
                    "ON cc.constraint_name = c.constraint_name WHERE c.table_name = :t AND c.constraint_type IN "
                    "('P', 'U')", t=actual)
        reverse = {v: k for k, v in mapping.items()}
        unique: dict[str, set[str]] = {}
        for constraint, column in cur.fetchall():
            unique.setdefault(constraint, set()).add(reverse.get(column, column))
        require_unique_key(key, unique.values(), table, where)
        return TableSchema(source=self.name, table=table, columns=tuple(columns), primary_key=key)
