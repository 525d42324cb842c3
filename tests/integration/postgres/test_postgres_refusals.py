"""What a PostgreSQL source refuses at ``validate``, before install or sync would fail half-way: column names
that differ only in case (Delta's are case-insensitive), an unlogged table (logical decoding never sees its
changes), each named with its fix; install changes nothing when it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.core.schema import Column
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import ConfigError
from dagster_databus.sources import open_source
from dagster_databus.sources.generic.catalog import resolve_key
from tests.support.harness import PostgresHarness, config_document, make_config


def validated(pg: PostgresHarness, tmp_path: Path, table: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``databus validate``'s exit status and stderr for a source of ``table`` (key ``id``)."""
    config = make_config(tmp_path / "lake", pg.source_config("shop", [(table, ["id"])]))
    path = tmp_path / "databus.json"
    path.write_text(json.dumps(config_document(config, [pg.source_config("shop", [(table, ["id"])])])))
    capsys.readouterr()
    status = main(["--config", str(path), "validate"])
    return status, capsys.readouterr().err


def test_columns_whose_names_differ_only_in_case_are_refused_at_validate_and_install(
        pg: PostgresHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pg.execute(['CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, "Name" TEXT)',
                "INSERT INTO people VALUES (1, 'a', 'A')"])
    status, err = validated(pg, tmp_path, "people", capsys)
    assert status == 2, err
    assert "'name' and 'Name'" in err and "case-insensitive" in err and 'RENAME COLUMN "Name"' in err, err
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("people", ["id"])]))
    with pytest.raises(ConfigError, match="differ only in case"):
        capture.install(config, "shop")


def test_every_kind_refuses_names_that_differ_only_in_case_in_its_catalog_check() -> None:
    """The check is the shared catalog's (every kind's catalog resolves its key through it): Oracle's quoted
    names may differ in case as PostgreSQL's do."""
    columns = [Column("ID", ColumnType.parse("long"), "NUMBER(18)"),
               Column("NAME", ColumnType.parse("string"), "VARCHAR2(10)"),
               Column("Name", ColumnType.parse("string"), "VARCHAR2(10)")]
    with pytest.raises(ConfigError, match="'NAME' and 'Name'"):
        resolve_key(columns, ["id"], "PEOPLE", "sources.crm.tables[0]")
    assert resolve_key(columns[:2], ["id"], "PEOPLE", "sources.crm.tables[0]") == ("ID",)


def identities(pg: PostgresHarness) -> dict[str, str]:
    return {r[0]: r[1] for r in pg.query("SELECT relname, relreplident::text FROM pg_class WHERE relname "
                                         "IN ('events', 'items')")}


def test_an_unlogged_table_is_refused_at_validate_and_install_changes_nothing(
        pg: PostgresHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Logical decoding never sees an unlogged table's changes: refused, with ``SET LOGGED``; install refuses
    before it sets any replica identity, creates the publication or the slot."""
    pg.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)",
                "CREATE UNLOGGED TABLE events (id INTEGER PRIMARY KEY, v TEXT)"])
    status, err = validated(pg, tmp_path, "events", capsys)
    assert status == 2, err
    assert "unlogged" in err and "ALTER TABLE public.events SET LOGGED" in err, err
    before = identities(pg)
    doc: dict[str, Any] = pg.source_config("shop", [("items", ["id"]), ("events", ["id"])])
    with pytest.raises(ConfigError, match="SET LOGGED"):
        capture.install(make_config(tmp_path / "lake", doc), "shop")
    assert identities(pg) == before == {"items": "d", "events": "d"}
    assert pg.query("SELECT count(*) FROM pg_publication")[0][0] == 0
    assert pg.query("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")[0][0] == 0
    pg.execute(["ALTER TABLE events SET LOGGED"])
    capture.install(make_config(tmp_path / "lake", doc), "shop")
    assert identities(pg) == {"items": "f", "events": "f"}


def test_a_partitioned_table_with_an_unlogged_partition_is_refused_naming_the_partition(
        pg: PostgresHarness, tmp_path: Path) -> None:
    pg.execute(["CREATE TABLE parts (id INTEGER PRIMARY KEY, v TEXT) PARTITION BY RANGE (id)",
                "CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (0) TO (100)",
                "CREATE UNLOGGED TABLE parts_high PARTITION OF parts FOR VALUES FROM (100) TO (200)"])
    config = make_config(tmp_path / "lake", pg.source_config("shop", [("parts", ["id"])]))
    with pytest.raises(ConfigError, match=r"(?s)unlogged partitions public\.parts_high:.*"
                                          r"ALTER TABLE public\.parts_high SET LOGGED") as refused:
        open_source(config.sources[0]).catalog.preflight()
    assert "parts_low" not in str(refused.value)
