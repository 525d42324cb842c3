"""A Spark Connect session (``spark.remote``: the driver is a long-running server, this process a thin client),
and its answers to what differs from a classic session (``ConnectSpark``): PySpark's Connect functions and
Window, parallelism found by a query, progress from the server's progress reports, delta-spark's Connect
client, and the server's session shared by every run with the same ``remote`` (``SharedSessions``)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from dagster_databus.config import SparkConfig
from dagster_databus.core.progress import Progress
from dagster_databus.errors import ConfigError, SparkUnavailableError
from dagster_databus.spark.errors import condition
from dagster_databus.spark.kinds import KindModules
from dagster_databus.spark.settings import SESSION_CONF
from dagster_databus.spark.shipping import package_digest, ship_package
from dagster_databus.storage.durable import write_json_atomic

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.connect.shell.progress import ProgressHandler

CACHE_ENV = "DATABUS_CACHE_DIR"  # where SharedSessions keeps the Connect session runs attach to


def open_connect(config: SparkConfig) -> ConnectSession:
    """A new client of the server ``config.remote`` names, attached to the server session runs share (or to the
    session the URL names), with the run's settings and, if asked, the package."""
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
        if condition(exc) != "INVALID_HANDLE.SESSION_CLOSED":
            raise
    # The server closed the shared session (idle past its timeout, or released) and keeps refusing its id:
    # start another and tell the next runs.
    return _configured(ConnectSession.builder.remote(shared.url(shared.renew())).create(), config)


def _configured(session: ConnectSession, config: SparkConfig) -> ConnectSession:
    """``session`` with the run's settings (its first requests to the server) and, if asked, the package."""
    for key, value in {**SESSION_CONF, **config.conf}.items():
        try:
            session.conf.set(key, value)
        except Exception as exc:
            if condition(exc).startswith("INVALID_HANDLE"):
                raise
            if key in SESSION_CONF:
                continue  # the server fixed it at start; its own value stands
            raise ConfigError(f"spark.conf.{key}", f"cannot be set over Spark Connect: {str(exc).splitlines()[0]}",
                              "set it where the Spark Connect server is started (spark-submit --conf) and remove "
                              "it from spark.conf; over Connect only session (SQL) settings apply") from None
    if config.ship_package:
        ship_package(session)
    return session


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
        import hashlib

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


def cache_dir() -> Path:
    """This host's folder for what runs may share and lose without harm (``DATABUS_CACHE_DIR``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dagster-databus"


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


class ConnectSpark(KindModules):
    """A Spark Connect session's answers to what differs from a classic one (``spark.classic.ClassicSpark``)."""

    connect = True

    def __init__(self, session: ConnectSession) -> None:
        self.session = session
        self._parallelism: int | None = None

    def parallelism(self) -> int:
        """The partitions Spark gives a range with none asked for (a classic session's default parallelism): a
        Connect session has no SparkContext, so one tiny query finds it, once."""
        if self._parallelism is None:
            row = self.session.sql("SELECT max(p) + 1 AS n FROM (SELECT spark_partition_id() AS p FROM "
                                   "range(65536))").first()
            self._parallelism = max(int(row[0]) if row and row[0] is not None else 1, 1)
        return self._parallelism

    def delta_spark_available(self) -> bool:
        """Whether the server's session names Delta's SQL extension (the client cannot load classes there)."""
        extensions = self.session.conf.get("spark.sql.extensions", None) or ""  # with a default: never "not set"
        return "delta" in extensions.lower()

    @contextmanager
    def job_progress(self, progress: Progress, what: str, every_s: float) -> Iterator[None]:
        """The server streams each operation's stages to the client, which hands them to registered handlers
        (in the thread that runs the operation). The block's operations carry a tag; a block left by an
        interrupt (Ctrl-C, a run terminated) interrupts them, since the server would otherwise finish work no
        client waits for."""
        spark = self.session
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

        registered = cast("ProgressHandler", handler)  # PySpark takes any callable of its shape
        spark.addTag(tag)
        spark.registerProgressHandler(registered)
        try:
            yield
        except BaseException as exc:
            if not isinstance(exc, Exception):  # not for errors: an unreachable server would make this retry
                with contextlib.suppress(Exception):
                    spark.interruptTag(tag)
            raise
        finally:
            spark.removeProgressHandler(registered)
            spark.removeTag(tag)
