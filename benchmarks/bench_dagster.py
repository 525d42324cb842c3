"""A Dagster run of the demo's sync as a user launches it (``dagster asset materialize --select '*'``)
beside the same work run from the shell as ``databus sync`` and as ``jobs/capture.py`` then
``jobs/merge_snapshots.py``, all on local Spark (the demo's default engine), with the Spark driver's class-data
archive ``databus warm`` writes and, for the Dagster run, without it.

Both start their processes cold, as a schedule's run does: Python, Dagster or not, and Spark. Before each
timed run the demo's workload commits the same number of transactions, so both capture and merge the same
amount. The Dagster run also runs the source's checks (the reconciliation too, as ``'*'`` selects it).

Run alone: ``python -m benchmarks.bench_dagster [rounds] [transactions]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common import MATERIALIZE, demo_config, noop_materialize, runs_text, timed_command
from dagster_databus.config import CONFIG_ENV
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.spark.connect import CACHE_ENV


def main(rounds: int = 3, transactions: int = 200) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-dagster-"))
    try:
        create_shop(work / "shop.db")
        config = demo_config(work)
        (work / "home").mkdir()
        # Runs with the Spark driver's class-data archive ``databus warm`` writes (spark/classdata.py), and one
        # Dagster run per round without it (an empty cache folder).
        env = {**os.environ, CONFIG_ENV: str(config), "DAGSTER_HOME": str(work / "home"),
               CACHE_ENV: str(work / "warm")}
        cold = {**env, CACHE_ENV: str(work / "empty")}
        databus = str(Path(sys.executable).parent / "databus")
        timed_command([databus, "warm"], env)
        workload = ShopWorkload(work / "shop.db", seed=11)
        shell = [[sys.executable, "jobs/capture.py", "--config", str(config), "--source", "shop"],
                 [sys.executable, "jobs/merge_snapshots.py", "--config", str(config), "--source", "shop"]]
        workload.run(transactions)
        timed_command(MATERIALIZE, env)  # install and bootstrap: not timed, both sides then merge
        cli = [databus, "sync", "--source", "shop"]
        noop = noop_materialize(work)
        timed_command(noop, env)  # creates the floor's instance storage: not timed
        runs: dict[str, list[float]] = {"dagster": [], "no_archive": [], "shell": [], "cli": [], "floor": []}
        for _ in range(rounds):  # interleaved: a slow moment of a shared machine does not fall on one side
            for name, command, environment in (("dagster", MATERIALIZE, env), ("no_archive", MATERIALIZE, cold),
                                               ("cli", cli, env)):
                workload.run(transactions, rollback_every=10)
                runs[name].append(timed_command(command, environment))
            workload.run(transactions, rollback_every=10)
            runs["shell"].append(sum(timed_command(cmd, env) for cmd in shell))
            runs["floor"].append(timed_command(noop, env))
        best = {name: min(times) for name, times in runs.items()}

        def row(label: str, name: str, note: str = "") -> None:
            print(f"  {label:<58}{best[name]:6.1f}s   {runs_text(runs[name])}{note}")

        print(f"\nThe demo's sync after its bootstrap ({transactions} transactions each, best of {rounds}, cold "
              "processes, local Spark)")
        row("dagster asset materialize --select '*'", "dagster", "   target <= 10 s")
        row("  the same without the driver's class-data archive", "no_archive")
        row("jobs/capture.py + jobs/merge_snapshots.py", "shell")
        row("databus sync --source shop", "cli")
        row("Dagster's floor (the same command, one asset doing nothing)", "floor")
        print(f"  the Dagster run takes {best['dagster'] / best['shell']:4.2f}x the jobs scripts' time (target <= "
              f"1.5x); the archive takes {best['no_archive'] - best['dagster']:.1f}s off it")
        return best
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
