"""Capture job: install (idempotent) and poll one source into its change log, without Dagster.

    python jobs/capture.py --config config/demo.yaml --source shop [--no-install] [--json]

The same as ``databus capture`` (``dagster_databus.cli.run``), for a checkout or ``spark-submit``.
"""

from __future__ import annotations

import sys

from dagster_databus.cli import main

if __name__ == "__main__":
    sys.exit(main(["capture", *sys.argv[1:]]))
