"""The lake read by the tools users already have, each in a process of its own as a user's script runs
(``tests/support/lake_reader.py``): delta-rs (``to_pyarrow_table``, ``to_pandas``, ``load_cdf``, time travel),
DuckDB (``delta_scan``), Polars (``scan_delta``) and Spark (the product's reader: ``spark.lakeread``).

One lake, written by every source kind that runs here: a table of decimals, timestamps with and without a time
zone, binary, text and dates per kind, with soft deletes, a history and the change feed, and one logical table
over the kinds' tables. Every reader must exit 0, give the source's rows, and name the documented types.
The product's own reads must exit cleanly too (``storage.arrowfs``): delta-rs's default file system can abort
a process at exit, after its work is done.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dagster_databus.config import DatabusConfig, parse_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sync.logical.sync import sync_logical
from tests.support.checks import cycle
from tests.support.harness import ORACLE_ENV, SourceHarness
from tests.support.lake_reader import tagged
from tests.support.paths import REPO
from tests.support.sources import SOURCE_KINDS, harness_of

TABLE = "readings"
ROWS = 30
DDL = {
    "sqlite": "CREATE TABLE readings (id INTEGER PRIMARY KEY, amount DECIMAL(12,2), at TIMESTAMP, "
              "local_at DATETIME, payload BLOB, label TEXT, day DATE)",
    "mysql": "CREATE TABLE readings (id BIGINT PRIMARY KEY, amount DECIMAL(12,2), at TIMESTAMP(6) NULL, "
             "local_at DATETIME(6), payload VARBINARY(16), label VARCHAR(40), day DATE) DEFAULT CHARSET=utf8mb4",
    "postgres": "CREATE TABLE readings (id bigint PRIMARY KEY, amount numeric(12,2), at timestamptz, "
                "local_at timestamp, payload bytea, label text, day date)",
    "oracle": "CREATE TABLE readings (id NUMBER(18) PRIMARY KEY, amount NUMBER(12,2), at TIMESTAMP(6) WITH TIME ZONE, "
              "local_at TIMESTAMP(6), payload RAW(16), label VARCHAR2(40), day DATE)",
}
# The documented types (docs/types.md), as each tool names them: id, amount, at, local_at, payload, label, day.
COLUMNS = ("id", "amount", "at", "local_at", "payload", "label", "day")
TYPES = {
    "deltalake": ("int64", "decimal128(12, 2)", "timestamp[us, tz=UTC]", "timestamp[us]", "binary", "string",
                  "date32[day]"),
    "duckdb": ("BIGINT", "DECIMAL(12,2)", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP", "BLOB", "VARCHAR", "DATE"),
    "polars": ("Int64", "Decimal(precision=12, scale=2)", "Datetime(time_unit='us', time_zone='UTC')",
               "Datetime(time_unit='us', time_zone=None)", "Binary", "String", "Date"),
    "spark": ("bigint", "decimal(12,2)", "timestamp", "timestamp_ntz", "binary", "string", "date"),
}


def literals(kind: str, i: int) -> str:
    """Row ``i``'s values as ``kind``'s SQL: a negative decimal now and then, an instant given at +02:00, the
    microseconds of a local time, bytes with a zero and a 0xff, text beyond ASCII, a leap day."""
    amount = f"{'-' if i % 3 == 0 else ''}{i * 37 % 1000}.{i % 100:02d}"
    instant, local = f"2024-06-01 12:{i:02d}:00.25", f"2024-02-29 23:59:{i:02d}.123456"
    payload = bytes([i, 0, 255]).hex()
    label, day = f"r{i} héllo ☃", f"2024-02-{i % 28 + 1:02d}"
    if kind == "postgres":
        return (f"({i}, {amount}, '{instant}+02', '{local}', '\\x{payload}', '{label}', '{day}')")
    if kind == "mysql":  # TIMESTAMP in the session's zone: the harness's sessions run in UTC
        return f"({i}, {amount}, '{instant}', '{local}', x'{payload}', '{label}', '{day}')"
    if kind == "oracle":
        return (f"({i}, {amount}, TIMESTAMP '{instant} +02:00', TIMESTAMP '{local}', HEXTORAW('{payload}'), "
                f"'{label}', DATE '{day}')")
    return f"({i}, '{amount}', '{instant}+02:00', '{local}', x'{payload}', '{label}', '{day}')"


@dataclass
class Written:
    config: DatabusConfig
    kinds: list[str]
    harnesses: dict[str, SourceHarness]
    first: dict[str, list[dict[str, Any]]]  # each kind's source rows at its first sync
    first_scn: dict[str, int]  # the snapshot's SCN then
    first_version: dict[str, int]  # the snapshot's Delta version then

    def path(self, *parts: str) -> str:
        return str(Path(str(self.config.lake.path)) / Path(*parts))


def _kinds() -> list[str]:
    return [k for k in SOURCE_KINDS if k != "oracle" or all(os.environ.get(v) for v in ORACLE_ENV)]


@pytest.fixture(scope="module")
def lake(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Written]:
    """Bootstrapped, then changed (updates, soft deletes, inserts) and merged, by every kind."""
    folder = tmp_path_factory.mktemp("readers")
    kinds = _kinds()
    for kind in kinds:
        (folder / kind).mkdir()
    harnesses = {kind: harness_of(kind, folder / kind, request) for kind in kinds}
    for kind, harness in harnesses.items():
        harness.execute([DDL[kind], *(f"INSERT INTO readings VALUES {literals(kind, i)}" for i in range(1, ROWS + 1))])
    sources = [{**h.source_config(kind, [(TABLE, ["id"])]), "change_data_feed": True} for kind, h in harnesses.items()]
    for s in sources:
        s["tables"][0].update(deletes="soft", history=True)
    config = parse_config({
        "lake": str(folder / "lake"), "merge": {"file_rows": 7},  # several files per table
        "sources": sources,
        "logical_tables": [{"name": "all_readings", "shard_column": "kind",
                            "parts": [{"source": kind, "table": TABLE, "shard": kind} for kind in kinds]}]},
        base=folder)
    first, scns, versions = {}, {}, {}
    for kind in kinds:
        cycle(config, spark, kind)
        first[kind] = read_rows(open_source(config.source(kind)), TABLE)
        snap = DeltaSnapshot(config.lake, kind, TABLE)
        applied, version = snap.applied_scn(), snap.version()
        assert applied is not None and version is not None
        scns[kind], versions[kind] = applied.value, version
    for kind, harness in harnesses.items():
        harness.execute([*(f"UPDATE readings SET label = 'changed {i}', amount = {i}.5 WHERE id = {i}"
                           for i in range(1, 8)),
                         *(f"DELETE FROM readings WHERE id = {i}" for i in range(8, 12)),
                         *(f"INSERT INTO readings VALUES {literals(kind, i)}" for i in range(ROWS + 1, ROWS + 6))])
        cycle(config, spark, kind)
    sync_logical(config, "all_readings", spark=spark)
    yield Written(config, kinds, harnesses, first, scns, versions)


def read_with(tool: str, lake: Written, reads: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``reads`` by ``tool`` in a process of its own, which must exit 0."""
    request = {"lake": str(lake.config.lake.path), "reads": {
        name: {**read, "path": lake.path(*read["key"])} for name, read in reads.items()}}
    done = subprocess.run([sys.executable, "-m", "tests.support.lake_reader", tool, json.dumps(request)],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, f"{tool} exited {done.returncode}: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def source_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: tagged(v) for k, v in r.items()} for r in rows), key=lambda r: r["id"])


def data_rows(got: dict[str, Any], *extra: str) -> list[dict[str, Any]]:
    """A read's rows in the table's own columns (and ``extra``), by key."""
    wanted = (*COLUMNS, *extra)
    return sorted(({k: r[k] for k in wanted} for r in got["rows"]), key=lambda r: (r.get("kind", ""), r["id"]))


def reads_of(lake: Written) -> dict[str, dict[str, Any]]:
    reads: dict[str, dict[str, Any]] = {}
    for kind in lake.kinds:
        reads[f"{kind}/snapshot"] = {"key": ["snapshot", kind, TABLE], "live": True}
        reads[f"{kind}/as-of-first-sync"] = {"key": ["history", kind, TABLE], "as_of": lake.first_scn[kind]}
        reads[f"{kind}/first-version"] = {"key": ["snapshot", kind, TABLE], "version": lake.first_version[kind],
                                          "live": True}
    reads["logical"] = {"key": ["logical", "all_readings"], "live": True}
    return reads


@pytest.mark.parametrize("tool", ["deltalake", "duckdb", "polars", "spark"])
def test_each_tool_reads_every_table_exactly_and_exits_cleanly(lake: Written, tool: str) -> None:
    reads = reads_of(lake)
    if tool == "duckdb":  # delta_scan reads a table's newest version only
        reads = {n: r for n, r in reads.items() if "version" not in r}
    if tool == "deltalake":
        for kind in lake.kinds:
            reads[f"{kind}/snapshot"]["pandas"] = True
    got = read_with(tool, lake, reads)
    now = {kind: source_rows(read_rows(open_source(lake.config.source(kind)), TABLE)) for kind in lake.kinds}
    for kind in lake.kinds:
        assert data_rows(got[f"{kind}/snapshot"]) == now[kind], f"{tool}: {kind}'s snapshot"
        assert data_rows(got[f"{kind}/as-of-first-sync"]) == source_rows(lake.first[kind]), \
            f"{tool}: {kind}'s history as of SCN {lake.first_scn[kind]}"
        if f"{kind}/first-version" in got:
            assert data_rows(got[f"{kind}/first-version"]) == source_rows(lake.first[kind]), \
                f"{tool}: {kind}'s snapshot at version {lake.first_version[kind]}"
        types = got[f"{kind}/snapshot"]["types"]
        assert tuple(types[c] for c in COLUMNS) == TYPES[tool], f"{tool}: {kind}'s column types"
    expected = sorted(({**r, "kind": kind} for kind in lake.kinds for r in now[kind]),
                      key=lambda r: (r["kind"], r["id"]))
    assert data_rows(got["logical"], "kind") == expected, f"{tool}: the logical table"
    if tool == "deltalake":
        for kind in lake.kinds:
            frame = data_rows(got[f"{kind}/snapshot/pandas"])
            assert frame == now[kind], f"to_pandas: {kind}'s snapshot"


@pytest.mark.parametrize("tool", ["deltalake", "spark"])
def test_the_change_feed_read_by_delta_rs_and_spark_holds_each_changed_rows_new_image(lake: Written, tool: str) -> None:
    reads = {kind: {"key": ["snapshot", kind, TABLE], "feed_from": lake.first_version[kind] + 1}
             for kind in lake.kinds}
    got = read_with(tool, lake, reads)
    for kind in lake.kinds:
        now = {r["id"]: r for r in source_rows(read_rows(open_source(lake.config.source(kind)), TABLE))}
        newest: dict[int, dict[str, Any]] = {}
        for row in sorted(got[kind]["rows"], key=lambda r: int(r["_commit_version"])):
            if row["_change_type"] in ("insert", "update_postimage"):
                newest[row["id"]] = row
        live = {i: {c: r[c] for c in COLUMNS} for i, r in newest.items() if r["__op"] != "d"}
        deleted = {i for i, r in newest.items() if r["__op"] == "d"}
        assert deleted == set(range(8, 12)), f"{tool}: {kind}'s soft deletes in the feed"
        assert live == {i: now[i] for i in [*range(1, 8), *range(ROWS + 1, ROWS + 6)]}, f"{tool}: {kind}'s feed"


def test_the_products_own_reads_of_the_lake_exit_cleanly(lake: Written) -> None:
    """Each of these processes reads the lake through the product and returns: with delta-rs's default file
    system about half of them abort at exit (exit 134), after printing the right count."""
    kind = lake.kinds[0]
    script = ("import sys; from dagster_databus.dataplane.delta import DeltaSnapshot; "
              "from dagster_databus.consumer.history import as_of; from dagster_databus.core.scn import Scn; "
              f"snap = DeltaSnapshot(sys.argv[1], {kind!r}, {TABLE!r}); "
              f"print(as_of(sys.argv[1], {kind!r}, {TABLE!r}, scn=Scn({lake.first_scn[kind]})).num_rows, "
              "snap.row_count(), snap.read().num_rows)")
    expected = f"{len(lake.first[kind])} {ROWS + 5 - 4} {ROWS + 5 - 4}"
    for _ in range(12):
        done = subprocess.run([sys.executable, "-c", script, str(lake.config.lake.path)], capture_output=True,
                              text=True, timeout=120)
        assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr[-2000:]


def doc_examples() -> list[str]:
    """The Python examples of docs/consumers.md, "Reading the lake"."""
    text = (REPO / "docs" / "consumers.md").read_text()
    section = text[text.index("## Reading the lake"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_the_docs_examples_of_reading_the_lake_run_on_it(lake: Written) -> None:
    """Each tool's example in docs/consumers.md, on this lake: its SQLite source's table for shop.orders, the version
    and SCN of its first sync for 12 and 1234, run as a script of its own that must exit 0."""
    kind = lake.kinds[0]
    examples = doc_examples()
    assert len(examples) == 4, "an example per tool: delta-rs, DuckDB, Polars, Spark"
    for example in examples:
        script = (example.replace("/lake/", f"{lake.config.lake.path}/").replace("shop", kind)
                  .replace("orders", TABLE).replace("version=12", f"version={lake.first_version[kind]}")
                  .replace("1234", str(lake.first_scn[kind])))
        if "session" in script:
            script = ("from pyspark.sql import SparkSession\n"
                      "session = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
                      ".getOrCreate()\n"
                      f"lake = {str(lake.config.lake.path)!r}\n{script}\n"
                      f"print({TABLE}.count(), before.count())\nsession.stop()\n")  # ``orders``, renamed
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, f"exit {done.returncode} running:\n{script}\n{done.stderr[-3000:]}"
