"""One lazily created Spark session per process (local, a cluster's ``spark.master``, or a thin client of a
Spark Connect server, ``spark.remote``), with the change-log data source registered; reading the log through
it; progress of the jobs a step runs; what differs between a classic and a Connect session."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from dagster_databus.config import DatabusConfig, SparkConfig
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConfigError, SparkEnvironmentError, SparkUnavailableError, from_task
from dagster_databus.storage.durable import write_json_atomic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DELTA_JARS_ENV = "DATABUS_DELTA_JARS"
CACHE_ENV = "DATABUS_CACHE_DIR"  # where SharedSessions keeps the Connect session runs attach to
T = TypeVar("T")
R = TypeVar("R")
_lock = threading.Lock()
_session: SparkSession | None = None
_parallelism: dict[str, int] = {}  # per Spark Connect session id
# Session settings every run needs, whatever the master; a Connect session sets them on the server's
# session for this client.
SESSION_CONF = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC",
                "spark.sql.execution.arrow.pyspark.enabled": "true"}


def delta_jar_dir(config: SparkConfig) -> Path | None:
    folder = config.delta_jars or (Path(os.environ[DELTA_JARS_ENV]) if os.environ.get(DELTA_JARS_ENV) else None)
    return folder if folder and any(folder.glob("delta-spark*.jar")) else None


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The process's Spark session, created on first use (Spark takes seconds to start)."""
    global _session
    with _lock:
        if _session is None:
            _session = open_session(config or SparkConfig())
        return _session


def open_session(config: SparkConfig) -> SparkSession:
    """A session as ``config`` describes it, with the change-log data source registered, not kept as the
    process's: with ``remote``, a new Spark Connect session (which can live beside a classic one in one
    process); else the process's classic session, started if needed."""
    session = _connect(config) if config.remote else _classic(config)
    register_data_sources(session)
    return session


def register_data_sources(spark: SparkSession) -> None:
    """Register the package's Python data sources with ``spark``, once, before any job runs: Spark's check for
    a name already taken races with a registration of the same name under way (tables sync in threads, and
    runs in other processes share a Connect session), so a source already there is left as it is."""
    from dagster_databus.spark.deltafiles import DeltaFilesSource
    from dagster_databus.spark.logsource import ChangeLogDataSource
    from dagster_databus.spark.tables import TableFilesSource, TableRangesSource, TableRefreshSource

    for source in (ChangeLogDataSource, TableFilesSource, TableRangesSource, TableRefreshSource, DeltaFilesSource):
        try:
            spark.dataSource.register(source)
        except Exception as exc:
            if _condition(exc) != "DATA_SOURCE_ALREADY_EXISTS":
                raise


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a thin client: no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _connect(config: SparkConfig) -> SparkSession:
    assert config.remote is not None
    _require_reachable(config.remote)
    # Not pyspark.sql.SparkSession.builder.remote(): that refuses to run beside a classic session and sets
    # SPARK_CONNECT_MODE_ENABLED for the whole process, which would turn later classic sessions into clients.
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if "session_id=" in config.remote:  # the user's own session
        return _configured(ConnectSession.builder.remote(config.remote).create(), config)
    shared = SharedSessions(config.remote, package_digest() if config.ship_package else "")
    session = ConnectSession.builder.remote(shared.url(shared.current())).create()
    try:
        return _configured(session, config)
    except Exception as exc:
        if _condition(exc) != "INVALID_HANDLE.SESSION_CLOSED":
            raise
    # The server closed the shared session (idle past its timeout, or released) and keeps refusing its id:
    # start another and tell the next runs.
    return _configured(ConnectSession.builder.remote(shared.url(shared.renew())).create(), config)


def _configured(session: SparkSession, config: SparkConfig) -> SparkSession:
    """``session`` with the run's settings (its first requests to the server) and, if asked, the package."""
    for key, value in {**SESSION_CONF, **config.conf}.items():
        try:
            session.conf.set(key, value)
        except Exception as exc:
            if _condition(exc).startswith("INVALID_HANDLE"):
                raise
            if key in SESSION_CONF:
                continue  # the server fixed it at start; its own value stands
            raise ConfigError(f"spark.conf.{key}", f"cannot be set over Spark Connect: {str(exc).splitlines()[0]}",
                              "set it where the Spark Connect server is started (spark-submit --conf) and remove "
                              "it from spark.conf; over Connect only session (SQL) settings apply") from None
    if config.ship_package:
        ship_package(session)
    return session


def _condition(exc: BaseException) -> str:
    """A Spark error's condition (``INVALID_HANDLE.SESSION_CLOSED``), or ``""``."""
    get = getattr(exc, "getCondition", None)
    return str(get() or "") if callable(get) else ""


class SharedSessions:
    """The server-side session that every run with the same ``remote`` (and shipped package) attaches to.

    A Connect session's first Python tasks start the server's Python workers for it (a second or more per
    data source on a small machine); later runs in the same session find them running. So runs do not
    each open a new session: they attach to one by its id, first a fixed one derived from the server and
    package (the same on every host), and, once the server has closed that one (it refuses a closed id
    until it restarts), the id a run started instead, kept in a small file on this host
    (``DATABUS_CACHE_DIR``, default ``~/.cache/dagster-databus``). Runs never release it; the server drops
    it after ``spark.connect.session.manager.defaultSessionTimeout`` without use.
    """

    def __init__(self, remote: str, package: str) -> None:
        self.remote = remote.rstrip("/")
        # Hashed: the URL may carry a token, which has no place in a cache file.
        self.key = hashlib.sha256(f"{self.remote}|{package}".encode()).hexdigest()[:32]
        self.file = cache_dir() / "spark-connect-sessions.json"

    def url(self, session_id: str) -> str:
        return f"{self.remote}{'' if ';' in self.remote else '/'};session_id={session_id}"

    def current(self) -> str:
        return self._known().get(self.key) or str(uuid.uuid5(uuid.NAMESPACE_URL, f"dagster-databus|{self.key}"))

    def renew(self) -> str:
        session_id = str(uuid.uuid4())
        with contextlib.suppress(OSError):  # no cache here: later runs start their own session
            self.file.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.file, {**self._known(), self.key: session_id})
        return session_id

    def _known(self) -> dict[str, str]:
        try:
            known = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in known.items()} if isinstance(known, dict) else {}


def _require_reachable(url: str) -> None:
    """Fail at once, with the fix, when nothing listens at ``url``: the Connect client would otherwise retry
    for minutes before its first query fails."""
    import socket

    parsed = urlparse(url.replace("sc://", "http://", 1))
    host, port = parsed.hostname or "localhost", parsed.port or 15002
    try:
        with socket.create_connection((host, port), timeout=10):
            return
    except OSError as exc:
        raise SparkUnavailableError(
            f"the Spark Connect server at {host}:{port} (spark.remote) cannot be reached: {exc.strerror or exc}",
            "start it (docs/deployment.md, \"Spark Connect\": python -m dagster_databus.spark.connect_server run), "
            "or correct spark.remote", remote=f"{host}:{port}") from None


def ship_package(spark: SparkSession) -> None:
    """Add this package (and its ``sql/`` files) to the Connect session's Python path on the server, for a
    server whose Python lacks it; its dependencies must be installed there (docs/deployment.md)."""
    spark.addArtifacts(str(package_zip()), pyfile=True)  # type: ignore[attr-defined]


def cache_dir() -> Path:
    """This host's folder for what runs may share and lose without harm (``DATABUS_CACHE_DIR``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dagster-databus"


def package_digest() -> str:
    """The shipped package's content hash: runs of another version of it get a session of their own (a
    session's Python artifacts cannot be replaced)."""
    return hashlib.sha256(package_zip().read_bytes()).hexdigest()[:16]


_zip_lock = threading.Lock()
_zip: Path | None = None


def package_zip() -> Path:
    """``dagster_databus.zip``: the package's files and the ``sql/`` folder beside it, as the repository lays
    them out (``sources.sqlfiles`` finds them there); built once per process."""
    import tempfile
    import zipfile

    import dagster_databus
    from dagster_databus.sources.sqlfiles import SQL_ROOT

    global _zip
    with _zip_lock:
        if _zip is None or not _zip.exists():
            package = Path(dagster_databus.__file__).resolve().parent
            out = Path(tempfile.mkdtemp(prefix="databus-ship-")) / "dagster_databus.zip"
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
                for root, prefix in ((package, package.name), (SQL_ROOT, "sql")):
                    for path in sorted(root.rglob("*")):
                        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".nbi",
                                                                                                       ".nbc"):
                            archive.write(path, f"{prefix}/{path.relative_to(root).as_posix()}")
            _zip = out
        return _zip


def _classic(config: SparkConfig) -> SparkSession:
    # Python workers must run the interpreter that has fastavro and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName("dagster-databus")
        .master(config.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", str(Path.cwd() / "spark-warehouse"))
        .config(map=SESSION_CONF)
    )
    jars = delta_jar_dir(config)
    if jars is not None:
        builder = (
            builder.config("spark.jars", ",".join(str(p) for p in sorted(jars.glob("*.jar"))))
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        )
    for key, value in config.conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def default_parallelism(spark: SparkSession) -> int:
    """The cores Spark schedules on (``SparkContext.defaultParallelism``), which sizes the merge's tasks. A
    Connect session has no SparkContext: the partitions Spark gives a range with none asked for (the same
    default), found by one tiny query, once per session."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    key = str(spark.session_id)  # type: ignore[attr-defined]
    if key not in _parallelism:
        row = spark.sql("SELECT max(p) + 1 AS n FROM (SELECT spark_partition_id() AS p FROM range(65536))").first()
        _parallelism[key] = max(int(row[0]) if row and row[0] is not None else 1, 1)
    return _parallelism[key]


def sql_functions(spark: SparkSession) -> ModuleType:
    """``pyspark.sql.functions`` for ``spark``'s kind. PySpark picks classic or Connect functions by an
    environment variable, not by session, and one process may hold one session of each kind."""
    if is_connect(spark):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def sql_window(spark: SparkSession) -> Any:
    """``pyspark.sql.Window`` for ``spark``'s kind (see ``sql_functions``)."""
    if is_connect(spark):
        from pyspark.sql.connect.window import Window as ConnectWindow

        return ConnectWindow
    from pyspark.sql import Window

    return Window


def may_commit_with_delta_spark(config: SparkConfig) -> bool:
    """Whether delta-spark could be on the session's classpath; when not, merges need no Spark session."""
    if config.remote:
        return True  # the server's classpath is its own: delta_spark_available asks it
    if delta_jar_dir(config) is not None:
        return True
    return any("delta" in value.lower() for key, value in config.conf.items()
               if key.startswith("spark.jars") or key in ("spark.sql.extensions", "spark.driver.extraClassPath"))


def delta_spark_available(spark: SparkSession) -> bool:
    """True when delta-spark's classes load in this session's JVM; for a Connect session, when the server's
    session names Delta's SQL extension (the client cannot load classes there). Only "no such class" means
    absent: any other failure (the JVM or the server gone) is raised, not read as absence."""
    if is_connect(spark):
        extensions = spark.conf.get("spark.sql.extensions", None) or ""  # with a default: never "not set"
        return "delta" in extensions.lower()
    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm
    loader = jvm.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", True, loader)
    except Py4JJavaError as exc:
        if exc.java_exception.getClass().getName() == "java.lang.ClassNotFoundException":
            return False
        raise
    return True


def with_spark_properties(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` to run in another thread with this thread's Spark local properties (job group, scheduler pool,
    a test's fault point), which a classic session keeps per thread; as is when no classic Spark runs here
    (a Connect block tags its own operations in the thread that runs them)."""
    pyspark = sys.modules.get("pyspark")
    context = pyspark.SparkContext._active_spark_context if pyspark is not None else None
    # A context another thread is still creating is already the active one, but has no JVM side (``_jsc``)
    # until the JVM's SparkContext is up: this thread has set no properties on it, so there are none to copy.
    jsc = getattr(context, "_jsc", None)
    if jsc is None:
        return fn
    properties = jsc.sc().getLocalProperties().clone()

    def run(arg: T) -> R:
        jsc.sc().setLocalProperties(properties)
        return fn(arg)

    return run


@contextmanager
def task_errors() -> Iterator[None]:
    """Re-raise a typed error a Spark task raised (``errors.for_task``) as itself, not a PythonException; a
    module Spark's Python could not import as ``SparkEnvironmentError``, with the fix."""
    try:
        yield
    except Exception as exc:
        error = from_task(exc) or missing_module(exc)
        if error is None:
            raise
        raise error from None


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def missing_module(exc: BaseException) -> SparkEnvironmentError | None:
    """The module a Spark error says Spark's Python (a worker's, or a Connect server's) could not import."""
    if not type(exc).__module__.startswith("pyspark"):
        return None  # this process's own import failed: its traceback says so
    found = _MISSING_MODULE.search(str(exc))
    if found is None:
        return None
    module = found.group(1)
    if module.split(".")[0] == "dagster_databus":
        fix = ("install this package (the same version) into the Python the Spark workers run (PYSPARK_PYTHON on "
               "the executors, or on the Spark Connect server), or, with spark.remote, set spark.ship_package: true "
               "to send it with every session (docs/deployment.md)")
    else:
        fix = (f"install {module.split('.')[0]} into the Python the Spark workers run, with the rest of this "
               "package's dependencies (pyproject.toml: pyarrow, numba, numpy, deltalake, obstore, fastavro...)")
    return SparkEnvironmentError(f"Spark's Python cannot import {module!r}: the Spark tasks of this package "
                                 "cannot run there", fix, module=module)


def read_changes(spark: SparkSession, config: DatabusConfig, source: str, table: str, since: Scn,
                 until: Scn, route: str | None = None, split_bytes: int = 0) -> DataFrame:
    """The table's changes in (since, until], one input partition per log segment (``spark.logsource``;
    segments over ``split_bytes`` in pieces, smaller ones together up to that size); with ``route`` (a packed
    merge plan), reduced per task and tagged with their file groups."""
    reader = (spark.read.format("databus_log")
              .option("lake", config.lake.spec()).option("source", source).option("table", table)
              .option("since", str(since)).option("until", str(until)).option("split_bytes", str(split_bytes)))
    return (reader.option("route", route) if route is not None else reader).load()


@contextmanager
def job_progress(spark: SparkSession, progress: Progress, what: str, every_s: float | None = None) -> Iterator[None]:
    """Report the tasks done of the Spark jobs run inside the block, every ``every_s`` seconds (by default
    every ``core.progress.EVERY_S``)."""
    from dagster_databus.core import progress as progress_module

    every_s = progress_module.EVERY_S if every_s is None else every_s
    if is_connect(spark):
        with _connect_progress(spark, progress, what, every_s):
            yield
        return
    context = spark.sparkContext
    group = f"databus-{uuid.uuid4().hex[:12]}"
    context.setJobGroup(group, what)
    stop = threading.Event()

    def watch() -> None:
        tracker = context.statusTracker()
        while not stop.wait(every_s):
            done = total = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info else []):
                    stage_info = tracker.getStageInfo(stage)
                    if stage_info:
                        done, total = done + stage_info.numCompletedTasks, total + stage_info.numTasks
            if total:
                progress(f"{what}: {done} of {total} Spark tasks done")

    watcher = threading.Thread(target=watch, name="databus-spark-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


@contextmanager
def _connect_progress(spark: Any, progress: Progress, what: str, every_s: float) -> Iterator[None]:
    """``job_progress`` over Spark Connect: the server streams each operation's stages to the client, which
    hands them to registered handlers (in the thread that runs the operation). The block's operations carry
    a tag; a block left by an interrupt (Ctrl-C, a run terminated) interrupts them, since the server would
    otherwise finish work no client waits for."""
    tag = f"databus-{uuid.uuid4().hex[:12]}"
    owner = threading.get_ident()
    seen: dict[tuple[str | None, int], tuple[int, int]] = {}  # (operation, stage) -> (done, tasks)
    last = time.monotonic()

    def handler(stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        nonlocal last
        if threading.get_ident() != owner:
            return  # another thread's operation on this session
        for stage in stages or ():
            seen[(operation_id, stage.stage_id)] = (stage.num_completed_tasks, stage.num_tasks)
        now = time.monotonic()
        if done or now - last < every_s:
            return
        total = sum(tasks for _, tasks in seen.values())
        if total:
            last = now
            with contextlib.suppress(Exception):  # a failing reporter must not fail the Spark job
                progress(f"{what}: {sum(d for d, _ in seen.values())} of {total} Spark tasks done")

    spark.addTag(tag)
    spark.registerProgressHandler(handler)
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, Exception):  # not for errors: an unreachable server would make this retry
            with contextlib.suppress(Exception):
                spark.interruptTag(tag)
        raise
    finally:
        spark.removeProgressHandler(handler)
        spark.removeTag(tag)
