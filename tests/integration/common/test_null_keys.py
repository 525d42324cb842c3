"""A NULL in a key: SQLite accepts it in a non-INTEGER PRIMARY KEY and in UNIQUE columns, MySQL and PostgreSQL in
UNIQUE columns. Rows sharing a NULL key cannot be told apart, so a snapshot keyed by it would fold them into one.
``validate`` names such tables, and the bootstrap (both engines) and capture refuse such rows, writing nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import NullKeyError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.harness import MysqlHarness, SourceHarness, make_config
from tests.support.mariadb import MariaDBServer
from tests.support.sources import harness_of


def nullable_key_table(harness: SourceHarness) -> None:
    if harness.kind == "sqlite":
        harness.execute(["CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)"])
    elif harness.kind == "postgres":
        harness.execute(["CREATE TABLE t (id SERIAL PRIMARY KEY, k VARCHAR(10), v INT, UNIQUE (k))"])
    else:
        harness.execute(["CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(10), v INT, UNIQUE (k))"])


def insert(harness: SourceHarness, k: str | None, v: int) -> tuple[str, tuple[Any, ...]]:
    return ("INSERT INTO t (k, v) VALUES (?, ?)", (k, v))


@pytest.mark.parametrize("kind", ["sqlite", "mysql", "postgres"])
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_null_key_is_named_by_validate_and_refused_by_the_bootstrap(
        kind: str, engine: str, tmp_path: Path, request: pytest.FixtureRequest, lazy_spark: Callable[[], Any]) -> None:
    harness = harness_of(kind, tmp_path, request)
    nullable_key_table(harness)
    harness.execute([insert(harness, None, 1), insert(harness, None, 2), insert(harness, "a", 3)])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("t", ["k"])]), merge={"engine": engine})
    capture.install(config, "shop")
    problems = capture.validate(config).problems["shop"]
    assert any("has rows whose key (k) holds NULL" in p and "NOT NULL" in p for p in problems), problems
    with pytest.raises(NullKeyError, match=r"(?s)table 't': key column\(s\) k hold NULL.*bootstrap of t.*NOT NULL"):
        sync_source(lazy_spark, config, "shop")
    assert not DeltaSnapshot(config.lake, "shop", "t").exists()


@pytest.mark.parametrize("kind", ["sqlite", "mysql", "postgres"])
def test_a_change_that_gives_a_key_null_stops_capture_before_it_commits(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest, lazy_spark: Callable[[], Any]) -> None:
    harness = harness_of(kind, tmp_path, request)
    nullable_key_table(harness)
    harness.execute([insert(harness, "a", 1)])
    config = make_config(tmp_path / "lake", harness.source_config("shop", [("t", ["k"])]), merge={"engine": "local"})
    capture.install(config, "shop")
    capture.run(config, "shop")
    sync_source(lazy_spark, config, "shop")
    log = ChangeLog(config.lake, "shop")
    before = log.checkpoint().scn
    harness.execute([insert(harness, "b", 2)])
    harness.execute([insert(harness, None, 3), insert(harness, None, 4)])
    with pytest.raises(NullKeyError, match=r"key column\(s\) k hold NULL \(the change events"):
        capture.run(config, "shop")
    assert log.checkpoint().scn == before, "nothing past the refused change was committed"
    assert sorted(r["v"] for r in DeltaSnapshot(config.lake, "shop", "t").read().to_pylist()) == [1]


def test_mariadb_null_keys_in_a_unique_key(mariadb: MariaDBServer) -> None:
    """The MySQL cases above need MariaDB to accept NULL in a UNIQUE column more than once."""
    harness = MysqlHarness(mariadb)
    nullable_key_table(harness)
    harness.execute([insert(harness, None, 1), insert(harness, None, 2)])
    assert harness.query("SELECT COUNT(*) FROM t WHERE k IS NULL") == [(2,)]
