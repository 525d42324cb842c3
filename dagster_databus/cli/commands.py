"""databus: validate a config, install capture, run the pipeline (capture, merge, sync), print where every
source and table stands, follow the change stream, and compare snapshots with their sources."""

from __future__ import annotations

import argparse
import json
import os
import sys

from dagster_databus import capture
from dagster_databus.cli import EXIT_TRANSIENT, run
from dagster_databus.config import DatabusConfig, load_config
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.core.events import ChangeEvent
from dagster_databus.core.identifiers import is_plain_name
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType, json_value
from dagster_databus.errors import ConfigError, DatabusError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.schemas import SchemaRegistry
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Uninstallable
from dagster_databus.sources.registry import source_kind


def _validate(config: DatabusConfig, _: argparse.Namespace) -> int:
    result = capture.validate(config)  # every source and the lake, so one run names every problem
    for name, notes in result.notes.items():
        for note in notes:
            print(f"{name}: {note}")
    for name, problems in result.problems.items():
        for problem in problems:
            print(f"{name}: {_one_line(problem)}", file=sys.stderr)
    if result.ok:
        print("ok: install and capture would find nothing to refuse")
        return 0
    return 2


def _reconcile(config: DatabusConfig, args: argparse.Namespace) -> int:
    """The ``reconciled`` check from the command line: progress on stderr, one result line per table on
    stdout; exit 0 when every table matches, 1 when one differs or could not be compared."""
    from dagster_databus.sync.reconcile import reconcile_table

    source = config.source(args.source)
    tables = source.chosen_tables(args.tables)
    worst = 0
    for table in tables:
        r = reconcile_table(config, source, table, lambda line: print(line, file=sys.stderr, flush=True))
        if not r.reconciled:
            print(f"{table}: not compared: {_one_line(r.reason)}")
        elif r.equal:
            print(f"{table}: equal at SCN {r.scn}: {r.source_rows:,} rows, hash {r.source_hash:016x} ({r.seconds}s)")
        else:
            print(f"{table}: DIFFERS at SCN {r.scn}: source {r.source_rows:,} rows, snapshot {r.snapshot_rows:,}; "
                  f"{r.differing_buckets} of 4,096 key buckets differ")
            for difference in r.differences:
                print(f"  {difference.describe()}")
        worst = max(worst, 0 if r.equal else 1)
    return worst


def _install(config: DatabusConfig, args: argparse.Namespace) -> int:
    for source in [config.source(args.source)] if args.source else config.sources:
        report = capture.install(config, source.name)
        print(f"{source.name}: epoch {report.epoch}, updated {list(report.changed)}, "
              f"unchanged {list(report.unchanged)}")
    return 0


def _bootstrap(config: DatabusConfig, args: argparse.Namespace) -> int:
    trash = capture.restart(config, args.source)
    checkpoint = ChangeLog(config.lake, args.source).checkpoint()
    moved = f"; previous log and snapshots moved to {trash}" if trash else ""
    print(f"{args.source}: change log restarted at SCN {checkpoint.scn if checkpoint else '?'}; "
          f"the next run bootstraps every snapshot{moved}")
    return 0


def _upkeep(config: DatabusConfig, args: argparse.Namespace) -> int:
    """Compact, vacuum and checkpoint a source's snapshot and history tables, or a logical table
    (``sync.upkeep``)."""
    from dagster_databus.spark.runtime import SparkRuntime
    from dagster_databus.sync.upkeep import upkeep_logical, upkeep_source

    spark = SparkRuntime(config.spark)  # starts only if the engine runs a Spark job

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.logical:
        results = [r for r in [upkeep_logical(config, args.logical, spark, progress)] if r is not None]
        where = "logical"
    else:
        source = config.source(args.source)
        results = upkeep_source(config, source.name, spark, source.chosen_tables(args.tables), progress)
        where = source.name
    for r in results:
        print(f"{where}.{r.table}{' (history)' if r.kind == 'history' else ''}: {r.files_before} -> {r.files_after} "
              f"files, {r.bytes_before - r.bytes_after:,} bytes reclaimed, {r.vacuumed} vacuumed, "
              f"checkpoint at version {r.checkpoint_version}")
    return 0


def _snapshot(config: DatabusConfig, args: argparse.Namespace) -> int:
    """Read tables afresh from the source into their snapshots, keeping the change log: online (key ranges,
    each its own short read, capture may run meanwhile) and resumable (a killed run's finished ranges are kept).
    With a key range or a filter, only those rows of one table are read again and folded in."""
    from dagster_databus.spark.runtime import SparkRuntime
    from dagster_databus.sync.merge import sync_source

    source = config.source(args.source)
    tables = source.chosen_tables(args.tables)
    rows = capture.row_selection(config, source.name, tables, args.after, args.through, args.where)
    spark = SparkRuntime(config.spark)

    if not rows.whole:
        for r in sync_source(spark, config, source.name, tables, progress=lambda m: print(m, flush=True),
                             mode="refresh", rows=rows):
            f = r.refreshed
            print(f"{r.source}.{r.table}: merged to SCN {r.to_scn}" + (
                f"; read {f.rows_read:,} rows again ({rows.describe()}, {f.ranges} key ranges): "
                f"{f.counts.inserted:,} inserted, {f.counts.updated:,} updated, {f.counts.deleted:,} deleted"
                + ("" if f.deletes_checked else "; deletes at the source not looked for (a filter, or a text key)")
                if f is not None else ""))
        return 0
    for r in sync_source(spark, config, source.name, tables,
                         progress=lambda m: print(m, flush=True), mode="bootstrap"):
        print(f"{r.source}.{r.table}: read {r.bootstrap_rows:,} rows at SCN {r.bootstrapped_at}"
              + (f" ({r.key_ranges.ranges} key ranges, {r.key_ranges.resumed} from an earlier run)"
                 if r.key_ranges else "")
              + f", then merged to SCN {r.to_scn}")
    return 0


def _status(config: DatabusConfig, _: argparse.Namespace) -> int:
    from dagster_databus.cli.status import status_lines

    for line in status_lines(config):
        print(line)
    return 0


def _uninstall(config: DatabusConfig, args: argparse.Namespace) -> int:
    """Remove what install created in a source's database (``Uninstallable``); the lake is left as it is."""
    source = config.source(args.source)
    kind = source_kind(source.kind)
    src = open_source(source, config.lake)
    if not isinstance(src, Uninstallable):
        print(f"{source.name}: {kind.label} capture installs nothing in the database; nothing to remove")
        return 0
    removed = src.uninstall()
    print(f"{source.name}: removed {', '.join(removed) if removed else 'nothing (none of it was there)'}")
    print(f"{source.name}: changes made from now on may never reach the change log; to capture it again, run "
          f"`databus install --source {source.name}`, and `databus bootstrap --source {source.name}` where capture "
          "then refuses the log (a new epoch, or changes it can no longer give)", file=sys.stderr)
    return 0


class OutputClosed(BaseException):
    """stdout's reader closed it (``tail | head``). A BaseException, so the client's rollback-and-retry
    does not catch it: the window in progress is not acknowledged and the checkpoint stays where it was."""


class JsonLinesConsumer(DatabusConsumer):
    """Prints each data event as one JSON line, every value in its type's one text form (docs/types.md)."""

    def __init__(self, schemas: SchemaRegistry) -> None:
        self.schemas = schemas
        self._types: dict[str, dict[str, ColumnType]] = {}

    def _column_types(self, table: str) -> dict[str, ColumnType]:
        if table not in self._types:
            latest = self.schemas.latest(table)
            self._types[table] = {c.name: c.type for c in latest[1].columns} if latest else {}
        return self._types[table]

    def on_data_event(self, event: ChangeEvent) -> None:
        types = self._column_types(event.table)
        row = {name: types[name].to_json(v) if name in types else json_value(v) for name, v in event.row.items()}
        try:
            print(json.dumps({"scn": str(event.scn), "seq": event.seq, "table": event.table, "op": event.op.value,
                              "key": [json_value(v) for v in event.key], "commit_ts_ms": event.commit_ts_ms,
                              "row": row}, ensure_ascii=False), flush=True)
        except BrokenPipeError:
            raise OutputClosed from None


def _tail(config: DatabusConfig, args: argparse.Namespace) -> int:
    from dagster_databus.consumer.checkpoints import (
        CheckpointStore,
        ConsumerCheckpoint,
        FileCheckpointStore,
        LakeCheckpointStore,
        MemoryCheckpointStore,
    )

    source = config.source(args.source)
    configured = [t.name for t in source.tables]
    unknown = [t for t in args.tables or [] if t not in configured]
    if unknown:
        raise ConfigError("--tables", f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not one of the "
                          f"tables configured for source {source.name!r} ({', '.join(configured)})",
                          "name tables the source's config lists; a new table must be added there, installed and "
                          "materialized before it can be tailed")
    start = _start_position(args.from_scn)
    if args.checkpoint_every < 1:
        raise ConfigError("--checkpoint-every", f"{args.checkpoint_every} windows cannot pass between saves",
                          "give 1 (save after every window) or more")
    for flag, seconds in (("--checkpoint-seconds", args.checkpoint_seconds), ("--interval", args.interval)):
        if seconds is not None and not seconds >= 0:  # (a NaN is not >= 0 either)
            raise ConfigError(flag, f"{seconds} seconds is not a duration", "give 0 or more seconds")
    if args.checkpoint and args.consumer:
        raise ConfigError("--consumer", "--checkpoint and --consumer both name where the checkpoint is kept",
                          "give one: --consumer NAME keeps it in the lake (any machine), --checkpoint FILE here")
    store: CheckpointStore[ConsumerCheckpoint] = MemoryCheckpointStore()
    if args.consumer:
        if not is_plain_name(args.consumer):
            raise ConfigError("--consumer", f"{args.consumer!r} is not a plain name",
                              "use letters, digits and underscores, starting with a letter")
        store = LakeCheckpointStore.for_consumer(config.lake.objects, args.source, args.consumer)
    elif args.checkpoint:
        store = FileCheckpointStore(args.checkpoint)
    if start is not None and (held := store.load()) is not None:
        print(f"note: --from-scn {start} ignored: the checkpoint holds SCN {held.scn} (it applies only to a new "
              "checkpoint)", file=sys.stderr)
    printer = JsonLinesConsumer(ChangeLog(config.lake, args.source).schemas)
    # The client refuses a start past the log's end and a checkpoint kept for another subscription.
    client = DatabusClient(config.lake, args.source, printer, tables=args.tables, partition_filter=args.filter,
                           checkpoints=store, bootstrap=not args.no_bootstrap, start=start,
                           checkpoint_every_windows=args.checkpoint_every, checkpoint_every_s=args.checkpoint_seconds)
    try:
        if args.follow:
            client.follow(interval_s=args.interval)
        else:
            client.run()
    except OutputClosed:
        # Nothing more can be printed; point stdout at /dev/null so the interpreter's last flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        client.close()
    return 0


def _start_position(text: str | None) -> Scn | None:
    """``--from-scn``'s SCN: a whole number from 0 to 2^63-1; anything else is refused."""
    if text is None:
        return None
    try:
        return Scn.parse(text)
    except ValueError:
        raise ConfigError("--from-scn", f"{text!r} is not an SCN (a whole number from 0 to {Scn.MAX})",
                          "give the SCN to start after, as the change log numbers them (databus status shows where "
                          "it ends), or leave --from-scn out to bootstrap from the snapshots") from None


def main(argv: list[str] | None = None) -> int:
    """Run one ``databus`` command (``dagster_databus.cli.main`` wraps it: Ctrl-C, exit statuses)."""
    config_help = "config file (default: $DATABUS_CONFIG, else the demo config)"
    parser = argparse.ArgumentParser(prog="databus", description=__doc__)
    parser.add_argument("--config", help=config_help)
    # --config is also accepted after the subcommand; there it must not reset one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=config_help)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate", parents=[common], help="check the config and every source database; writes nothing")
    install = sub.add_parser("install", parents=[common], help="install or update capture objects (idempotent)")
    install.add_argument("--source")
    boot = sub.add_parser("bootstrap", parents=[common],
                          help="restart a source's change log and snapshots from its current position")
    boot.add_argument("--source", required=True)
    snapshot = sub.add_parser("snapshot", parents=[common],
                              help="read tables afresh into their snapshots, online and resumable; the log is kept")
    snapshot.add_argument("--source", required=True)
    snapshot.add_argument("--tables", nargs="*", help="tables to read (default: all of the source's)")
    snapshot.add_argument("--after", nargs="+", metavar="KEY",
                          help="read only keys after this one (one value per key column, in key order; one table): "
                               "the rows read are folded into the snapshot, which is kept")
    snapshot.add_argument("--through", nargs="+", metavar="KEY", help="read only keys up to and including this one")
    snapshot.add_argument("--where", metavar="CONDITION",
                          help="read only rows matching this condition, in the source's SQL (one table)")
    upkeep = sub.add_parser("upkeep", parents=[common],
                            help="join small files of snapshot tables, vacuum old files, checkpoint the Delta log")
    target = upkeep.add_mutually_exclusive_group(required=True)
    target.add_argument("--source")
    target.add_argument("--logical", help="a logical table (logical_tables[].name) instead of a source's tables")
    upkeep.add_argument("--tables", nargs="*", help="tables to keep up (default: all of the source's)")
    sub.add_parser("status", parents=[common], help="checkpoint, snapshot SCN and lag per source and table")
    uninstall = sub.add_parser("uninstall", parents=[common],
                               help="remove what install created in a source's database (its triggers and txlog, "
                                    "its replication slot and publication); the lake is kept")
    uninstall.add_argument("--source", required=True)
    reconcile = sub.add_parser("reconcile", parents=[common],
                               help="compare snapshots with the source at one SCN; name the keys that differ")
    reconcile.add_argument("--source", required=True)
    reconcile.add_argument("--tables", nargs="*", help="tables to compare (default: all of the source's)")
    tail = sub.add_parser("tail", parents=[common],
                          help="print a source's change events as JSON lines, keeping a checkpoint")
    tail.add_argument("--source", required=True)
    tail.add_argument("--tables", nargs="*", help="tables, in the order events of one window are grouped")
    tail.add_argument("--filter", help="partition filter, e.g. mod:10:[1,3] or range:1000:[0-4]")
    tail.add_argument("--checkpoint", help="checkpoint file (kept across runs, on this machine)")
    tail.add_argument("--consumer", help="keep the checkpoint in the lake under this consumer name (kept across "
                                         "runs on any machine; a second tail of the same name is refused)")
    tail.add_argument("--from-scn", help="start after this SCN when there is no checkpoint yet (at most the SCN the "
                                         "log has reached, databus status's checkpoint; one before the log's start "
                                         "bootstraps)")
    tail.add_argument("--no-bootstrap", action="store_true", help="never read the snapshots first")
    tail.add_argument("--follow", action="store_true", help="keep printing as the log grows (Ctrl-C stops)")
    tail.add_argument("--interval", type=float, default=1.0, help="seconds between polls with --follow")
    tail.add_argument("--checkpoint-every", type=int, default=1, metavar="N",
                      help="save the checkpoint after every N windows (and at the end); a crash reprints at most N")
    tail.add_argument("--checkpoint-seconds", type=float, default=None, metavar="T",
                      help="also save it when T seconds passed since the last save")
    run.add_commands(sub, common)
    warm = sub.add_parser("warm", parents=[common], help="compile and cache the numba kernels, and write the Spark "
                                                         "driver's class-data archive, now (an image's build step); "
                                                         "needs no config")
    warm.add_argument("--no-spark", action="store_true",
                      help="only the kernels: no Spark driver archive (for the local engine or Spark Connect only)")
    args = parser.parse_args(argv)
    if args.command == "warm":
        return _warm(spark=not args.no_spark)
    commands = {"validate": _validate, "install": _install, "uninstall": _uninstall, "bootstrap": _bootstrap,
                "status": _status,
                "tail": _tail, "reconcile": _reconcile, "snapshot": _snapshot,
                "upkeep": _upkeep, "capture": run.capture, "merge": run.merge, "sync": run.sync}
    try:
        return commands[args.command](load_config(args.config), args)
    except BrokenPipeError:  # the reader stopped reading (`databus status | head`): nothing went wrong here
        _quiet_stdout()
        return 0
    except DatabusError as exc:
        print(f"error: {_one_line(exc.problem)}. Fix: {_one_line(exc.fix)}", file=sys.stderr)
        return EXIT_TRANSIENT if exc.transient else 2
    except OSError as exc:  # the lake or a file named in the config: not readable, not writable, gone
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}. Fix: check that the path exists and that this user may "
              "read and write it", file=sys.stderr)
        return 2


def _warm(spark: bool) -> int:
    import numba

    from dagster_databus.cli.warm import warm
    from dagster_databus.spark.classdata import ClassDataError

    try:
        seconds = warm(lambda line: print(line, flush=True), spark=spark)
    except ClassDataError as exc:  # the kernels are cached by then; the archive is not
        print(f"error: the Spark driver's class-data archive was not written: {_one_line(str(exc))}. Fix: "
              "make `java -version` (Java 17+) and a local Spark session work here, or run databus warm "
              "--no-spark to keep to the kernels", file=sys.stderr)
        return 2
    print(f"warm in {seconds:.1f}s; numba cache: "
          f"{getattr(numba.config, 'CACHE_DIR', '') or 'beside the package files, else the user cache folder'}")
    return 0


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit finds no closed pipe either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _one_line(text: str) -> str:
    return " ".join(text.split()).rstrip(".")
