"""The Spark a process's engines run their jobs on: one ``SparkRuntime``, built from ``SparkConfig`` and passed
to the engine that needs it.

It is a classic session (``spark.master``: this process is the driver, ``spark.classic``) or a thin client of a
Spark Connect server (``spark.remote``, ``spark.connect``), started when a job first asks for it (the local
engine never does), with the package's data sources registered before any job. What differs between the two
kinds is answered here, by the kind the runtime started (``ClassicSpark`` or ``ConnectSpark``): the functions
and Window of PySpark to build frames with, the parallelism that sizes a merge's tasks, how a step's progress
is watched, and whether and how delta-spark's classes load.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

from dagster_databus.config import SparkConfig
from dagster_databus.core.progress import Progress
from dagster_databus.spark.errors import condition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql import SparkSession as ClassicSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from dagster_databus.spark.classic import ClassicSpark
    from dagster_databus.spark.connect import ConnectSpark

# A classic session or a Connect client: the two share no base class, only most of their methods.
Session: TypeAlias = "ClassicSession | ConnectSession"


class SparkRuntime:
    """The Spark an engine runs its jobs on, started on first use (from any thread: one start)."""

    def __init__(self, config: SparkConfig | None = None) -> None:
        self.config = config or SparkConfig()
        self._opener: Callable[[], Session] = lambda: open_session(self.config)
        self._lock = threading.Lock()
        self._kind: ClassicSpark | ConnectSpark | None = None

    @classmethod
    def deferred(cls, opener: Callable[[], Session]) -> SparkRuntime:
        """A runtime whose session ``opener`` opens (or finds) when a job first needs it: a session some other
        code owns (a test suite's shared one, a notebook's); its ``config`` is then not what opens it."""
        runtime = cls()
        runtime._opener = opener
        return runtime

    @classmethod
    def of(cls, session: Session) -> SparkRuntime:
        """A runtime over an open session."""
        return cls.deferred(lambda: session)

    @property
    def started(self) -> bool:
        return self._kind is not None

    def start(self) -> SparkRuntime:
        """Start Spark now, not at the first job (a step that knows it will need it); the runtime."""
        self.kind  # noqa: B018
        return self

    def start_in_background(self) -> None:
        """Start Spark (the session, or the Connect client, and learn its parallelism) in a background thread
        while the caller does other work (install, capture); the first job waits for it. A failure is left for
        that job to raise, with its fix."""

        def start() -> None:
            with contextlib.suppress(Exception):
                self.parallelism()

        threading.Thread(target=start, name="databus-spark-start", daemon=True).start()

    @property
    def kind(self) -> ClassicSpark | ConnectSpark:
        """The session's kind, which answers what differs between classic Spark and Spark Connect; starts Spark
        (registering the package's data sources) if it has not started."""
        kind = self._kind
        if kind is None:
            with self._lock:
                if self._kind is None:
                    session = self._opener()
                    register_data_sources(session)
                    self._kind = kind_of(session)
                kind = self._kind
        return kind

    @property
    def session(self) -> Session:
        return self.kind.session

    @property
    def connect(self) -> bool:
        """Whether the session is a Spark Connect client (no SparkContext, no JVM in this process)."""
        return self.kind.connect

    def parallelism(self) -> int:
        """The cores Spark schedules on, which size the merge's tasks."""
        return self.kind.parallelism()

    def functions(self) -> ModuleType:
        """``pyspark.sql.functions`` for the session's kind. PySpark picks classic or Connect functions by an
        environment variable, not by session, and one process may hold one session of each kind."""
        return self.kind.functions()

    def window(self) -> Any:
        """``pyspark.sql.Window`` for the session's kind (see ``functions``)."""
        return self.kind.window()

    def delta_table(self) -> Any:
        """delta-spark's ``DeltaTable`` for the session's kind: like PySpark, delta-spark picks its Connect client
        by an environment variable, not by session."""
        return self.kind.delta_table()

    def delta_spark_available(self) -> bool:
        """Whether delta-spark's classes load in the session (for a Connect session: whether the server's session
        names Delta's SQL extension). Any failure other than "not there" is raised, not read as absence."""
        return self.kind.delta_spark_available()

    @contextmanager
    def job_progress(self, progress: Progress, what: str, every_s: float | None = None) -> Iterator[None]:
        """Report the tasks done of the Spark jobs run inside the block, every ``every_s`` seconds (by default
        every ``core.progress.EVERY_S``)."""
        from dagster_databus.core import progress as progress_module

        with self.kind.job_progress(progress, what, progress_module.EVERY_S if every_s is None else every_s):
            yield

    def frame(self, data_source: str, /, **options: str) -> DataFrame:
        """A frame of one of the package's data sources (``databus_table_files``, ``databus_delta_files``...), read with
        ``options``."""
        reader = self.session.read.format(data_source)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    def stop(self) -> None:
        """Stop the session, if it was started."""
        if self._kind is not None:
            self._kind.session.stop()


def open_session(config: SparkConfig) -> Session:
    """A session as ``config`` describes it (a runtime registers the package's data sources with it): with
    ``remote``, a new Spark Connect client (which can live beside a classic session in one process); else the
    process's classic session, started if needed."""
    if config.remote:
        from dagster_databus.spark.connect import open_connect

        session: Session = open_connect(config)
    else:
        from dagster_databus.spark.classic import open_classic

        session = open_classic(config)
    return session


def kind_of(session: Session) -> ClassicSpark | ConnectSpark:
    """What answers for ``session``: a Spark Connect client's module is PySpark's ``sql.connect``."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        from dagster_databus.spark.connect import ConnectSpark

        assert isinstance(session, ConnectSession)
        return ConnectSpark(session)
    from pyspark.sql import SparkSession as ClassicSession

    from dagster_databus.spark.classic import ClassicSpark

    assert isinstance(session, ClassicSession)
    return ClassicSpark(session)


def register_data_sources(session: Session) -> None:
    """Register the package's Python data sources with ``session``, once, before any job runs: Spark's check for
    a name already taken races with a registration of the same name under way (tables sync in threads, and
    runs in other processes share a Connect session), so a source already there is left as it is."""
    from dagster_databus.spark.deltafiles import DeltaFilesSource
    from dagster_databus.spark.tables import TableFilesSource, TableRangesSource, TableRefreshSource

    sources: Sequence[Any] = (TableFilesSource, TableRangesSource, TableRefreshSource,
                              DeltaFilesSource)
    for source in sources:
        try:
            session.dataSource.register(source)
        except Exception as exc:
            if condition(exc) != "DATA_SOURCE_ALREADY_EXISTS":
                raise
