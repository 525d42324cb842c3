"""Statements chosen by the server's version: each version is given only statements it accepts (from the
vendors' manuals), and the chosen ones run on the MariaDB here. ``validate`` names settings capture refuses
and the ones it supports."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.sources.mysql.versions import ServerVersion
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import COMPRESSED_BINLOG, MariaDBServer

_OLD = {"SHOW MASTER STATUS", "SHOW SLAVE STATUS"}
# The statements each version accepts. MySQL: SHOW REPLICA STATUS since 8.0.22, SHOW BINARY LOG STATUS since
# 8.2.0, SHOW MASTER STATUS and SHOW SLAVE STATUS removed in 8.4.0 (MySQL 8.4 Reference Manual, "Features
# Removed in MySQL 8.4"). MariaDB: SHOW REPLICA STATUS since 10.5.1, SHOW BINLOG STATUS since 10.5.2, the old
# names kept (MariaDB Knowledge Base, SHOW BINLOG STATUS and SHOW REPLICA STATUS).
ACCEPTED: dict[str, set[str]] = {
    "5.7.44-log": _OLD,
    "8.0.21": _OLD,
    "8.0.22": _OLD | {"SHOW REPLICA STATUS"},
    "8.0.40": _OLD | {"SHOW REPLICA STATUS"},
    "8.2.0": _OLD | {"SHOW REPLICA STATUS", "SHOW BINARY LOG STATUS"},
    "8.3.0": _OLD | {"SHOW REPLICA STATUS", "SHOW BINARY LOG STATUS"},
    "8.4.0": {"SHOW REPLICA STATUS", "SHOW BINARY LOG STATUS"},
    "9.1.0-commercial": {"SHOW REPLICA STATUS", "SHOW BINARY LOG STATUS"},
    "10.4.34-MariaDB": _OLD,
    "10.5.1-MariaDB": _OLD | {"SHOW REPLICA STATUS"},
    "10.5.2-MariaDB": _OLD | {"SHOW REPLICA STATUS", "SHOW BINLOG STATUS"},
    "5.5.5-10.11.19-MariaDB-0+deb12u1-log": _OLD | {"SHOW REPLICA STATUS", "SHOW BINLOG STATUS"},
    "11.4.2-MariaDB": _OLD | {"SHOW REPLICA STATUS", "SHOW BINLOG STATUS"},
}


@pytest.mark.parametrize("text", sorted(ACCEPTED))
def test_each_version_is_given_statements_it_accepts(text: str) -> None:
    version = ServerVersion.parse(text)
    assert version.mariadb == ("MariaDB" in text)
    assert version.binlog_status in ACCEPTED[text]
    assert version.replica_status in ACCEPTED[text]


def test_a_version_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="not a MySQL or MariaDB version"):
        ServerVersion.parse("PostgreSQL 16.2")


def test_the_chosen_statements_run_on_the_server_here(mariadb: MariaDBServer) -> None:
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            version = ServerVersion.of(cur)
            assert version.mariadb and version.number >= (10, 5, 2)
            cur.execute(version.binlog_status)
            chosen = cur.fetchone()[:2]
            cur.execute("SHOW MASTER STATUS")
            assert chosen == cur.fetchone()[:2]
            cur.execute(version.replica_status)
    finally:
        conn.close()


@pytest.mark.server
def test_validate_supports_compression_and_refuses_old_temporal_columns(tmp_path: Path) -> None:
    server = MariaDBServer(extra_args=COMPRESSED_BINLOG)
    try:
        harness = MysqlHarness(server)
        harness.execute(["CREATE TABLE items (id INT PRIMARY KEY)"])
        config = make_config(tmp_path / "lake", harness.source_config("shop", [("items", ["id"])]))
        result = capture.validate(config)
        assert result.ok, result.problems
        assert any("log_bin_compress is ON: compressed events are decoded (supported)" in n
                   for n in result.notes["shop"]), result.notes
        server.execute("SET GLOBAL mysql56_temporal_format = OFF")
        problems = capture.validate(config).problems["shop"]
        assert any("mysql56_temporal_format is 'OFF'" in p and "SET GLOBAL mysql56_temporal_format = ON" in p
                   for p in problems), problems
    finally:
        server.close()
