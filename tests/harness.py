"""Per-source-kind test harnesses: create tables, write transactions, build a config.

The behavioural tests are written against ``SourceHarness`` so that every source kind that
can run here runs the same suite (``conftest.source`` parametrizes over them).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.demo.workload import MYSQL_SCHEMA, Database, MysqlDatabase, ShopWorkload, create_shop
from tests.mariadb import MariaDBServer

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


class SqliteHarness:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")

    def execute(self, statements: Sequence[Statement], commit: bool = True) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in statements:
                sql, params = (statement, ()) if isinstance(statement, str) else statement
                conn.execute(sql, params)
            conn.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            conn.close()

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


class MysqlHarness:
    """One fresh database on a (shared) MariaDB server with binary logging."""

    kind = "mysql"

    def __init__(self, server: MariaDBServer) -> None:
        self.server = server
        self.database = f"db{next(_databases)}"
        server.execute(f"CREATE DATABASE {self.database}")

    def connect(self) -> Any:
        conn = self.server.connect(self.database)
        conn.autocommit(False)
        return conn

    def execute(self, statements: Sequence[Statement], commit: bool = True) -> None:
        db: Database = MysqlDatabase(self.connect)
        try:
            db.begin()
            for statement in statements:
                sql, params = (statement, ()) if isinstance(statement, str) else statement
                db.execute(sql, params)
            db.commit() if commit else db.rollback()
        finally:
            db.close()

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.server.query(sql, self.database)

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        return {"name": name, "kind": "mysql", "host": "127.0.0.1", "port": self.server.port, "user": "root",
                "password": "", "database": self.database,
                "tables": [{"name": t, "primary_key": list(k)} for t, k in tables], **extra}

    def create_shop(self) -> None:
        self.server.execute(*MYSQL_SCHEMA, database=self.database)

    def workload(self, seed: int) -> ShopWorkload:
        return ShopWorkload(lambda: MysqlDatabase(self.connect), seed=seed)


def make_config(lake: Path, *sources: dict[str, Any]) -> DatabusConfig:
    return parse_config({"lake": str(lake), "sources": list(sources)}, base=lake.parent)
