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

from dagster_databus import pipeline
from tests.test_sqlite_hostile import configured, database

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
        pipeline.install(configured(harness, tmp_path, busy_timeout_ms=700), "shop")
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
