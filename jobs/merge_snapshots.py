"""Spark job: merge a source's change log into its Delta snapshots.

Run it with plain Python or spark-submit; Dagster calls the same code in-process::

    python jobs/merge_snapshots.py --config config/demo.yaml --source shop [--tables orders customers]
    spark-submit jobs/merge_snapshots.py --config ... --source shop
"""

from __future__ import annotations

import argparse
import sys

from dagster_databus.config import load_config
from dagster_databus.errors import DatabusError
from dagster_databus.snapshot.merge import sync_source
from dagster_databus.spark.runtime import SparkRuntime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="databus YAML config")
    parser.add_argument("--source", required=True, help="source name from the config")
    parser.add_argument("--tables", nargs="*", help="tables to merge (default: all of the source's tables)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        results = sync_source(SparkRuntime(config.spark), config, args.source, args.tables,
                              progress=lambda m: print(m, flush=True))
    except DatabusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        print(f"{r.source}.{r.table}: SCN {r.from_scn}..{r.to_scn}, {r.events} events, +{r.counts.inserted} "
              f"~{r.counts.updated} -{r.counts.deleted}, {r.snapshot_rows} rows ({r.engine})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
