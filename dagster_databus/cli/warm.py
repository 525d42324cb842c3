"""``databus warm``: compile the package's numba kernels now and cache them on disk, so that no run pays their
compile later: a Dockerfile's build step, a deploy hook, a CI runner's setup.

A change set of fewer than 2,000 records needs no kernel (fastavro, zlib and hashlib encode, decode, sum and hash
it; 10,000 in a process where no kernel has run yet, ``core.kernels.few``), so a new machine's small scheduled runs
cost what warm ones do without this; a larger one compiles the kernels its path
uses, seconds each, once per cache. ``warm`` runs a small pipeline of its own, in a temporary folder, large enough
to take every kernel path: a sample source of several column types, of the kind that needs no server
(``registry.embedded_kind``), captured (its row scan, the Avro encoder, CRC-32), merged by the local engine (the Avro
decoder), read back, and reconciled (the fingerprint). Then each kind's own step (``SourceKind.warm``) compiles
what its capture runs that the pipeline does not reach, with no server (the binlog's row kernels, called as
capture calls them with no rows).

numba caches next to the package's files when they are writable, else in the user's cache folder; set
``NUMBA_CACHE_DIR`` to put it where the runs will find it (an image's own folder, not the build user's home).

Where Java is installed it then writes the Spark driver's class-data archive (``spark.classdata``), running the
same pipeline on the spark engine in a child process whose JVM dumps the classes it loaded (``_child``), so that
a local Spark run's driver starts seconds sooner; ``--no-spark`` skips it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from dagster_databus import capture
from dagster_databus.config import SparkConfig, parse_config
from dagster_databus.core.kernels import prefer_kernels
from dagster_databus.core.progress import Progress
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.registry import KINDS, embedded_kind
from dagster_databus.spark.classdata import java_binary, write_archive
from dagster_databus.spark.classic import DRIVER_JAVA_OPTIONS, open_classic
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table

ROWS = 5_000  # past every small-batch threshold (2,000 records, 4,096 keys)


def warm(progress: Progress, spark: bool = True) -> float:
    """Run the kernels' paths once (compiling and caching what the cache lacks) and, with ``spark`` and Java
    here, write the Spark driver's class-data archive (``spark.classdata``); the seconds it took."""
    started = time.monotonic()
    prefer_kernels()  # past each path's own crossover: a cold process would take the fallbacks for this few rows
    run_pipeline(progress)
    for kind in KINDS.values():
        begun = time.monotonic()
        warmed = kind.warm_kernels()
        if warmed is not None:
            progress(f"warm: {kind.label} {warmed} in {time.monotonic() - begun:.1f}s")
    if spark:
        if java_binary() is None:
            progress("warm: no java here (JAVA_HOME or PATH), so no Spark driver archive; the local engine needs none")
        else:
            begun = time.monotonic()
            archive = write_archive(lambda what, option: [sys.executable, "-m", "dagster_databus.cli.warm", what,
                                                          option])
            progress(f"warm: Spark driver class-data archive {archive} ({archive.stat().st_size / 2**20:,.0f} MiB) "
                     f"in {time.monotonic() - begun:.1f}s")
    return time.monotonic() - started


def run_pipeline(progress: Progress, engine: str = "local", spark: SparkConfig | None = None) -> None:
    """A sample source's pipeline in a temporary folder, merged by ``engine``: its rows captured, bootstrapped,
    every row changed, captured and merged, read back and reconciled."""
    with tempfile.TemporaryDirectory(prefix="databus-warm-") as folder:
        root = Path(folder)
        sample = embedded_kind().make_sample(root, ROWS)
        name = sample.config["name"]
        config = parse_config({"lake": "lake", "merge": {"engine": engine},
                               "spark": (spark or SparkConfig()).model_dump(mode="json", exclude_none=True),
                               "sources": [sample.config]}, base=root)
        [table] = [t.name for t in config.source(name).tables]
        capture.install(config, name)
        sample.fill()
        # Capture, then a merge that bootstraps (the source read); changes to every row, captured and merged
        # from the log (the decoder).
        runtime = SparkRuntime(config.spark)
        for step in ("capture", "bootstrap", "update", "capture", "merge"):
            begun = time.monotonic()
            if step == "capture":
                capture.run(config, name)
            elif step == "update":
                sample.change()
                continue
            else:
                sync_source(runtime, config, name)
            progress(f"warm: {step} of {ROWS:,} rows in {time.monotonic() - begun:.1f}s")
        begun = time.monotonic()
        events = sum(1 for _ in ChangeLog(config.lake, name).read())
        result = reconcile_table(config, config.source(name), table)
        if events != 2 * ROWS or not result.equal:  # the kernels' own output checked, not only compiled
            raise RuntimeError(f"databus warm: read back {events} of {2 * ROWS} events; reconciled: {result.equal}")
        progress(f"warm: read back and reconciled in {time.monotonic() - begun:.1f}s")


def _child(what: str, java_option: str) -> int:
    """A ``write_archive`` child: a classic session whose driver JVM runs with ``java_option``; ``dump`` runs the
    pipeline on the spark engine (the classes a run's driver loads), ``check`` one job."""
    spark = SparkConfig(conf={DRIVER_JAVA_OPTIONS: java_option})
    if what == "dump":
        run_pipeline(lambda _: None, engine="spark", spark=spark)
    elif open_classic(spark).range(0, 10, 1, 2).selectExpr("id % 3 AS k").groupBy("k").count().count() != 3:
        return 1
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()  # the JVM exits, and a dump writes the archive
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
