"""Oracle checks that run without a server: scripts split as SQL*Plus would, every plain statement
parses as Oracle SQL, templates render completely and only with plain names, the poll queries
have Databus's shapes, the config and the alert sensor work, and an unreachable server fails fast."""

from __future__ import annotations

import re
import time
from pathlib import Path

import dagster as dg
import pytest
import sqlglot

from dagster_databus import capture
from dagster_databus.config import parse_config
from dagster_databus.defs.schedules import build_source_job
from dagster_databus.defs.sensors import build_alert_sensor
from dagster_databus.errors import SourceUnavailableError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.oracle.sql import TableObjects, poll_query, quote, split_script
from tests.support.mariadb import free_port
from tests.support.paths import REPO

SQL = REPO / "sql" / "oracle"
OBJECTS = TableObjects(table="ACCOUNTS", source="crm", key=("ID", "REGION"), columns=("ID", "REGION", "NAME"))

EXPECTED = {
    "install/01_core_tables.sql": [("CREATE SEQUENCE", False), ("CREATE TABLE", False), ("CREATE TABLE", False),
                                   ("CREATE TABLE", False), ("CREATE INDEX", False)],
    "install/02_sync_core.sql": [("CREATE OR REPLACE PACKAGE", True), ("CREATE OR REPLACE PACKAGE BODY", True)],
    "install/03_sync_alert.sql": [("CREATE OR REPLACE PACKAGE", True), ("CREATE OR REPLACE PACKAGE BODY", True)],
    "install/04_jobs.sql": [("DECLARE", True), ("DECLARE", True)],
    "table/01_txn_column.sql": [("ALTER TABLE", False)],
    "table/02_txn_index.sql": [("CREATE INDEX", False)],
    "table/03_delete_shadow.sql": [("CREATE TABLE", False), ("CREATE INDEX", False)],
    "table/04_triggers.sql": [("CREATE OR REPLACE TRIGGER", True), ("CREATE OR REPLACE TRIGGER", True)],
    "table/05_view.sql": [("CREATE OR REPLACE FORCE VIEW", False)],
    "uninstall/01_table.sql": [("DROP TRIGGER", False), ("DROP TRIGGER", False), ("DROP VIEW", False),
                               ("DROP TABLE", False), ("DROP INDEX", False), ("ALTER TABLE", False)],
    "uninstall/02_core.sql": [("BEGIN", True), ("DROP PACKAGE", False), ("DROP PACKAGE", False),
                              ("DROP TABLE", False), ("DROP TABLE", False), ("DROP TABLE", False),
                              ("DROP SEQUENCE", False)],
}


def rendered(name: str) -> str:
    return OBJECTS.render(name) if name.startswith(("table/", "uninstall/01")) else sqlfiles.load("oracle", name)


def test_every_script_is_covered() -> None:
    scripts = {str(p.relative_to(SQL)) for p in SQL.rglob("*.sql") if p.parent.name != "poll"}
    assert scripts == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scripts_split_into_the_expected_statements(name: str) -> None:
    statements = split_script(rendered(name))
    assert len(statements) == len(EXPECTED[name])
    shapes = [(" ".join(s.text.split()[: len(expected.split())]), s.plsql)
              for s, (expected, _) in zip(statements, EXPECTED[name], strict=True)]
    assert shapes == EXPECTED[name]
    for s in statements:
        assert not s.text.endswith("/"), "the SQL*Plus terminator is not part of the statement"
        assert s.plsql or not s.text.endswith(";"), "plain SQL is sent without its ';'"


def plain_statements() -> list[tuple[str, str]]:
    out = [(f"{name}#{i}", s.text) for name in EXPECTED for i, s in enumerate(split_script(rendered(name)))
           if not s.plsql]
    view = OBJECTS.values["view"]
    out += [("poll simple", poll_query("simple", view)), ("poll simple bounded", poll_query("simple", view, True)),
            ("poll chunked", poll_query("chunked", view)),
            ("poll chunk end", sqlfiles.load("oracle", "poll/chunk_end.sql")),
            ("poll deletes", sqlfiles.render("oracle", "poll/deletes.sql", shadow=OBJECTS.values["shadow"])),
            ("prune", sqlfiles.load("oracle", "poll/prune.sql")),
            ("prune shadow", sqlfiles.render("oracle", "poll/prune_shadow.sql", shadow=OBJECTS.values["shadow"]))]
    return out


@pytest.mark.parametrize(("where", "statement"), plain_statements(), ids=[w for w, _ in plain_statements()])
def test_plain_statements_parse_as_oracle_sql(where: str, statement: str) -> None:
    parsed = sqlglot.parse(statement, read="oracle", error_level=sqlglot.ErrorLevel.RAISE)
    assert len([p for p in parsed if p is not None]) == 1, where


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith(("table/", "uninstall/01"))])
def test_templates_render_completely_with_quoted_names(name: str) -> None:
    text = OBJECTS.render(name)
    assert not re.search(r"\{\w+\}", text)
    assert '"ACCOUNTS"' in text


@pytest.mark.parametrize("bad", ["ACCOUNTS; DROP TABLE x", "a b", 'x"y', "1abc", "A" * 130])
def test_templates_reject_names_that_are_not_plain(bad: str) -> None:
    with pytest.raises(ValueError):
        TableObjects(table=bad, source="crm", key=("ID",), columns=("ID",)).render("table/05_view.sql")
    with pytest.raises(ValueError):
        quote(bad)


def normalized(sql: str) -> str:
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return re.sub(r"\s*([=,()<>])\s*", r"\1", " ".join(body.split()))


def test_simple_poll_query_has_the_seeds_shape() -> None:
    seed = """SELECT /*+ first_rows LEADING(tx) */
        sync_core.getScn(tx.scn, tx.ora_rowscn) scn,
        tx.ts event_timestamp,
        src.*
    FROM sy$ACCOUNTS src, sy$txlog tx
    WHERE src.txn=tx.txn AND tx.scn > :sinceScn AND tx.ora_rowscn > :sinceScn"""
    assert normalized(poll_query("simple", "sy$ACCOUNTS")) == normalized(seed)
    bounded = normalized(poll_query("simple", "sy$ACCOUNTS", bounded=True))
    assert bounded == normalized(seed + " AND sync_core.getScn(tx.scn, tx.ora_rowscn) <= :untilScn")


def test_chunked_poll_query_bounds_rows_per_chunk_in_scn_order() -> None:
    chunked = normalized(poll_query("chunked", "sy$ACCOUNTS"))
    assert normalized("ROW_NUMBER() OVER (ORDER BY sync_core.getScn(tx.scn, tx.ora_rowscn)) r") in chunked
    assert normalized("WHERE tx.scn > :sinceScn AND tx.ora_rowscn > :sinceScn") in chunked
    assert chunked.endswith(normalized("WHERE src.txn = t.txn AND t.r <= :rowsPerChunk ORDER BY t.r"))


ORACLE_YAML = {"name": "crm", "kind": "oracle", "dsn": "host:1521/FREEPDB1", "user": "crm",
               "password_env": "CRM_PASSWORD", "tables": [{"name": "ACCOUNTS", "primary_key": ["ID"]}]}


def test_the_oracle_config_form_works_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config({"lake": "lake", "sources": [ORACLE_YAML]}, base=tmp_path)
    monkeypatch.setenv("CRM_PASSWORD", "s3cret")
    assert config.sources[0].resolved_password() == "s3cret"


def test_an_unreachable_oracle_server_fails_fast_and_writes_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRM_PASSWORD", "x")
    config = parse_config({"lake": "lake", "sources": [
        {**ORACLE_YAML, "dsn": f"127.0.0.1:{free_port()}/FREEPDB1", "connect_timeout_s": 2}]}, base=tmp_path)
    started = time.monotonic()
    with pytest.raises(SourceUnavailableError, match="cannot reach Oracle source 'crm'"):
        capture.install(config, "crm")
    assert time.monotonic() - started < 10
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(("signalled", "runs"), [("crm", 1), (None, 0)])
def test_alert_sensor_requests_a_run_only_when_signalled(tmp_path: Path, signalled: str | None, runs: int) -> None:
    source = parse_config({"lake": "lake", "sources": [ORACLE_YAML]}, base=tmp_path).sources[0]
    waits: list[int] = []

    def wait(max_wait_s: int) -> str | None:  # the one call that needs a live Oracle
        waits.append(max_wait_s)
        return signalled

    sensor = build_alert_sensor(source, build_source_job(source), wait=wait)
    assert sensor is not None
    result = sensor.evaluate_tick(dg.build_sensor_context())
    assert len(result.run_requests or []) == runs and waits == [source.alert_wait_s]
    if not runs:
        assert "no changes signalled" in (result.skip_message or "")


def test_keyset_clauses_order_like_tuples() -> None:
    """Oracle has no row-value comparison; the expanded clauses must agree with tuple order."""
    import itertools
    import sqlite3

    from dagster_databus.sources.oracle.sql import after_clause, through_clause

    keys = ['"A"', '"B"', '"C"']
    conn = sqlite3.connect(":memory:")
    conn.execute('CREATE TABLE t ("A" INTEGER, "B" INTEGER, "C" INTEGER)')
    values = list(itertools.product(range(3), repeat=3))
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", values)
    for bound in values:
        binds = {f"k{i}": v for i, v in enumerate(bound)} | {f"t{i}": v for i, v in enumerate(bound)}
        after = conn.execute(f'SELECT "A", "B", "C" FROM t WHERE {after_clause(keys, "k")}', binds).fetchall()
        through = conn.execute(f'SELECT "A", "B", "C" FROM t WHERE {through_clause(keys, "t")}', binds).fetchall()
        assert sorted(after) == [v for v in values if v > bound]
        assert sorted(through) == [v for v in values if v <= bound]
