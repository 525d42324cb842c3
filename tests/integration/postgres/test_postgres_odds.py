"""PostgreSQL odds: a refresh filter that fails on a row as the server runs it is a typed error (exit 2) naming
the filter, the server's message and the fix; a bootstrap held back by an open prepared transaction says what
it waits for and gives up after a bound; DDL on a quiet source is recorded at the end of the poll."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError, SourceUnavailableError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import RowSelection
from dagster_databus.sources.registry import source_kind
from dagster_databus.sync.merge import sync_source
from tests.integration.postgres.test_postgres_source import temporary_slots
from tests.support.checks import cycle
from tests.support.harness import PostgresHarness, config_document, make_config


def no_spark() -> object:
    raise AssertionError("the local engine starts no Spark")


@pytest.mark.parametrize("where, message", [("id / 0 = 1", "division by zero"),
                                            ("to_number(v, '999') = 1", "invalid input syntax")])
def test_a_filter_that_fails_on_a_row_is_a_typed_error_exit_2_naming_the_filter(
        pg: PostgresHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, message: str) -> None:
    pg.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)",
                "INSERT INTO items SELECT g, g::text FROM generate_series(1, 5) AS g",
                "INSERT INTO items VALUES (6, 'six')"])
    doc = pg.source_config("shop", [("items", ["id"])], bootstrap_chunk_rows=2)
    config = make_config(tmp_path / "lake", doc, merge={"engine": "local"})
    path = tmp_path / "databus.json"
    path.write_text(json.dumps({**config_document(config, [doc]), "merge": {"engine": "local"}}))
    cycle(config, no_spark)
    capsys.readouterr()
    assert main(["--config", str(path), "snapshot", "--source", "shop", "--tables", "items", "--where", where]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and where in err and message in err and "Fix: " in err, err
    # The range reader (what a Spark task runs) names it alike, for a filter that fails only where it reads.
    source = open_source(config.sources[0], config.lake)
    read = dataclasses.replace(source.reads.ranges("items", 10, RowSelection()), where=where)
    with pytest.raises(ConfigError, match=message) as failed:
        list(source_kind("postgres").read_range(read, 0).batches)
    assert where in str(failed.value) and failed.value.field == "snapshot.where"


def test_a_column_added_on_a_quiet_source_is_recorded_at_the_end_of_the_poll(pg: PostgresHarness,
                                                                              tmp_path: Path) -> None:
    """No published table is written after the ALTER: the poll records it all the same (from the catalog), the
    checkpoint carries the new shape so the next poll records nothing again, and the sync evolves the snapshot."""
    pg.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)",
                "INSERT INTO items SELECT g, g::text FROM generate_series(1, 5) AS g"])
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("items", ["id"])]), merge={"engine": "local"})
    cycle(config, no_spark)
    pg.execute(["ALTER TABLE items ADD COLUMN tag TEXT DEFAULT 'old'"])
    capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    assert [(r.table, r.statement) for r in log.ddl.records()] == [
        ("items", "ALTER TABLE items ADD COLUMN tag text DEFAULT 'old'")]
    capture.run(config, "shop")
    assert len(log.ddl.records()) == 1
    [result] = sync_source(no_spark, config, "shop")
    assert result.evolved == "added tag (filled with old)"
    assert {r["tag"] for r in DeltaSnapshot(config.lake, "shop", "items").read().to_pylist()} == {"old"}


def test_a_read_held_back_by_an_open_prepared_transaction_names_it_and_gives_up_after_the_bound(
        pg: PostgresHarness, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Creating the read's temporary slot waits for a prepared transaction left open: the wait names its gid, its
    age and the SQL to resolve it while it lasts, and ends after snapshot_wait_s with a transient error (exit 75),
    the slot gone; once it is resolved, the read goes ahead."""
    pg.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)", "CREATE TABLE other (id INTEGER)",
                "INSERT INTO items VALUES (1, 'a')"])
    doc = pg.source_config("shop", [("items", ["id"])], snapshot_wait_s=3)
    config = make_config(tmp_path / "lake", doc, merge={"engine": "local"})
    path = tmp_path / "databus.json"
    path.write_text(json.dumps({**config_document(config, [doc]), "merge": {"engine": "local"}}))
    capture.install(config, "shop")
    pg.execute(["INSERT INTO other VALUES (1)", "PREPARE TRANSACTION 'stuck-gid'"], commit=False)
    with ThreadPoolExecutor(1) as pool:  # a read that waited on with no bound fails here, and does not hang
        try:
            started = time.monotonic()
            read = pool.submit(open_source(config.sources[0], config.lake).reads.read_table, "items")
            with pytest.raises(SourceUnavailableError) as gave_up:
                read.result(timeout=20)
            assert 3 <= time.monotonic() - started < 10
            message = str(gave_up.value)
            assert gave_up.value.transient and "'stuck-gid'" in message and "3 s" in message, message
            assert "snapshot_wait_s" in message and "pg_prepared_xacts" in message and "ROLLBACK PREPARED" in message
            said = [r.getMessage() for r in caplog.records if "stuck-gid" in r.getMessage()]
            assert said and "prepared" in said[0] and "COMMIT PREPARED" in said[0], said
            assert temporary_slots(pg, settle=0) == 0
            assert main(["--config", str(path), "sync", "--source", "shop"]) == 75
        finally:
            pg.server.execute("ROLLBACK PREPARED 'stuck-gid'", database=pg.database)
    cycle(config, no_spark)
    assert DeltaSnapshot(config.lake, "shop", "items").read().num_rows == 1
