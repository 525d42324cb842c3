"""A classic Spark session (``spark.master``: this process is the driver, local or on a cluster), and its answers
to what differs from a Spark Connect one (``ClassicSpark``): PySpark's classic functions and Window, the
SparkContext's parallelism, progress from its status tracker, delta-spark's classes in its JVM."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_databus.config import SparkConfig
from dagster_databus.core.progress import Progress
from dagster_databus.spark.classdata import driver_java_options
from dagster_databus.spark.delta_jars import delta_jar_dir
from dagster_databus.spark.kinds import KindModules
from dagster_databus.spark.settings import SESSION_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def open_classic(config: SparkConfig) -> SparkSession:
    """The process's classic session (there is one per process), started as ``config`` says if none runs."""
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
    )
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    jars = delta_jar_dir(config)
    if jars is not None:
        builder = (
            builder.config("spark.jars", ",".join(str(p) for p in sorted(jars.glob("*.jar"))))
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        )
    for key, value in config.conf.items():
        builder = builder.config(key, value)
    java_options = driver_java_options(config.conf.get(DRIVER_JAVA_OPTIONS))  # the class-data archive, if warm
    if java_options:
        builder = builder.config(DRIVER_JAVA_OPTIONS, java_options)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


class ClassicSpark(KindModules):
    """A classic session's answers to what differs from a Connect one (``spark.connect.ConnectSpark``)."""

    connect = False

    def __init__(self, session: SparkSession) -> None:
        self.session = session

    def parallelism(self) -> int:
        """The cores Spark schedules on (``SparkContext.defaultParallelism``)."""
        return self.session.sparkContext.defaultParallelism

    def delta_spark_available(self) -> bool:
        """Whether delta-spark's classes load in the session's JVM. Only "no such class" means absent: any other
        failure (the JVM gone) is raised, not read as absence."""
        from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

        jvm: Any = self.session.sparkContext._jvm
        loader = jvm.Thread.currentThread().getContextClassLoader()
        try:
            jvm.java.lang.Class.forName("io.delta.tables.DeltaTable", True, loader)
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() == "java.lang.ClassNotFoundException":
                return False
            raise
        return True

    @contextmanager
    def job_progress(self, progress: Progress, what: str, every_s: float) -> Iterator[None]:
        """The block's jobs carry a job group of their own, whose stages' tasks the SparkContext's status tracker
        counts, watched from a thread of its own."""
        context = self.session.sparkContext
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
