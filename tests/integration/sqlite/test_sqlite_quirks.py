"""SQLite as SQLite defines it: a file another writer holds locked is a transient failure (exit 75, after the busy
timeout), a key backed only by an expression or partial unique index is refused, and an INTEGER PRIMARY KEY DESC
column (not a rowid alias) is an ordinary column."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.errors import ConfigError, SchemaMismatchError
from tests.integration.sqlite.test_sqlite_hostile import configured, database, live, snapshot, sync

Spark = Callable[[], Any]


# -- a locked file is transient --------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["install"], ["capture", "--source", "shop", "--no-install"]])
def test_a_file_another_writer_holds_locked_exits_75_after_the_busy_timeout(tmp_path: Path,
                                                                           command: list[str]) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO t VALUES (1, 'a')")
    path = tmp_path / "databus.yaml"
    path.write_text(json.dumps({"lake": str(tmp_path / "lake"), "merge": {"engine": "local"}, "sources": [
        harness.source_config("shop", [("t", ["k"])], busy_timeout_ms=700)]}))
    if command[0] != "install":
        capture.install(configured(harness, tmp_path, busy_timeout_ms=700), "shop")
    writer = sqlite3.connect(harness.path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # an application's write transaction, held past the busy timeout
    writer.execute("INSERT INTO t VALUES (2, 'b')")
    try:
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "dagster_databus.cli", "--config", str(path), *command],
                             capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert run.returncode == 75, run.stderr
    assert "locked" in run.stderr and "busy_timeout_ms" in run.stderr and "Fix:" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and took >= 0.7  # it waited out the timeout, not failed at once


# -- keys as SQLite defines them -------------------------------------------------------------------------------

@pytest.mark.parametrize("index", ["CREATE UNIQUE INDEX t_a ON t (a, lower(b))",
                                   "CREATE UNIQUE INDEX t_a ON t (a) WHERE b IS NOT NULL"])
def test_a_key_only_an_expression_or_partial_unique_index_covers_is_refused(tmp_path: Path, index: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER NOT NULL, b TEXT)", index,
                       "INSERT INTO t VALUES (1, 1, NULL), (2, 1, 'y')")  # two rows with a = 1
    config = configured(harness, tmp_path, key=("a",))
    assert not capture.validate(config).ok
    with pytest.raises(ConfigError) as refused:
        capture.install(config, "shop")
    message = str(refused.value)
    assert "t_a" in message and "not a unique key as SQLite defines it" in message, message
    assert 'CREATE UNIQUE INDEX ... ON "t" ("a")' in message and "primary_key" in message, message
    assert harness.query("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'") == [(0,)]


def test_a_key_a_plain_unique_index_covers_beside_an_expression_one_is_accepted(tmp_path: Path,
                                                                              lazy_spark: Spark) -> None:
    harness = database(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER NOT NULL, b TEXT)",
                       "CREATE UNIQUE INDEX t_ab ON t (a, lower(b))", "CREATE UNIQUE INDEX t_a ON t (a)",
                       "INSERT INTO t VALUES (1, 1, 'x'), (2, 2, 'y')")
    config = configured(harness, tmp_path, key=("a",))
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)


# -- INTEGER PRIMARY KEY DESC is an ordinary column -----------------------------------------------------------

@pytest.mark.parametrize("engine", ["local", "spark"])
def test_an_integer_primary_key_desc_holding_a_blob_is_an_ordinary_column(tmp_path: Path, lazy_spark: Spark,
                                                                         engine: str) -> None:
    harness = database(tmp_path, "CREATE TABLE t (k INTEGER PRIMARY KEY DESC, v TEXT)",
                       "INSERT INTO t VALUES (1, 'one')")
    config = configured(harness, tmp_path, engine=engine)
    sync(config, lazy_spark)
    harness.execute(["INSERT INTO t VALUES (x'00ff', 'blob')", "INSERT INTO t VALUES (2, 'two')"])
    # Never an OperationalError of the txlog's images: refused naming the table's key column, its value and the fix
    for _ in range(2):
        with pytest.raises(SchemaMismatchError, match=r"(?s)column t\.k .*b'\\x00\\xff'.*Fix:.*bootstrap"):
            capture.run(config, "shop")
    # The fix as the message gives it: correct the value, then bootstrap.
    harness.execute(["UPDATE t SET k = 3 WHERE typeof(k) = 'blob'"])
    capture.restart(config, "shop")
    sync(config, lazy_spark)
    assert snapshot(config) == live(harness)
