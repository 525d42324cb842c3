"""A Dagster run of the demo's sync as a user launches it (``dagster asset materialize --select '*'``)
beside the same work run from the shell as ``jobs/capture.py`` then ``jobs/merge_snapshots.py``.

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

from benchmarks.common import MATERIALIZE, demo_config, timed_command
from dagster_databus.config import CONFIG_ENV
from dagster_databus.demo.workload import ShopWorkload, create_shop


def main(rounds: int = 3, transactions: int = 200) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-dagster-"))
    try:
        create_shop(work / "shop.db")
        config = demo_config(work)
        (work / "home").mkdir()
        env = {**os.environ, CONFIG_ENV: str(config), "DAGSTER_HOME": str(work / "home")}
        workload = ShopWorkload(work / "shop.db", seed=11)
        shell = [[sys.executable, "jobs/capture.py", "--config", str(config), "--source", "shop"],
                 [sys.executable, "jobs/merge_snapshots.py", "--config", str(config), "--source", "shop"]]
        workload.run(transactions)
        timed_command(MATERIALIZE, env)  # install and bootstrap: not timed, both sides then merge
        runs: dict[str, list[float]] = {"dagster": [], "shell": []}
        for _ in range(rounds):  # interleaved: a slow moment of a shared machine does not fall on one side
            workload.run(transactions, rollback_every=10)
            runs["dagster"].append(timed_command(MATERIALIZE, env))
            workload.run(transactions, rollback_every=10)
            runs["shell"].append(sum(timed_command(cmd, env) for cmd in shell))
        ours, peer = min(runs["dagster"]), min(runs["shell"])
        print(f"\nThe demo's sync after its bootstrap ({transactions} transactions each, best of {rounds}, cold "
              "processes)")
        print(f"  dagster asset materialize --select '*'            {ours:6.1f}s   "
              f"(runs: {', '.join(f'{t:.1f}' for t in runs['dagster'])})")
        print(f"  jobs/capture.py + jobs/merge_snapshots.py          {peer:6.1f}s   "
              f"(runs: {', '.join(f'{t:.1f}' for t in runs['shell'])})")
        print(f"  the Dagster run takes {ours / peer:4.2f}x the shell's time (target <= 1.5x)")
        return {"dagster": ours, "shell": peer}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
