"""``validate``: every check install and capture make before they write, for every source, all reported at once,
and the damage checks of a source's part of the lake (``lake_damage``, which ``databus status`` shows too)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dagster_databus.config import DatabusConfig
from dagster_databus.errors import DatabusError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source
from dagster_databus.sources.base import Drifting
from dagster_databus.storage.lake import lake_problem


@dataclass
class Validation:
    """What ``databus validate`` found: per source (and ``lake``) its problems, each with its fix."""

    problems: dict[str, list[str]]
    notes: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())


def validate(config: DatabusConfig) -> Validation:
    """Every check install and capture make before they write, for every source, all reported at once;
    writes nothing. (The config itself, cron schedules included, was checked when it loaded.)"""
    problems: dict[str, list[str]] = {"lake": []}
    notes: dict[str, list[str]] = {}
    lake = lake_problem(config.lake)
    if lake is not None:
        problems["lake"].append(f"{lake}. Fix: point lake: at a folder this user can create and write, or give "
                                "credentials that may write the bucket (storage_options)")
    shared = _shared_databases(config)
    for source in config.sources:
        found = problems[source.name] = []
        if source.name in shared:
            found.append(shared[source.name])
        if lake is None:  # a lake that cannot be read holds nothing to check
            found += lake_damage(config, source.name, [t.name for t in source.tables])
        try:
            src = open_source(source, config.lake)
            tables = src.catalog.preflight()  # tables exist, keys are the primary keys, every column type is mapped
            notes[source.name] = [f"{source.kind}, tables: {', '.join(tables)}"]
            if not src.setup.installed():
                notes[source.name].append(f"capture is not installed yet: run `databus install --source {source.name}`")
                continue
            # Capture objects, missing or out of date, are fixed by install; a server's settings and privileges
            # are each stated with their own fix (``Source.install_repairs``).
            install = f". Fix: run `databus install --source {source.name}`" if src.install_repairs else ""
            found += [f"{problem}{install}" for problem in src.setup.verify()]
            checkpoint = ChangeLog(config.lake, source.name).checkpoint() if lake is None else None
            if checkpoint is not None and isinstance(src, Drifting):
                found += src.drift(checkpoint.scn, checkpoint.state)  # objects replaced since capture last read
            found += src.catalog.null_keys()  # tables whose key holds NULL, which capture refuses
            notes[source.name] += src.setup.notes()  # what the source says of itself (version, settings, text scanned)
        except DatabusError as exc:
            found.append(f"{exc.problem}. Fix: {exc.fix}")
    return Validation(problems, notes)


def _shared_databases(config: DatabusConfig) -> dict[str, str]:
    """A problem for each source whose database another source of the config captures too, where the two would
    share its capture objects (``SourceBase.exclusive_database``: an embedded database's file, by any path): one
    source's pruning would cut the other's changes."""
    owners: dict[str, str] = {}
    found = {}
    for source in config.sources:
        database = source.exclusive_database()
        if database is None:
            continue
        owner = owners.setdefault(database, source.name)
        if owner != source.name:
            found[source.name] = (f"database {database} is also captured by source {owner!r}: each database has one "
                                  f"source, whose txlog pruning would otherwise cut this one's changes. Fix: list this "
                                  f"source's tables under source {owner!r}, and remove this source")
    return found


def lake_damage(config: DatabusConfig, source: str, tables: Sequence[str]) -> list[str]:
    """What is damaged in a source's part of the lake, each with its fix: change-log segments missing or
    truncated, and data files a snapshot or history table names that are missing or not their recorded size."""
    from dagster_databus.dataplane.delta import DeltaSnapshot
    from dagster_databus.dataplane.history import HistoryTable

    found = []
    log = ChangeLog(config.lake, source)
    try:
        log_damage = log.damage() if log.checkpoint() is not None else []
    except DatabusError as exc:
        log_damage = [exc.problem]
    if log_damage:
        found.append(f"the change log of source {source!r} is damaged: {'; '.join(log_damage)}. Fix: restore the "
                     f"segments from a backup, or run `databus bootstrap --source {source}` to start the log and "
                     "snapshots afresh")
    for table in tables:
        for folder, fix in ((DeltaSnapshot(config.lake, source, table),
                             f"run `databus snapshot --source {source} --tables {table}`"),
                            (HistoryTable(config.lake, source, table),
                             f"run `databus bootstrap --source {source}` (a history table is rebuilt with its log)")):
            damaged = folder.damage()
            if damaged:
                found.append(f"{'; '.join(damaged)}. Fix: {fix}")
    return found
