"""Per-source-kind test harnesses: create tables, write transactions, build a config.

The behavioural tests are written against ``SourceHarness`` so that every source kind that
can run here runs the same suite (``conftest.source`` parametrizes over them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.demo.workload import (
    MYSQL_SCHEMA,
    Database,
    DbApiDatabase,
    MysqlDatabase,
    ShopWorkload,
    SqliteDatabase,
    create_shop,
)
from dagster_databus.sources import sqlfiles
from dagster_databus.storage.lake import Lake
from tests.support.mariadb import MariaDBServer
from tests.support.postgres import PostgresServer

Statement = tuple[str, Sequence[Any]] | str


class SourceHarness(Protocol):
    kind: str

    def execute(self, statements: Sequence[Statement], commit: bool = True) -> None:
        """Run the statements as one transaction; committed, or rolled back when ``commit`` is False."""

    def query(self, sql: str) -> list[tuple[Any, ...]]: ...

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        ...

    def create_shop(self) -> None: ...

    def workload(self, seed: int) -> ShopWorkload: ...


class DatabaseHarness:
    """``execute`` for every kind: the statements as one transaction on a connection of the kind's ``Database``
    (the demo workload's, '?' placeholders translated where the driver needs others)."""

    def open_database(self) -> Database:
        raise NotImplementedError

    def before(self, db: Database, sql: str) -> None:
        """Called before each statement (Oracle commits ahead of DDL)."""

    def execute(self, statements: Sequence[Statement], commit: bool = True) -> None:
        """Run the statements as one transaction; committed, or rolled back when ``commit`` is False."""
        db = self.open_database()
        try:
            db.begin()
            for statement in statements:
                sql, params = (statement, ()) if isinstance(statement, str) else statement
                self.before(db, sql)
                db.execute(sql, params)
            db.commit() if commit else db.rollback()
        finally:
            db.close()


class SqliteHarness(DatabaseHarness):
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")

    def open_database(self) -> Database:
        return SqliteDatabase(self.path)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as conn:
            return conn.execute(sql).fetchall()

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        return {"name": name, "kind": "sqlite", "path": str(self.path),
                "tables": [{"name": t, "primary_key": list(k)} for t, k in tables], **extra}

    def create_shop(self) -> None:
        create_shop(self.path)

    def workload(self, seed: int) -> ShopWorkload:
        return ShopWorkload(self.path, seed=seed)


_databases = itertools.count(1)


class MysqlHarness(DatabaseHarness):
    """One fresh database on a (shared) MariaDB server with binary logging."""

    kind = "mysql"

    def __init__(self, server: MariaDBServer, database: str | None = None) -> None:
        """A new database on ``server``, or an existing one (a replica's copy) when ``database`` is given."""
        self.server = server
        self.database = database or f"db{next(_databases)}"
        if database is None:
            server.execute(f"CREATE DATABASE {self.database}")

    def connect(self) -> Any:
        conn = self.server.connect(self.database)
        conn.autocommit(False)
        return conn

    def open_database(self) -> Database:
        return MysqlDatabase(self.connect)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.server.query(sql, database=self.database)

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        return {"name": name, "kind": "mysql", "host": "127.0.0.1", "port": self.server.port, "user": "root",
                "password": "", "database": self.database,
                "tables": [{"name": t, "primary_key": list(k)} for t, k in tables], **extra}

    def create_shop(self) -> None:
        self.server.execute(*MYSQL_SCHEMA, database=self.database)

    def workload(self, seed: int) -> ShopWorkload:
        return ShopWorkload(lambda: MysqlDatabase(self.connect), seed=seed)


# What a SQLite poll does first: the changes so far become a window (a test can put several in front of one poll).
CUT = sqlfiles.load("sqlite", "cut.sql")
ORACLE_ENV = ("DATABUS_TEST_ORACLE_DSN", "DATABUS_TEST_ORACLE_USER", "DATABUS_TEST_ORACLE_PASSWORD")
ORACLE_SKIP = ("no Oracle server is configured: set DATABUS_TEST_ORACLE_DSN, DATABUS_TEST_ORACLE_USER and "
               "DATABUS_TEST_ORACLE_PASSWORD (a dedicated schema on Oracle Database Free; see docs/oracle.md)")
SUITE_TABLES = ("items", "tags", "customers", "orders", "order_items", "other")


def oracle_sql(sql: str) -> str:
    """The suite's portable SQL in Oracle's dialect: ':n' binds, BINARY_DOUBLE, MOD, VARCHAR2."""
    n = 0

    def bind(_: Any) -> str:
        nonlocal n
        n += 1
        return f":{n}"

    sql = re.sub(r"CREATE TABLE IF NOT EXISTS", "CREATE TABLE", sql)
    sql = re.sub(r"\bDOUBLE\b", "BINARY_DOUBLE", sql)
    sql = re.sub(r"\bTEXT\b", "VARCHAR2(4000)", sql)
    sql = re.sub(r"(\w+) % (\d+)", r"MOD(\1, \2)", sql)
    return re.sub(r"\?", bind, sql)


class DialectDatabase(DbApiDatabase):
    """A DB-API driver whose statements the suite's portable SQL is translated for (``dialect``)."""

    @staticmethod
    def dialect(sql: str) -> str:
        return sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(self.dialect(sql), list(params))
            return list(cur.fetchall()) if cur.description else []

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(self.dialect(sql), [list(r) for r in rows])


class OracleDatabase(DialectDatabase):
    dialect = staticmethod(oracle_sql)


class OracleHarness(DatabaseHarness):
    """The configured test schema, emptied of the suite's tables and of every capture object."""

    kind = "oracle"

    def __init__(self) -> None:
        import oracledb

        self.dsn, self.user, self.password = (os.environ[k] for k in ORACLE_ENV)
        self._oracledb = oracledb
        self.reset()

    def connect(self) -> Any:
        return self._oracledb.connect(user=self.user, password=self.password, dsn=self.dsn)

    def reset(self) -> None:
        from dagster_databus.sources import sqlfiles
        from dagster_databus.sources.oracle.sql import split_script

        statements = [f"DROP TABLE {t} PURGE" for t in SUITE_TABLES]
        statements += [f'DROP TABLE "SY$D_{t.upper()}" PURGE' for t in SUITE_TABLES]
        statements += [s.text for s in split_script(sqlfiles.load("oracle", "uninstall/02_core.sql"))]
        with self.connect() as conn, conn.cursor() as cur:
            for statement in statements:
                with contextlib.suppress(self._oracledb.DatabaseError):  # absent already
                    cur.execute(statement)

    def open_database(self) -> Database:
        return OracleDatabase(self.connect)

    def before(self, db: Database, sql: str) -> None:
        if sql.lstrip().upper().startswith(("CREATE", "ALTER", "DROP")):
            db.commit()  # DDL commits implicitly in Oracle; keep the suite's transactions apart

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        db = self.open_database()
        try:
            return db.execute(sql)
        finally:
            db.close()

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        return {"name": name, "kind": "oracle", "dsn": self.dsn, "user": self.user, "password": self.password,
                "lowercase_names": True, "tables": [{"name": t, "primary_key": list(k)} for t, k in tables], **extra}

    def create_shop(self) -> None:
        for ddl in MYSQL_SCHEMA:
            self.execute([ddl])

    def workload(self, seed: int) -> ShopWorkload:
        return ShopWorkload(lambda: OracleDatabase(self.connect), seed=seed)


def postgres_sql(sql: str) -> str:
    """The suite's portable SQL in PostgreSQL's dialect: '%s' binds (a literal '%' doubled), DOUBLE PRECISION."""
    sql = re.sub(r"\bDOUBLE\b(?!\s+PRECISION)", "DOUBLE PRECISION", sql)
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresDatabase(DialectDatabase):
    dialect = staticmethod(postgres_sql)


class PostgresHarness(DatabaseHarness):
    """One fresh database on a (shared) PostgreSQL server with logical decoding; ``close`` drops its slots and the
    database, so slots (a server-wide resource) do not pile up across tests."""

    kind = "postgres"

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.database = f"db{next(_databases)}"
        server.create_database(self.database)

    def connect(self) -> Any:
        return self.server.connect(self.database, autocommit=False)

    def open_database(self) -> Database:
        return PostgresDatabase(self.connect)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.server.query(postgres_sql(sql) if "?" in sql else sql, database=self.database)

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        return {"name": name, "kind": "postgres", "host": self.server.host, "port": self.server.port,
                "user": "postgres", "database": self.database,
                "tables": [{"name": t, "primary_key": list(k)} for t, k in tables], **extra}

    def create_shop(self) -> None:
        self.execute(list(MYSQL_SCHEMA))

    def workload(self, seed: int) -> ShopWorkload:
        return ShopWorkload(lambda: PostgresDatabase(self.connect), seed=seed)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a test that stopped the server leaves nothing to drop
            self.server.execute(
                ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                 "pg_backend_pid()", (self.database,)),
                ("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                 (self.database,)),
                f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


def make_config(lake: Path | Lake, *sources: dict[str, Any], **settings: Any) -> DatabusConfig:
    """A config of ``sources`` on ``lake`` (a folder, or a ``Lake`` as a config parsed it). The spark engine runs
    every merge as a Spark job unless ``merge.in_driver_mib`` says otherwise: these tests' tables are small, and
    would otherwise all merge in the driver (tests/spark/test_in_driver.py tests that)."""
    settings = {**settings, "merge": {"in_driver_mib": 0, **settings.get("merge", {})}}
    if isinstance(lake, Lake):
        if lake.path is None:
            return parse_config({"lake": lake.location.uri, "storage_options": dict(lake.templates),
                                 "sources": list(sources), **settings}, base=Path.cwd())
        lake = lake.path
    return parse_config({"lake": str(lake), "sources": list(sources), **settings}, base=lake.parent)


def config_document(config: DatabusConfig, sources: list[dict[str, Any]]) -> dict[str, Any]:
    """A config file's content for ``config``'s lake (with its storage options) and ``sources``."""
    lake = config.lake
    where = str(lake.path) if lake.path is not None else lake.location.uri
    return {"lake": where, "storage_options": dict(lake.templates), "sources": sources}
