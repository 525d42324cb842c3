"""One lazily created Spark session per process (local, or a cluster's ``spark.master``), with the
change-log data source registered; reading the log through it; progress of the jobs a step runs."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_databus.config import DatabusConfig, SparkConfig
from dagster_databus.core.progress import Progress
from dagster_databus.core.scn import Scn
from dagster_databus.errors import from_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DELTA_JARS_ENV = "DATABUS_DELTA_JARS"
_lock = threading.Lock()
_session: SparkSession | None = None


def delta_jar_dir(config: SparkConfig) -> Path | None:
    folder = config.delta_jars or (Path(os.environ[DELTA_JARS_ENV]) if os.environ.get(DELTA_JARS_ENV) else None)
    return folder if folder and any(folder.glob("delta-spark*.jar")) else None


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The process's Spark session, created on first use (Spark takes seconds to start)."""
    global _session
    with _lock:
        if _session is None:
            _session = _build(config or SparkConfig())
        return _session


def _build(config: SparkConfig) -> SparkSession:
    # Python workers must run the interpreter that has fastavro and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName("dagster-databus")
        .master(config.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", str(Path.cwd() / "spark-warehouse"))
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
    from dagster_databus.spark.logsource import ChangeLogDataSource

    session.dataSource.register(ChangeLogDataSource)
    return session


def may_commit_with_delta_spark(config: SparkConfig) -> bool:
    """Whether delta-spark could be on the session's classpath; when not, merges need no Spark session."""
    if delta_jar_dir(config) is not None:
        return True
    return any("delta" in value.lower() for key, value in config.conf.items()
               if key.startswith("spark.jars") or key in ("spark.sql.extensions", "spark.driver.extraClassPath"))


def delta_spark_available(spark: SparkSession) -> bool:
    """True when delta-spark's classes load in this session's JVM."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", True, loader)
        return True
    except Exception:
        return False


@contextmanager
def task_errors() -> Iterator[None]:
    """Re-raise a typed error a Spark task raised (``errors.for_task``) as itself, not a PythonException."""
    try:
        yield
    except Exception as exc:
        error = from_task(exc)
        if error is None:
            raise
        raise error from None


def read_changes(spark: SparkSession, config: DatabusConfig, source: str, table: str, since: Scn,
                 until: Scn, route: str | None = None, split_bytes: int = 0) -> DataFrame:
    """The table's changes in (since, until], one input partition per log segment (``spark.logsource``;
    segments over ``split_bytes`` in pieces); with ``route`` (a packed merge plan), reduced per segment
    and tagged with their file groups."""
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
