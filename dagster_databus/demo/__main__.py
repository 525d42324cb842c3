"""``make demo``: build the shop database, run the pipeline three times through Dagster, compare.

Each run bootstraps or merges the snapshots through Spark (the default engine); the demo prints what
the Spark jobs did (tasks, files read and rewritten) from the runs' logs.

Exits non-zero when any snapshot differs from its source table.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dagster_databus.config import CONFIG_ENV, config_path_from_env, load_config
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.demo.workload import ShopWorkload, create_shop
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sync.reconcile import Comparison, compare_rows

# The checkout, a dg project (pyproject.toml's [tool.dg]): `dg launch` runs its definitions from here.
PROJECT = Path(__file__).resolve().parents[2]


def materialize_all(config_path: Path, dagster_home: Path) -> None:
    """Run every asset through Dagster, headless, as a user would from the command line (``dg launch``)."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    instance = dagster_home / "dagster.yaml"
    if not instance.exists():  # an asset selection's run prints at the instance's level (defs.logs)
        instance.write_text("python_logs:\n  python_log_level: INFO\n")
    env = {**os.environ, CONFIG_ENV: str(config_path), "DAGSTER_HOME": str(dagster_home)}
    cmd = [str(Path(sys.executable).parent / "dg"), "launch", "--assets", "*"]
    shown = shlex.join([f"DATABUS_CONFIG={config_path}", f"DAGSTER_HOME={dagster_home}", "dg", *cmd[1:]])
    print(f"$ cd {shlex.quote(str(PROJECT))} && {shown}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=PROJECT, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-8000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"dagster run failed (exit {proc.returncode})")
    print(f"  run succeeded in {time.monotonic() - started:.1f}s", flush=True)
    for line in spark_work(proc.stderr):
        print(f"  {line}", flush=True)


def spark_work(log: str) -> list[str]:
    """What the run's snapshot steps report of their Spark jobs: tasks per bootstrap, files per merge."""
    said = re.compile(r" - INFO - .* - \w+_sync_step - (.*)$")
    return [m.group(1) for m in map(said.search, log.splitlines())
            if m and re.search(r"Spark task|in Spark|^\w+: merged |^\w+: bootstrapped ", m.group(1))]


def compare(config_path: Path) -> list[tuple[Comparison, str]]:
    config = load_config(config_path)
    out = []
    for source_cfg in config.sources:
        source = open_source(source_cfg)
        for table in source_cfg.tables:
            snap = DeltaSnapshot(config.lake, source_cfg.name, table.name)
            key = source.catalog.schemas()[table.name].primary_key
            result = compare_rows(table.name, key, read_rows(source, table.name), snap.read().to_pylist())
            out.append((result, str(snap.applied_scn())))
    return out


def show_history_and_feed(config_path: Path) -> None:
    """What the history tables and the change feed hold after the runs, as a user would read them."""
    import pyarrow as pa

    from dagster_databus.consumer.history import as_of
    from dagster_databus.dataplane.history import HistoryTable

    config = load_config(config_path)
    for source_cfg in config.sources:
        for table in source_cfg.tables:
            snap = DeltaSnapshot(config.lake, source_cfg.name, table.name)
            if table.history:
                hist = HistoryTable(config.lake, source_cfg.name, table.name)
                start, applied = hist.start_scn(), hist.applied_scn()
                versions = hist.row_count()
                assert start is not None and applied is not None
                then = as_of(config.lake, source_cfg.name, table.name, scn=start).num_rows
                print(f"history {table.name}: {versions:,} versions over SCN {start}..{applied}; "
                      f"{then:,} rows as of SCN {start}, {snap.row_count():,} now")
            if source_cfg.change_data_feed:
                delta = snap.delta()
                feed = pa.table(delta.load_cdf(starting_version=delta.version()).read_all())
                kinds = feed["_change_type"].value_counts().to_pylist()
                print(f"change feed {table.name}, version {delta.version()}: "
                      + ", ".join(f"{k['counts']} {k['values']}" for k in sorted(kinds, key=lambda k: k["values"])))


def main() -> int:
    config_path = config_path_from_env()
    config = load_config(config_path)
    sources = [s for s in config.sources if s.kind == "sqlite"]
    # Beside the lake, or, for a lake in a bucket, beside the demo's database.
    demo_root = config.lake.path.parent if config.lake.path is not None else sources[0].path.parent
    print(f"config: {config_path}\nlake:   {config.lake.described()}")
    for source in sources:
        if source.path.exists():
            source.path.unlink()
        for suffix in ("-wal", "-shm"):
            Path(f"{source.path}{suffix}").unlink(missing_ok=True)
        create_shop(source.path)
    if config.lake.path is not None:
        shutil.rmtree(config.lake.path, ignore_errors=True)
    else:  # a demo lake in a bucket starts empty too
        for info in config.lake.objects.list(""):
            config.lake.objects.delete(info.key)
    workloads = [ShopWorkload(s.path, seed=7) for s in sources]

    print("\n1. initial data and workload (before capture is installed: covered by bootstrap)")
    for w in workloads:
        w.run(150)
    materialize_all(config_path, demo_root / "dagster_home")

    print("\n2. more workload: 400 multi-row transactions, some rolled back")
    for w in workloads:
        w.run(400, rollback_every=25)
    materialize_all(config_path, demo_root / "dagster_home")

    print("\n3. a last round, merged from the change log")
    for w in workloads:
        w.run(200, rollback_every=10)
    materialize_all(config_path, demo_root / "dagster_home")

    results = compare(config_path)
    print(f"\n{'table':<14}{'source rows':>12}{'snapshot rows':>15}{'snapshot SCN':>14}  result")
    for r, scn in results:
        verdict = "equal" if r.equal else f"DIFFERENT (missing {r.missing}, extra {r.extra}, differ {r.different})"
        print(f"{r.table:<14}{r.source_rows:>12}{r.snapshot_rows:>15}{scn:>14}  {verdict}")
        for example in r.examples:
            print(f"    {example}")
    if all(r.equal for r, _ in results):
        print("\nsource == snapshot for every table")
        show_history_and_feed(config_path)
        return 0
    print("\nsnapshots differ from the source", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
