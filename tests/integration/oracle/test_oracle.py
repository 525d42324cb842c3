"""Oracle integration tests: run against a real server when DATABUS_TEST_ORACLE_* are set (Oracle
Database Free works; see docs/oracle.md), skipped with that reason otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.core.events import Op
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import ORACLE_ENV, ORACLE_SKIP, OracleHarness, make_config

pytestmark = pytest.mark.skipif(not all(os.environ.get(k) for k in ORACLE_ENV), reason=ORACLE_SKIP)


@pytest.fixture
def oracle(tmp_path: Path):
    harness = OracleHarness()
    harness.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR2(64), qty INTEGER)"])
    config = make_config(tmp_path / "lake", harness.source_config("crm", [("items", ["id"])]))
    capture.install(config, "crm")
    return harness, config


def test_install_is_idempotent_and_verify_names_broken_objects(oracle) -> None:
    harness, config = oracle
    before = harness.query("SELECT object_name, last_ddl_time FROM user_objects ORDER BY 1")
    assert capture.install(config, "crm").changed == ()
    assert harness.query("SELECT object_name, last_ddl_time FROM user_objects ORDER BY 1") == before
    harness.execute(['ALTER TRIGGER "SY$T_ITEMS" DISABLE'])
    assert "trigger SY$T_ITEMS is DISABLED" in open_source(config.sources[0]).setup.verify()
    capture.install(config, "crm")
    assert open_source(config.sources[0]).setup.verify() == []


def test_a_long_transaction_committing_after_a_short_one_is_captured(oracle) -> None:
    harness, config = oracle
    long_tx = harness.connect()
    with long_tx.cursor() as cur:
        cur.execute("INSERT INTO items VALUES (1, 'long', 1)")  # started first, not committed yet
    harness.execute([("INSERT INTO items VALUES (?, ?, ?)", (2, "short", 2))])
    first = capture.run(config, "crm")
    assert [e.event.key for e in ChangeLog(config.lake, "crm").read()] == [(2,)]
    long_tx.commit()
    long_tx.close()
    capture.run(config, "crm")
    events = [e.event for e in ChangeLog(config.lake, "crm").read()]
    assert [e.key for e in events] == [(2,), (1,)] and events[1].scn > first.until


def test_deletes_and_key_changes_reach_the_snapshot(oracle, spark) -> None:
    harness, config = oracle
    harness.execute([("INSERT INTO items VALUES (?, ?, ?)", (i, f"n{i}", i)) for i in range(1, 6)])
    cycle(config, spark)
    harness.execute(["DELETE FROM items WHERE id = 2", "UPDATE items SET id = 50 WHERE id = 3"])
    cycle(config, spark)
    ops = [(e.event.op, e.event.key) for e in ChangeLog(config.lake, "crm").read()]
    assert (Op.DELETE, (2,)) in ops and (Op.DELETE, (3,)) in ops
    keys = sorted(r["id"] for r in DeltaSnapshot(config.lake, "crm", "items").read().to_pylist())
    assert keys == [1, 4, 5, 50]
    assert_snapshots_match(config)


def test_uninstall_removes_only_what_install_created(oracle) -> None:
    harness, config = oracle
    harness.execute(["CREATE TABLE unrelated (id INTEGER PRIMARY KEY)"])
    open_source(config.sources[0]).uninstall()
    left = {r[0] for r in harness.query("SELECT object_name FROM user_objects")}
    assert not {n for n in left if n.startswith(("SY$", "SYNC_", "J_"))}
    assert {"ITEMS", "UNRELATED"} <= left
    assert harness.query("SELECT COUNT(*) FROM user_tab_columns WHERE table_name = 'ITEMS' AND column_name = 'TXN'") \
        == [(0,)]
