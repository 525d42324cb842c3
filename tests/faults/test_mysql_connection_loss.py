"""Losing the source mid-capture: nothing is lost and nothing is captured twice.

Two real failures: the binlog connection is killed (capture reopens it at the last transaction
boundary and goes on), and the server crashes (capture fails with SourceUnavailableError, and
the next run resumes from the durable checkpoint)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.errors import SourceUnavailableError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import MariaDBServer

ROWS = 40_000


@pytest.mark.fault
@pytest.mark.parametrize("failure", ["kill_binlog_connection", "crash_server"])
def test_losing_the_source_mid_capture_loses_and_duplicates_nothing(failure: str, tmp_path: Path, spark) -> None:
    server = MariaDBServer()
    try:
        harness = MysqlHarness(server)
        harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(40), qty INTEGER)"])
        config = make_config(tmp_path / "lake", harness.source_config(
            "shop", [("items", ["id"])], poll={"chunk_rows": 500}, connect_timeout_s=2))
        capture.install(config, "shop")
        for first in range(0, ROWS, 200):
            harness.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i % 7))
                             for i in range(first, first + 200)])
        log = ChangeLog(config.lake, "shop")
        struck: list[str] = []

        def strike_when_the_first_segment_lands() -> None:
            deadline = time.monotonic() + 60
            while not log.manifest().segments and time.monotonic() < deadline:
                time.sleep(0.005)
            if failure == "crash_server":
                server.crash()
                struck.append("crashed")
                return
            for (pid,) in server.query("SELECT ID FROM information_schema.PROCESSLIST "
                                       "WHERE COMMAND LIKE 'Binlog Dump%'"):
                server.execute(f"KILL {pid}")
                struck.append(f"killed {pid}")

        striker = threading.Thread(target=strike_when_the_first_segment_lands)
        striker.start()
        if failure == "crash_server":
            with pytest.raises(SourceUnavailableError, match="resumes from the last durable checkpoint"):
                capture.run(config, "shop")
        else:
            capture.run(config, "shop")
        striker.join()
        assert struck, "the failure never happened"
        partial = log.checkpoint().scn
        if failure == "crash_server":
            assert 0 < len([e for e in log.read()]) < ROWS, "some chunks were durable before the crash"
            server.restart()
        capture.run(config, "shop")
        keys = [e.event.key[0] for e in log.read()]
        assert sorted(keys) == list(range(ROWS))
        assert log.checkpoint().scn >= partial
        sync_source(spark, config, "shop")
        assert_snapshots_match(config)
    finally:
        server.close()
