"""What the throwaway database servers share (MariaDB, PostgreSQL): statements and queries, each on a connection of
its own in autocommit, so DDL such as CREATE DATABASE runs as written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# A statement: plain SQL, or SQL and its parameters (in the driver's own placeholders).
Statement = str | tuple[str, Sequence[Any]]


class DatabaseServer:
    """A server a test started; a subclass says how to ``connect`` (autocommit, to its default database when
    ``database`` is not given)."""

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _connect_to(self, database: str | None) -> Any:
        return self.connect() if database is None else self.connect(database)

    def execute(self, *statements: Statement, database: str | None = None) -> None:
        """Run each statement (or ``(sql, params)``) in autocommit."""
        conn = self._connect_to(database)
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    sql, params = (statement, None) if isinstance(statement, str) else statement
                    cur.execute(sql, params)
        finally:
            conn.close()

    def query(self, sql: str, params: Sequence[Any] | None = None, database: str | None = None
              ) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (with ``params``)."""
        conn = self._connect_to(database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall())
        finally:
            conn.close()
