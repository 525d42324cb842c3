"""The local engine never starts Spark: in a process where pyspark (and delta-spark) cannot be imported at all, a
source's tables are bootstrapped, merged through inserts, updates and deletes, given history and kept up, by
the same entry points the Spark engines take (a ``SparkRuntime`` built from the config is passed, and never
started), and the snapshots equal the source."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.paths import REPO

RUN = textwrap.dedent("""
    import sys

    class NoSpark:
        # Refuses pyspark and delta-spark (``delta``) whoever imports them, as a machine without them would.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "delta", "py4j"):
                raise ImportError(f"{name} is blocked in this process")
            return None

    sys.meta_path.insert(0, NoSpark())

    from pathlib import Path

    from dagster_databus import capture
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.dataplane.history import HistoryTable
    from dagster_databus.sync.merge import sync_source
    from dagster_databus.sync.reconcile import compare_rows
    from dagster_databus.sync.upkeep import upkeep_source
    from dagster_databus.sources import open_source, read_rows
    from dagster_databus.spark.runtime import SparkRuntime
    from tests.support.harness import SqliteHarness, make_config

    try:
        import pyspark  # noqa: F401
    except ImportError:
        pass
    else:
        raise AssertionError("the blocker let pyspark in")

    SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]
    work = Path(sys.argv[1])
    source = SqliteHarness(work / "shop.db")
    source.create_shop()
    spec = source.source_config("shop", SHOP, poll={"chunk_rows": 40})
    spec["tables"][1]["history"] = True
    config = make_config(work / "lake", spec, merge={"engine": "local"})
    spark = SparkRuntime(config.spark)
    workload = source.workload(seed=7)
    workload.run(30)
    counts = {"bootstrapped": 0, "events": 0, "deleted": 0}
    for round_ in range(3):
        capture.install(config, "shop")
        capture.run(config, "shop")
        results = sync_source(spark, config, "shop")
        assert {r.engine for r in results} == {"local"}, results
        counts["bootstrapped"] += sum(r.bootstrapped_at is not None for r in results)
        counts["events"] += sum(r.events for r in results)
        counts["deleted"] += sum(r.counts.deleted for r in results)
        src = open_source(config.sources[0])
        for table, key in SHOP:
            snap = DeltaSnapshot(config.lake, "shop", table)
            result = compare_rows(table, key, read_rows(src, table), snap.read().to_pylist())
            assert result.equal, f"round {round_}, {table}: {result}"
        workload.run(60, rollback_every=7)
    assert HistoryTable(config.lake, "shop", "orders").row_count() > 0
    assert upkeep_source(config, "shop", spark)
    assert counts["bootstrapped"] == len(SHOP) and counts["events"] > 0 and counts["deleted"] > 0, counts
    assert not spark.started
    assert not [m for m in sys.modules if m.split(".")[0] in ("pyspark", "delta", "py4j")]
    print("ok", counts)
""")


def test_the_local_engine_bootstraps_and_merges_where_pyspark_cannot_be_imported(tmp_path: Path) -> None:
    root = REPO
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith("ok "), proc.stdout
