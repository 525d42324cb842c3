"""Shared fixtures: one Spark session for the whole run, on a real standalone cluster (a master and two
workers started from the pyspark wheel), real SQLite files, real Delta tables.

Every test is marked ``spark`` or ``server`` when it needs one, ``wheel`` when it builds and installs the package,
and ``fault`` when it is a fault scenario (``pytest_collection_modifyitems``), so ``pytest -m 'not spark and not
server and not wheel and not fault'`` (``make test-fast``) runs the rest without starting or building any."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagster_databus import capture
from dagster_databus.config import DatabusConfig, SparkConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sources.registry import KINDS
from dagster_databus.spark.connect_server import ConnectServer
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.storage.lake import Lake
from dagster_databus.sync.merge import TableSyncResult, sync_source
from dagster_databus.sync.reconcile import compare_rows
from tests.harness import (
    ORACLE_ENV,
    ORACLE_SKIP,
    MysqlHarness,
    OracleHarness,
    PostgresHarness,
    SourceHarness,
    SqliteHarness,
)
from tests.mariadb import COMPRESSED_BINLOG, MariaDBServer
from tests.postgres import PostgresServer, find_pg_bindir
from tests.s3server import S3Server
from tests.sparkcluster import SparkCluster
from tests.sparkconnect import start_connect_server
from tests.wheel import InstalledWheel, build_and_install, warm

# Every registered kind: a new kind runs the behavioural suite (and fails it until ``harness_of`` has a harness).
SOURCE_KINDS = list(KINDS)
# The behavioural suite also runs on a MariaDB that compresses its binlog (log_bin_compress).
BEHAVIOUR_KINDS = [*SOURCE_KINDS, "mysql-compressed"]

# What marks a test ``spark``: a fixture that starts a Spark session or cluster, or, for a test that takes
# ``lazy_spark``, a parameter naming an engine that runs on Spark.
SPARK_FIXTURES = {"spark", "spark_cluster", "spark_connect_server", "connect_spark"}
SPARK_ENGINES = {"spark", "delta-spark"}
# What marks a test ``server``: a fixture that starts one (here or in its test module: MariaDB pairs and
# shards, an Oracle harness, `dagster dev`), or a parameter that puts the source, the lake or its objects on
# one (whatever the parameter is called). A test that starts a server in its body carries the mark itself.
SERVER_FIXTURES = {"mariadb", "mariadb_compressed", "own_server", "s3", "pair", "servers", "oracle", "dagster_ui",
                   "postgres"}
SERVER_PARAMS = {"mysql", "mysql-compressed", "oracle", "s3", "postgres"}
# What marks a test ``wheel``: it builds the package and installs it into a fresh environment (``tests.wheel``),
# or runs on that road (a parameter named so).
WHEEL_FIXTURES = {"installed_wheel", "made", "project"}
# What marks a test ``fault``: the fault suite's folder (processes killed at each boundary, disks full, clocks
# jumping); scenarios elsewhere that kill a process or lose a server carry the mark themselves. `make test-faults`
# runs them, `make test` the rest; CI runs both.
FAULT_SUITE = Path(__file__).resolve().parent / "faults"
# The soaks (hundreds of runs each): collected only when their folder or a file in it is named (`make soak`), so
# `make test`, `make test-faults` and `make test-fast` never collect them.
SOAK_SUITE = Path(__file__).resolve().parent / "soak"
# Set by `make test` (so CI): a test that would skip because a system tool is missing fails instead.
REQUIRE_ALL_ENV = "DATABUS_REQUIRE_ALL"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if fixtures & SPARK_FIXTURES or ("lazy_spark" in fixtures and SPARK_ENGINES & set(map(str, params.values()))):
            item.add_marker(pytest.mark.spark)
        if fixtures & SERVER_FIXTURES or SERVER_PARAMS & set(map(str, params.values())):
            item.add_marker(pytest.mark.server)
        if fixtures & WHEEL_FIXTURES or "wheel" in set(map(str, params.values())):
            item.add_marker(pytest.mark.wheel)
        if FAULT_SUITE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.fault)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path != SOAK_SUITE and SOAK_SUITE not in collection_path.parents:
        return None
    named = [(config.invocation_params.dir / str(arg).split("::")[0]).resolve() for arg in config.args]
    return True if not any(p == SOAK_SUITE or SOAK_SUITE in p.parents for p in named) else None


def require_tool(present: bool, reason: str) -> None:
    """Skip with ``reason`` (which names the package to install) when a system tool is missing; under
    DATABUS_REQUIRE_ALL=1 (`make test`, CI) fail instead, so a passing full run has not skipped it."""
    if present:
        return
    if os.environ.get(REQUIRE_ALL_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ALL_ENV}=1: the full suite runs every test)", pytrace=False)
    pytest.skip(reason)


def immutable(path: Path, on: bool) -> bool:
    """chattr +i (or -i): a folder even root cannot write (permission bits do not stop root); whether it took."""
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def make_read_only(path: Path) -> None:
    """``path`` made immutable (undo with ``immutable(path, False)``); where chattr +i is not permitted, a skip that
    `make test` turns into a failure (``require_tool``)."""
    require_tool(immutable(path, True), "chattr +i (e2fsprogs, run as root) is not permitted here, so no folder is "
                                        "read-only to root")


@pytest.fixture(scope="session", autouse=True)
def host_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This host's cache (the Spark Connect session runs share) in the test run's own folder, not the user's."""
    from dagster_databus.spark.connect import CACHE_ENV

    folder = tmp_path_factory.mktemp("cache")
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """A Spark standalone master with two one-core workers, each its own process with its own folder."""
    cluster = SparkCluster(workers=2, cores=1, memory="1g")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def spark(spark_cluster: SparkCluster) -> Iterator[SparkRuntime]:
    """The runtime every test shares, started (a process has one classic session): the driver here, executors
    on the cluster."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    yield SparkRuntime(SparkConfig(master=spark_cluster.url, conf={
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "768m", "spark.cores.max": "2"})).start()


@pytest.fixture
def lazy_spark(request: pytest.FixtureRequest) -> SparkRuntime:
    """The shared session, started when an engine first asks for it: for tests run with each engine, whose
    local-engine runs never ask (``cycle``, ``sync_source``, ``engine_for`` and ``open_engine`` take it)."""
    return SparkRuntime.deferred(lambda: request.getfixturevalue("spark").session)


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDBServer]:
    """One MariaDB server with binary logging for the session; tests that reset or purge binlogs start their own."""
    server = MariaDBServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster (wal_level=logical) for the session; tests that change settings start their own."""
    require_tool(find_pg_bindir() is not None,
                 "PostgreSQL server binaries not found: install Debian's postgresql (.ci/prereqs install)")
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg(postgres: PostgresServer, request: pytest.FixtureRequest) -> PostgresHarness:
    """A fresh database of its own on the session's PostgreSQL cluster, dropped with its slots after the test."""
    harness = PostgresHarness(postgres)
    request.addfinalizer(harness.close)
    return harness


@pytest.fixture
def own_server() -> Iterator[MariaDBServer]:
    """A server of the test's own, for what would disturb others: RESET, PURGE, binlog files rewritten."""
    server = MariaDBServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def mariadb_compressed() -> Iterator[MariaDBServer]:
    """A second MariaDB server whose binlog is compressed: its query and row events are the compressed kinds."""
    server = MariaDBServer(extra_args=COMPRESSED_BINLOG)
    try:
        yield server
    finally:
        server.close()


def source_harness(request: pytest.FixtureRequest, tmp_path: Path) -> SourceHarness:
    """The harness of the source kind ``request.param`` names."""
    return harness_of(request.param, tmp_path, request)


def harness_of(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SourceHarness:
    """A harness of source kind ``kind`` (its server started once per session, a database of its own per test)."""
    if kind == "sqlite":
        return SqliteHarness(tmp_path / "source.db")
    if kind == "oracle":
        if not all(os.environ.get(k) for k in ORACLE_ENV):
            pytest.skip(ORACLE_SKIP)
        return OracleHarness()
    if kind == "postgres":
        harness = PostgresHarness(request.getfixturevalue("postgres"))
        request.addfinalizer(harness.close)
        return harness
    if kind == "mysql-compressed":
        return MysqlHarness(request.getfixturevalue("mariadb_compressed"))
    if kind == "mysql":
        return MysqlHarness(request.getfixturevalue("mariadb"))
    raise LookupError(f"no test harness for source kind {kind!r}: add one to tests/harness.py and harness_of")


@pytest.fixture(params=SOURCE_KINDS)
def source(request: pytest.FixtureRequest, tmp_path: Path) -> SourceHarness:
    return source_harness(request, tmp_path)


def require_delta_spark(spark: SparkRuntime, to: str) -> None:
    """Skip, saying how to provide them, where delta-spark's jars are not on ``spark``'s classpath."""
    if not spark.delta_spark_available():
        pytest.skip("delta-spark's jars are not on the Spark classpath (they come from Maven, unreachable here); "
                    "set DATABUS_DELTA_JARS to a folder holding delta-spark_2.13-4.4.*.jar and "
                    f"delta-storage-4.4.*.jar {to}")


def cycle(config: DatabusConfig, spark: SparkRuntime, source: str = "shop") -> list[TableSyncResult]:
    """One full pipeline pass: install (idempotent), capture, merge."""
    capture.install(config, source)
    capture.run(config, source)
    return sync_source(spark, config, source)


def snapshot_mismatches(config: DatabusConfig) -> list[str]:
    """Each table whose snapshot is not the source's rows now, described."""
    out = []
    for source_cfg in config.sources:
        src = open_source(source_cfg)
        for table in source_cfg.tables:
            key = src.schemas()[table.name].primary_key
            snap = DeltaSnapshot(config.lake, source_cfg.name, table.name)
            result = compare_rows(table.name, key, read_rows(src, table.name), snap.read().to_pylist())
            if not result.equal:
                out.append(f"{table.name}: {result}")
    return out


def assert_snapshots_match(config: DatabusConfig) -> None:
    mismatches = snapshot_mismatches(config)
    assert not mismatches, "; ".join(mismatches)


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[InstalledWheel, subprocess.CompletedProcess[str]]:
    """The package built into an sdist and a wheel and installed into a fresh environment (``tests.wheel``), and
    its first ``databus warm --no-spark``, into an empty numba cache (as a new machine's), from outside the
    checkout: every later run of it loads its kernels."""
    folder = tmp_path_factory.mktemp("wheel")
    installed = build_and_install(folder)
    return installed, warm(installed, folder)


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """One S3-compatible server (moto) for the session; each test takes its own bucket."""
    server = S3Server()
    try:
        yield server
    finally:
        server.close()


# Every process has the test server's secret from its start, as in a deployment; Spark's Python
# workers are started once per session, with this environment.
os.environ[S3Server.SECRET_ENV] = S3Server.SECRET


def s3_lake(server: S3Server, prefix: str = "lake") -> Lake:
    """A lake in a fresh bucket of the test server; its secret is named by reference, resolved from the
    environment by each process (and Spark task) that opens it."""
    return Lake.parse(f"s3://{server.bucket()}/{prefix}", options=server.referenced_options)


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Path | Lake:
    """The lake a suite runs on: a local folder, and a bucket of the S3-compatible test server."""
    if request.param == "local":
        return tmp_path / "lake"
    return s3_lake(request.getfixturevalue("s3"))


@pytest.fixture(scope="session")
def spark_connect_server() -> Iterator[ConnectServer]:
    """A Spark Connect server (``local[2]``) whose Python lacks this package: sessions must ship it."""
    server = start_connect_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def connect_spark(spark_connect_server: ConnectServer) -> Iterator[SparkRuntime]:
    """A runtime on a Spark Connect session on that server, shipping the package, started. It lives beside the
    classic runtime (``spark``, on the standalone cluster): tests pass it explicitly."""
    runtime = SparkRuntime(SparkConfig(remote=spark_connect_server.url, ship_package=True)).start()
    try:
        yield runtime
    finally:
        runtime.stop()
