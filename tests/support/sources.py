"""The source kinds the behavioural suites run on, and the harness of each (its server a session fixture)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dagster_databus.sources.registry import KINDS
from tests.support.harness import (
    ORACLE_ENV,
    ORACLE_SKIP,
    MysqlHarness,
    OracleHarness,
    PostgresHarness,
    SourceHarness,
    SqliteHarness,
)

# Every registered kind: a new kind runs the behavioural suite (and fails it until ``harness_of`` has a harness).
SOURCE_KINDS = list(KINDS)
# The behavioural suite also runs on a MariaDB that compresses its binlog (log_bin_compress).
BEHAVIOUR_KINDS = [*SOURCE_KINDS, "mysql-compressed"]


def source_harness(request: pytest.FixtureRequest, tmp_path: Path) -> SourceHarness:
    """The harness of the source kind ``request.param`` names."""
    return harness_of(request.param, tmp_path, request)


def harness_of(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SourceHarness:
    """A harness of source kind ``kind`` (its server started once per session, a database of its own per test)."""
    if kind == "sqlite":
        return SqliteHarness(tmp_path / "source.db")
    if kind == "oracle":
        if not all(os.environ.get(k) for k in ORACLE_ENV):
            pytest.skip(ORACLE_SKIP)
        return OracleHarness()
    if kind == "postgres":
        harness = PostgresHarness(request.getfixturevalue("postgres"))
        request.addfinalizer(harness.close)
        return harness
    if kind == "mysql-compressed":
        return MysqlHarness(request.getfixturevalue("mariadb_compressed"))
    if kind == "mysql":
        return MysqlHarness(request.getfixturevalue("mariadb"))
    raise LookupError(f"no test harness for source kind {kind!r}: add one to tests/support/harness.py and harness_of")
