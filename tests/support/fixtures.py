"""The suite's fixtures, a plugin tests/conftest.py registers: one Spark session for the whole run on a real
standalone cluster (a master and two workers started from the pyspark wheel), the throwaway servers (one per
session, started by ``server_fixture``), a harness per source kind, the lake a test writes, the built wheel."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from dagster_databus.config import SparkConfig
from dagster_databus.spark.connect_server import ConnectServer
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.storage.lake import Lake
from tests.support.checks import require_tool
from tests.support.harness import PostgresHarness, SourceHarness
from tests.support.mariadb import COMPRESSED_BINLOG, MariaDBServer
from tests.support.postgres import PostgresServer, find_pg_bindir
from tests.support.s3server import S3Server, s3_lake
from tests.support.sources import SOURCE_KINDS, source_harness
from tests.support.sparkcluster import SparkCluster
from tests.support.sparkconnect import start_connect_server
from tests.support.wheel import InstalledWheel, build_and_install, warm

S = TypeVar("S")
Scope = Literal["session", "package", "module", "class", "function"]


def _close(server: Any) -> None:
    server.close()


def server_fixture(start: Callable[[], S], doc: str, *, name: str, scope: Scope = "session",
                   stop: Callable[[S], object] = _close) -> Any:
    """A fixture named ``name`` that starts a server with ``start`` once per ``scope``, yields it and stops it
    (``stop``, by default its ``close``) however the tests that shared it ended."""

    def serve() -> Iterator[S]:
        server = start()
        try:
            yield server
        finally:
            stop(server)

    serve.__doc__ = doc
    return pytest.fixture(scope=scope, name=name)(serve)


def start_postgres(extra_settings: dict[str, str] | None = None) -> PostgresServer:
    """A PostgreSQL cluster (wal_level=logical); a skip (a failure under `make test`) where the binaries are not
    installed."""
    require_tool(find_pg_bindir() is not None,
                 "PostgreSQL server binaries not found: install Debian's postgresql (.ci/prereqs install)")
    return PostgresServer(extra_settings or {})


mariadb = server_fixture(
    MariaDBServer, "One MariaDB server with binary logging for the session; tests that reset or purge binlogs start "
                   "their own.", name="mariadb")
mariadb_compressed = server_fixture(
    lambda: MariaDBServer(extra_args=COMPRESSED_BINLOG),
    "A second MariaDB server whose binlog is compressed: its query and row events are the compressed kinds.",
    name="mariadb_compressed")
own_server = server_fixture(
    MariaDBServer, "A server of the test's own, for what would disturb others: RESET, PURGE, binlog files rewritten.",
    name="own_server", scope="function")
postgres = server_fixture(
    start_postgres, "One PostgreSQL cluster (wal_level=logical) for the session; tests that change settings start "
                    "their own.", name="postgres")
s3 = server_fixture(S3Server, "One S3-compatible server (moto) for the session; each test takes its own bucket.",
                    name="s3")
spark_cluster = server_fixture(
    lambda: SparkCluster(workers=2, cores=1, memory="1g"),
    "A Spark standalone master with two one-core workers, each its own process with its own folder.",
    name="spark_cluster")
spark_connect_server = server_fixture(
    start_connect_server, "A Spark Connect server (``local[2]``) whose Python lacks this package: sessions must ship "
                          "it.", name="spark_connect_server", stop=ConnectServer.stop)

# Every process has the test server's secret from its start, as in a deployment; Spark's Python
# workers are started once per session, with this environment.
os.environ[S3Server.SECRET_ENV] = S3Server.SECRET


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
def connect_spark(spark_connect_server: ConnectServer) -> Iterator[SparkRuntime]:
    """A runtime on a Spark Connect session on that server, shipping the package, started. It lives beside the
    classic runtime (``spark``, on the standalone cluster): tests pass it explicitly."""
    runtime = SparkRuntime(SparkConfig(remote=spark_connect_server.url, ship_package=True)).start()
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture
def pg(postgres: PostgresServer, request: pytest.FixtureRequest) -> PostgresHarness:
    """A fresh database of its own on the session's PostgreSQL cluster, dropped with its slots after the test."""
    harness = PostgresHarness(postgres)
    request.addfinalizer(harness.close)
    return harness


@pytest.fixture(params=SOURCE_KINDS)
def source(request: pytest.FixtureRequest, tmp_path: Path) -> SourceHarness:
    return source_harness(request, tmp_path)


# The lakes a test that exercises storage runs on (the lake's files, the change log, merges, crash recovery):
# ``@ON_EACH_LAKE`` runs it on a local folder and on a bucket of the S3-compatible test server. Any other test
# gets a local folder: where storage plays no part, a second lake would repeat it on a server for nothing.
LAKES = ("local", "s3")
ON_EACH_LAKE = pytest.mark.parametrize("lake", LAKES, indirect=True)
# The same for a suite run on every source kind (``source``): each kind on a local lake, and the S3 lake once, with
# SQLite, as the source kind plays no part in how the lake is written and read.
ON_EACH_KIND_AND_LAKE = pytest.mark.parametrize(
    ("source", "lake"), [*((kind, "local") for kind in SOURCE_KINDS), ("sqlite", "s3")], indirect=True)


@pytest.fixture
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Path | Lake:
    """The lake a test writes: a local folder, or (``ON_EACH_LAKE``'s ``s3`` parameter) a bucket of the
    S3-compatible test server."""
    where = getattr(request, "param", "local")
    if where == "local":
        return tmp_path / "lake"
    if where == "s3":
        return s3_lake(request.getfixturevalue("s3"))
    raise LookupError(f"no lake {where!r}: one of {LAKES}")


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[InstalledWheel, subprocess.CompletedProcess[str]]:
    """The package built into an sdist and a wheel and installed into a fresh environment (``tests.support.wheel``),
    and its first ``databus warm --no-spark``, into an empty numba cache (as a new machine's), from outside the
    checkout: every later run of it loads its kernels."""
    folder = tmp_path_factory.mktemp("wheel")
    installed = build_and_install(folder)
    return installed, warm(installed, folder)
