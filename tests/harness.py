"""Per-source-kind test harnesses: create tables, write transactions, build a config.

The behavioural tests are written against ``SourceHarness`` so that every source kind that
can run here runs the same suite (``conftest.source`` parametrizes over them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from dagster_databus.config import DatabusConfig, parse_config


class SourceHarness(Protocol):
    kind: str

    def execute(self, statements: Sequence[tuple[str, Sequence[Any]] | str]) -> None:
        """Run the statements as one committed transaction."""

    def query(self, sql: str) -> list[tuple[Any, ...]]: ...

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        ...


class SqliteHarness:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")

    def execute(self, statements: Sequence[tuple[str, Sequence[Any]] | str]) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in statements:
                sql, params = (statement, ()) if isinstance(statement, str) else statement
                conn.execute(sql, params)
            conn.execute("COMMIT")
        finally:
            conn.close()

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as conn:
            return conn.execute(sql).fetchall()

    def source_config(self, name: str, tables: Sequence[tuple[str, Sequence[str]]], **extra: Any) -> dict[str, Any]:
        return {"name": name, "kind": "sqlite", "path": str(self.path),
                "tables": [{"name": t, "primary_key": list(k)} for t, k in tables], **extra}


def make_config(lake: Path, *sources: dict[str, Any]) -> DatabusConfig:
    return parse_config({"lake": str(lake), "sources": list(sources)}, base=lake.parent)
