"""docs/types.md, row by row, against real round trips.

For each source kind that runs here, a table gets one column per documented row; each
example goes in once before capture starts (it reaches Delta by the bootstrap) and once after
(by change events). Both rows must hold the same value, in the documented Avro and Delta
type, reach consumers as the documented Python type (from the snapshot, the log and the pull API),
and print as the documented JSON in ``databus tail``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_databus import capture
from dagster_databus.cli import main
from dagster_databus.config import DatabusConfig
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.consumer.pull import MetaManager, PullConsumer
from dagster_databus.core.events import ChangeEvent
from dagster_databus.core.types import ColumnType
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.fingerprints import streamed_fingerprint
from dagster_databus.sources.oracle.types import oracle_column_type
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.checks import cycle
from tests.support.harness import ORACLE_ENV, ORACLE_SKIP, MysqlHarness, OracleHarness, SourceHarness, SqliteHarness
from tests.support.mariadb import MariaDBServer
from tests.support.paths import REPO

DOC = REPO / "docs" / "types.md"


@dataclass(frozen=True)
class TypeRow:
    declared: str
    example: str
    avro: str
    delta: str
    python: str
    json: str


def _cell(text: str) -> str:
    text = text.strip()
    if text == "(none)":
        return ""
    return text[1:-1] if text.startswith("`") and text.endswith("`") and text.count("`") == 2 else text


def doc_rows(kind: str) -> list[TypeRow]:
    body = DOC.read_text()
    section = body[body.index(f"<!-- types:{kind} -->"):body.index(f"<!-- /types:{kind} -->")]
    rows = []
    for line in section.splitlines()[3:]:
        cells = re.split(r"(?<!\\)\|", line)[1:-1]
        if len(cells) == 6:
            declared, example, _, delta, python, js = (_cell(c) for c in cells)
            rows.append(TypeRow(declared, example, cells[2].strip().replace("`", ""), delta, python, js))
    assert rows, f"no rows in the {kind} table of {DOC}"
    return rows


def avro_text(avro: Any) -> str:
    if isinstance(avro, str):
        return avro
    if avro["logicalType"] == "decimal":
        return f"bytes, decimal({avro['precision']},{avro['scale']})"
    return f"{avro['type']}, {avro['logicalType']}"


def python_text(value: Any) -> str:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return "datetime (naive)"
        assert value.utcoffset() == dt.timedelta(0), value
        return "datetime (UTC)"
    return type(value).__name__


class Collector(DatabusConsumer):
    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []

    def on_data_event(self, event: ChangeEvent) -> None:
        self.events.append(event)


def _rows_by_id(events: list[ChangeEvent]) -> dict[int, dict[str, Any]]:
    return {int(e.key[0]): dict(e.row) for e in events}


def round_trip(harness: SourceHarness, rows: list[TypeRow], tmp_path: Path, spark: object,
               capsys: pytest.CaptureFixture[str], **source_options: Any) -> None:
    columns = [f"c{i}" for i in range(len(rows))]
    names = ", ".join(columns)
    examples = ", ".join(r.example for r in rows)
    harness.execute([f"CREATE TABLE typed (id INTEGER PRIMARY KEY, "
                     f"{', '.join(f'{c} {r.declared}' for c, r in zip(columns, rows, strict=True))})",
                     f"INSERT INTO typed (id, {names}) VALUES (1, {examples})",
                     "INSERT INTO typed (id) VALUES (3)"])
    source = harness.source_config("shop", [("typed", ["id"])], **source_options)
    config_file = tmp_path / "databus.yaml"
    config_file.write_text(yaml.safe_dump({"lake": str(tmp_path / "lake"), "sources": [source]}))
    from dagster_databus.config import load_config

    config = load_config(str(config_file))
    cycle(config, spark)  # ids 1 and 3 reach Delta by the bootstrap
    harness.execute([f"INSERT INTO typed (id, {names}) VALUES (2, {examples})", "INSERT INTO typed (id) VALUES (4)"])
    cycle(config, spark)  # ids 2 and 4 by change events

    schema = ChangeLog(config.lake, "shop").schemas.latest("typed")[1]
    snapshot = DeltaSnapshot(config.lake, "shop", "typed")
    delta_types = snapshot.delta_types()
    stored = {int(r["id"]): r for r in schema.rows_from_arrow(snapshot.read())}
    assert sorted(stored) == [1, 2, 3, 4]
    from_snapshot = Collector()
    DatabusClient(config.lake, "shop", from_snapshot).run()
    from_log = Collector()
    DatabusClient(config.lake, "shop", from_log, bootstrap=False).run()
    bootstrapped, logged = _rows_by_id(from_snapshot.events), _rows_by_id(from_log.events)
    assert sorted(logged) == [2, 4], "ids 1 and 3 must have come by the bootstrap, 2 and 4 by change events"
    MetaManager(config.lake, "shop").subscribe("types")
    pulled = _rows_by_id(list(PullConsumer(config.lake, "shop", "types").get_without_ack(100).events))
    capsys.readouterr()
    assert main(["--config", str(config_file), "tail", "--source", "shop", "--no-bootstrap"]) == 0
    tailed = {line["key"][0]: line["row"] for line in map(json.loads, capsys.readouterr().out.splitlines())}

    problems = []
    for column, row in zip(columns, rows, strict=True):
        what = f"{column} {row.declared} = {row.example}"
        ctype: ColumnType = schema.column(column).type
        value = stored[2][column]
        checks = {
            "Avro": (avro_text(ctype.avro()), row.avro),
            "Delta": (delta_types[column], row.delta),
            "bootstrap path == change-event path": (stored[1][column], value),
            "consumer from the snapshot": (bootstrapped[1][column], value),
            "consumer from the log": (logged[2][column], value),
            "pull API": (pulled[2][column], value),
            "Python": (python_text(logged[2][column]), row.python),
            "tail JSON": (tailed[2][column], json.loads(row.json)),
            "NULL": ((stored[3][column], stored[4][column], logged[4][column]), (None, None, None)),
        }
        problems += [f"{what}: {name} is {got!r}, expected {want!r}"
                     for name, (got, want) in checks.items() if got != want or type(got) is not type(want)]
    assert not problems, "\n".join(problems)
    reconciles_every_type(config, harness, names, examples)


def reconciles_every_type(config: DatabusConfig, harness: SourceHarness, names: str, examples: str) -> None:
    """The reconciliation fingerprint is the same whether the database computes it (MySQL's aggregate
    query) or this process computes it from the rows, for every type and its edge values."""
    source = open_source(config.source("shop"), config.lake)
    computed, streamed = source.reads.fingerprint("typed"), streamed_fingerprint(source.reads.read_table("typed"))
    assert computed.pushed_down == (harness.kind == "mysql")
    assert computed.fingerprint.rows == 4 and computed.fingerprint == streamed.fingerprint
    harness.execute([f"INSERT INTO typed (id, {names}) VALUES (5, {examples})", "DELETE FROM typed WHERE id = 3"])
    capture.run(config, "shop")  # in the log, not merged: the check applies the log's events itself
    result = reconcile_table(config, config.source("shop"), "typed")
    assert result.reconciled and result.equal and result.source_rows == 4, result


@pytest.fixture(scope="module")
def mariadb_plus2() -> Iterator[MariaDBServer]:
    """A MariaDB server whose time_zone is +02:00: TIMESTAMP must still arrive as the same UTC instant."""
    server = MariaDBServer(extra_args=["--default-time-zone=+02:00", "--character-set-server=utf8mb4",
                                       "--collation-server=utf8mb4_unicode_ci"])
    try:
        yield server
    finally:
        server.close()


def test_sqlite_types_round_trip_as_documented(tmp_path: Path, spark: object,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    round_trip(SqliteHarness(tmp_path / "source.db"), doc_rows("sqlite"), tmp_path, spark, capsys)


def test_mysql_types_round_trip_as_documented(mariadb_plus2: MariaDBServer, tmp_path: Path, spark: object,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert mariadb_plus2.query("SELECT @@global.time_zone") == [("+02:00",)]
    round_trip(MysqlHarness(mariadb_plus2), doc_rows("mysql"), tmp_path, spark, capsys)


@pytest.mark.skipif(not all(os.environ.get(k) for k in ORACLE_ENV), reason=ORACLE_SKIP)
def test_oracle_types_round_trip_as_documented(tmp_path: Path, spark: object,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    round_trip(OracleHarness(), doc_rows("oracle"), tmp_path, spark, capsys)


def test_oracle_mapping_is_the_documented_one() -> None:
    """The mapping half of the Oracle table, which needs no server."""
    problems = []
    for row in doc_rows("oracle"):
        ctype = oracle_column_type(row.declared)
        if ctype is None:
            problems.append(f"{row.declared}: not mapped")
            continue
        if (avro_text(ctype.avro()), ctype.delta()) != (row.avro, row.delta):
            problems.append(f"{row.declared}: {avro_text(ctype.avro())} / {ctype.delta()}, documented "
                            f"{row.avro} / {row.delta}")
    assert not problems, "\n".join(problems)
