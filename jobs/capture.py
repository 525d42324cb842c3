"""Capture job: install (idempotent) and poll one source into its change log, without Dagster.

    python jobs/capture.py --config config/demo.yaml --source shop
"""

from __future__ import annotations

import argparse
import sys

from dagster_databus import pipeline
from dagster_databus.config import load_config
from dagster_databus.errors import DatabusError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--no-install", action="store_true", help="only verify; do not install or update")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        if not args.no_install:
            pipeline.install(config, args.source)
        r = pipeline.capture(config, args.source, progress=lambda m: print(m, flush=True))
    except DatabusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{r.source}: SCN {r.since}..{r.until}, {r.windows} windows, {r.events} events, lag {r.lag_scn} SCNs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
