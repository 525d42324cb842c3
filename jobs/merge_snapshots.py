"""Spark job: merge a source's change log into its Delta snapshots.

Run it with plain Python or spark-submit; Dagster calls the same code in-process::

    python jobs/merge_snapshots.py --config config/demo.yaml --source shop [--tables orders customers] [--json]
    spark-submit jobs/merge_snapshots.py --config ... --source shop

The same as ``databus merge`` (``dagster_databus.cli.run``).
"""

from __future__ import annotations

import sys

from dagster_databus.cli import main

if __name__ == "__main__":
    sys.exit(main(["merge", *sys.argv[1:]]))
