"""The Spark driver JVM's class-data archive (Java's AppCDS): the classes a driver loads to start Spark and run the
package's jobs, mapped from one file instead of read from the jars and verified on every start.

A run on local Spark starts a JVM; its session took 3.3 s and its first job 2.3 s here, with the archive 2.2 s and
1.6 s (docs/performance.md, "Dagster runs"). ``databus warm`` writes it (``write_archive``): a child process runs
Spark jobs as a run would (warm's own pipeline, on the spark engine) in a JVM started with
``-XX:ArchiveClassesAtExit``, which dumps what it loaded when it exits; a second JVM started with the new file
must run a job before the file takes the archive's name, and the size it had then is recorded beside it. A
classic session names the archive to its driver (``driver_java_options``) only when that record matches the
file: the JVM crashes on a truncated archive rather than ignoring it. One archive per PySpark version and Java
binary (the JVM refuses, and runs without, an archive of another JDK).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

ARCHIVE_OPTION = "-XX:SharedArchiveFile="
DUMP_OPTION = "-XX:ArchiveClassesAtExit="


class ClassDataError(RuntimeError):
    """The archive could not be written (no Java, a child run that failed or hung); runs start without one."""


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this PySpark's driver archive for this Java lives (in ``DATABUS_CACHE_DIR``); None without Java."""
    import pyspark

    from dagster_databus.spark.connect import cache_dir

    java = java_binary()
    if java is None:
        return None
    stamp = java.stat()
    key = hashlib.sha256(f"{java}|{stamp.st_size}|{stamp.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_dir() / f"spark-driver-{pyspark.__version__}-{key}.jsa"


def _record(archive: Path) -> Path:
    return archive.with_name(archive.name + ".size")


def usable_archive() -> Path | None:
    """The archive, if a JVM ran with it as it is now (its recorded size matches); else None."""
    archive = archive_path()
    if archive is None:
        return None
    try:
        return archive if int(_record(archive).read_text()) == archive.stat().st_size else None
    except (OSError, ValueError):
        return None


def driver_java_options(given: str | None) -> str | None:
    """``spark.driver.extraJavaOptions`` for a new classic session: ``given`` (the config's), with the archive
    when there is a usable one and ``given`` names no archive."""
    archive = usable_archive()
    if archive is None or (given and "Archive" in given):  # its own archive, or writing one (``write_archive``)
        return given
    return " ".join(part for part in ((given or "").strip(), f"{ARCHIVE_OPTION}{archive}") if part)


def write_archive(child: Callable[[str, str], list[str]], timeout_s: float = 600) -> Path:
    """Write the driver archive, check that a JVM runs with it, then give it its name and record its size; the
    archive's path. ``child(what, java_option)`` is the command of a process that starts a classic session with
    ``java_option`` for its driver: ``dump`` runs Spark jobs as a run's driver would, ``check`` runs one."""
    archive = archive_path()
    if archive is None:
        raise ClassDataError("no java found (JAVA_HOME or PATH): Spark cannot start here, so there is nothing to "
                             "archive")
    staged = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        _run(child("dump", f"{DUMP_OPTION}{staged}"), "dump", timeout_s)
        if not staged.exists():
            raise ClassDataError(f"the JVM wrote no class-data archive at {staged}")
        _run(child("check", f"{ARCHIVE_OPTION}{staged}"), "check", timeout_s)
        _record(archive).unlink(missing_ok=True)  # no run takes the old record for the new file meanwhile
        os.replace(staged, archive)
        _record(archive).write_text(str(archive.stat().st_size))
    except OSError as exc:
        raise ClassDataError(f"{archive.parent} cannot hold it ({exc.strerror or exc}); set DATABUS_CACHE_DIR to a "
                             "folder this user can write") from None
    finally:
        with contextlib.suppress(OSError):
            staged.unlink(missing_ok=True)
    return archive


def _run(command: list[str], what: str, timeout_s: float) -> None:
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ClassDataError(f"the driver archive's {what} run did not end in {timeout_s:.0f}s") from None
    if run.returncode != 0:
        said = [line.strip() for line in run.stderr.splitlines() if line.strip()]
        raise ClassDataError(f"the driver archive's {what} run failed (exit {run.returncode}): "
                             f"{said[-1] if said else 'it said nothing'}")
