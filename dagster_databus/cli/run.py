"""``databus capture``, ``databus merge`` and ``databus sync``: the pipeline's steps without Dagster, by the code
Dagster's steps run (``capture.install`` and ``capture.run``, ``sync.merge.sync_source``, then
retention), under the same locks (the change log's writer lock, the source's reader, each snapshot's commit),
printing a progress line per piece of work on stderr and one summary line per step on stdout, with the figures
Dagster's metadata shows (``--json``: all of them, one JSON object a line per step, and nothing else on stdout)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dagster_databus.capture import enforce_retention
from dagster_databus.capture import figures as capture_figures
from dagster_databus.capture import install as install_capture
from dagster_databus.capture import run as run_capture
from dagster_databus.config import DatabusConfig
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.spark.runtime import SparkRuntime
from dagster_databus.sync.figures import sync_figures
from dagster_databus.sync.merge import engine_for, spark_ahead, sync_source
from dagster_databus.sync.verify import RollingVerification, verified_lines, verify_figures


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """The three commands' parsers, on the ``databus`` parser's subparsers."""
    helps = {"capture": "install capture (idempotent) and poll one source into its change log",
             "merge": "merge a source's change log into its snapshots (bootstrapping those that have none)",
             "sync": "capture, merge, then verify a slice of each table: what one scheduled Dagster run of a source "
                     "does"}
    for name, text in helps.items():
        parser = sub.add_parser(name, parents=[common], help=text)
        parser.add_argument("--source", required=True)
        if name != "merge":
            parser.add_argument("--no-install", action="store_true",
                                help="only check that capture is installed; do not install or update it")
        if name != "capture":
            parser.add_argument("--tables", nargs="*", help="tables to merge (default: all of the source's)")
        parser.add_argument("--json", action="store_true", help="print each step's figures as one JSON object")


def capture(config: DatabusConfig, args: argparse.Namespace) -> int:
    _capture(config, args)
    return 0


def merge(config: DatabusConfig, args: argparse.Namespace) -> int:
    _merge(config, args, SparkRuntime(config.spark))
    return 0


def sync(config: DatabusConfig, args: argparse.Namespace) -> int:
    spark = SparkRuntime(config.spark)
    source = config.source(args.source)
    if spark_ahead(config, source.name, source.chosen_tables(args.tables or None)):
        spark.start_in_background()  # meanwhile, install and capture
    # As the scheduled run does: each table's slice read before capture, compared once the merge is done.
    verification = RollingVerification(config, source, source.chosen_tables(args.tables or None),
                                       engine_for(spark, config), _say)
    if not args.no_install:
        _install(config, source.name)
    verification.read()
    try:
        _capture(config, args, install=False)
        _merge(config, args, spark)
    except BaseException:
        verification.close()  # a failed run compares nothing; the next reads the same slices again
        raise
    for outcome in verification.settle():
        figures = verify_figures(outcome)
        _result(json.dumps({"step": "verify", "source": source.name, **figures}, sort_keys=True) if args.json
                else next(verified_lines([outcome])))
    return 0


def _install(config: DatabusConfig, source: str) -> None:
    report = install_capture(config, source)
    if report.changed:
        _say(f"{source}: capture installed or updated for {', '.join(report.changed)}")


def _capture(config: DatabusConfig, args: argparse.Namespace, install: bool = True) -> None:
    source = config.source(args.source).name  # an unknown source is named before anything is done
    if install and not args.no_install:
        _install(config, source)
    result = run_capture(config, source, progress=_say)
    figures = capture_figures(result, ChangeLog(config.lake, source).manifest())
    if args.json:
        _result(json.dumps({"step": "capture", "source": source, **figures}, sort_keys=True))
        return
    lag = f", {figures['lag_seconds']} s" if "lag_seconds" in figures else ""
    _result(f"{source}: captured SCN {figures['scn_range']}: {result.windows:,} windows, {result.events:,} events "
            f"(+{figures['inserts']:,} ~{figures['updates']:,} -{figures['deletes']:,}) in "
            f"{result.segments} segments; {result.lag_scn:,} SCNs behind the source{lag}; {result.duration_s:.2f} s")


def _merge(config: DatabusConfig, args: argparse.Namespace, spark: SparkRuntime) -> None:
    source = config.source(args.source).name
    results = sync_source(spark, config, source, args.tables or None, progress=_say)
    retention = enforce_retention(config, source)
    for r in results:
        figures = sync_figures(r)
        if args.json:
            _result(json.dumps({"step": "merge", "source": source, "table": r.table, **figures}, sort_keys=True))
            continue
        boot = f", bootstrapped {r.bootstrap_rows:,} rows at SCN {r.bootstrapped_at}" if r.bootstrapped_at else ""
        _result(f"{source}.{r.table}: SCN {figures['scn_range']}: {r.events:,} events (+{r.counts.inserted:,} "
                f"~{r.counts.updated:,} -{r.counts.deleted:,}){boot}; {r.snapshot_rows:,} rows; {r.lag_scn:,} SCNs "
                f"behind the log; {r.engine} engine, {r.duration_s:.2f} s")
    if retention is not None and retention.removed_segments:
        # With --json a line of text would break stdout's JSON: it goes with the progress.
        (_say if args.json else _result)(
            f"{source}: retention removed {retention.removed_segments} segments ({retention.removed_bytes:,} bytes); "
            f"the log now starts after SCN {retention.start_scn}")


def _say(line: str) -> None:
    """A progress line: stderr, so stdout holds only the steps' results (``--json``: only JSON objects)."""
    print(line, file=sys.stderr, flush=True)


def _result(line: str) -> None:
    """A step's summary, or its figures as one JSON object: stdout."""
    print(line, flush=True)
