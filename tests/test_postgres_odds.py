"""PostgreSQL odds: a refresh filter that fails on a row as the server runs it is a typed error (exit 2) naming
the filter, the server's message and the fix; a bootstrap held back by an open prepared transaction says what
it waits for and gives up after a bound; DDL on a quiet source is recorded at the end of the poll."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dagster_databus import pipeline
from dagster_databus.cli import main
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.snapshot.merge import sync_source
from dagster_databus.sources import open_source
from dagster_databus.sources.base import RowSelection
from dagster_databus.sources.registry import source_kind
from tests.conftest import cycle
from tests.harness import PostgresHarness, config_document, make_config


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
    read = dataclasses.replace(source.ranges("items", 10, RowSelection()), where=where)
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
    pipeline.capture(config, "shop")
    log = ChangeLog(config.lake, "shop")
    assert [(r.table, r.statement) for r in log.ddl.records()] == [
        ("items", "ALTER TABLE items ADD COLUMN tag text DEFAULT 'old'")]
    pipeline.capture(config, "shop")
    assert len(log.ddl.records()) == 1
    [result] = sync_source(no_spark, config, "shop")
    assert result.evolved == "added tag (filled with old)"
    assert {r["tag"] for r in DeltaSnapshot(config.lake, "shop", "items").read().to_pylist()} == {"old"}

