"""The demo's sync run as a thin client of a running Spark Connect server (``spark.remote``, the Spark merge
included) beside the same run with the in-process ``local`` engine, which starts no Spark at all.

Each side has its own copy of the demo (database, lake, Dagster instance); before each timed run its
workload commits the same transactions (same seed), so both capture and merge the same changes. Runs are
launched as a user launches them, ``dagster asset materialize --select '*'`` (a cold Python process each; the
Connect server stays up between runs, as a deployment's does), and, over Connect, as ``databus sync`` too (the
same steps without Dagster, or its checks), and with every merge a Spark job (``merge.in_driver_mib: 0``). A
last run comes after two minutes idle, longer than the server keeps idle Python workers, as a schedule's next
run does; Dagster's floor is timed after a gap as long.

Run alone: ``python -m benchmarks.bench_connect [rounds] [transactions]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import MATERIALIZE, demo_config, noop_materialize, runs_text, timed_command
from dagster_databus.config import CONFIG_ENV
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.spark.connect_server import ConnectServer, remote_config


class Demo:
    """One copy of the demo: its database, its workload, a config and a Dagster instance of its own."""

    def __init__(self, folder: Path, config: dict) -> None:
        folder.mkdir(parents=True)
        create_shop(folder / "shop.db")
        self.workload = ShopWorkload(folder / "shop.db", seed=11)
        (folder / "databus.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (folder / "home").mkdir()
        self.env = {**os.environ, CONFIG_ENV: str(folder / "databus.yaml"), "DAGSTER_HOME": str(folder / "home")}

    def sync(self, command: list[str] = MATERIALIZE) -> float:
        return timed_command(command, self.env)


SYNC_CLI = [str(Path(sys.executable).parent / "databus"), "sync", "--source", "shop"]


def main(rounds: int = 3, transactions: int = 200, idle_s: float = 130) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-connect-"))
    server = ConnectServer(master="local[2]")
    try:
        base = demo_config(work)
        server.start()
        remote = remote_config(base, server.url)
        local = yaml.safe_load(base.read_text())
        local["merge"] = {"engine": "local"}
        # Every merge a Spark job, as before merge.in_driver_mib: what the server's side costs such a run.
        jobs = {**remote, "merge": {**remote.get("merge", {}), "in_driver_mib": 0}}
        demos = {}
        for name, config in (("connect", remote), ("connect_jobs", jobs), ("local", local)):
            # Paths relative to each copy's own folder.
            config = {**config, "lake": "lake",
                      "sources": [{**s, "path": "shop.db"} for s in config["sources"]]}
            demos[name] = Demo(work / name, config)
        for demo in demos.values():
            demo.workload.run(transactions)
            demo.sync()  # install and bootstrap, and the server's first queries: not timed
        noop = noop_materialize(work)
        demos["local"].sync(noop)  # the floor's first run creates its instance's storage: not timed
        runs: dict[str, list[float]] = {name: [] for name in (*demos, "cli", "floor")}
        for _ in range(rounds):  # interleaved: a slow moment of a shared machine does not fall on one side
            for name, demo in demos.items():
                demo.workload.run(transactions, rollback_every=10)
                runs[name].append(demo.sync())
            demos["connect"].workload.run(transactions, rollback_every=10)
            runs["cli"].append(demos["connect"].sync(SYNC_CLI))
            runs["floor"].append(demos["local"].sync(noop))
        # A schedule's gap: the server's Python workers exit after a minute without tasks, and this machine
        # pages out memory left idle (DAMON's proactive reclaim), the floor's as much as ours: each is timed
        # after a gap of its own.
        time.sleep(idle_s)
        demos["connect"].workload.run(transactions, rollback_every=10)
        after_idle = demos["connect"].sync()
        time.sleep(idle_s)
        floor_after_idle = demos["local"].sync(noop)
        ours, peer, cli, floor = min(runs["connect"]), min(runs["local"]), min(runs["cli"]), min(runs["floor"])
        print(f"\nThe demo's sync run after its bootstrap ({transactions} transactions each, best of {rounds}, "
              "dagster asset materialize --select '*')")
        print(f"  spark.remote (Spark merge on a running server)    {ours:6.1f}s   "
              f"{runs_text(runs['connect'])}")
        print(f"  spark.remote, every merge a Spark job (merge.in_driver_mib: 0) {min(runs['connect_jobs']):6.1f}s   "
              f"{runs_text(runs['connect_jobs'])}")
        print(f"  spark.remote, databus sync (no Dagster, no checks) {cli:6.1f}s   "
              f"{runs_text(runs['cli'])}")
        print(f"  merge.engine local (no Spark)                     {peer:6.1f}s   "
              f"{runs_text(runs['local'])}")
        print(f"  Dagster's floor: the same command on one asset that does nothing {floor:6.1f}s   "
              f"{runs_text(runs['floor'])}")
        print(f"  over Spark Connect the run takes {ours / peer:4.2f}x the local engine's time (target <= 1.5x); "
              f"{ours - floor:.1f}s above Dagster's floor (target <= 1 s), databus sync {cli:.1f}s in all")
        print(f"  spark.remote, {idle_s:.0f} s after the last run {after_idle:6.1f}s; Dagster's floor {idle_s:.0f} s "
              f"after its last run {floor_after_idle:6.1f}s: {after_idle - floor_after_idle:.1f}s above it "
              "(target <= 1.5 s)")
        return {"connect": ours, "connect_jobs": min(runs["connect_jobs"]), "local": peer, "connect_cli": cli,
                "connect_after_idle": after_idle, "dagster_floor": floor, "dagster_floor_after_idle": floor_after_idle}
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
