"""Committing data files that Spark tasks wrote: one Delta transaction through delta-rs, on the driver.

A bootstrap commits every file of every key range with the bootstrap's transaction ids; a merge
commits the files it rewrote (removes + adds) and the new applied SCN, against the table version it
read, so a concurrent writer that changed those files makes the commit fail instead of losing its
work. Files a run wrote but did not commit (a failed run, a retried task's first attempt) are
deleted by the run itself, found by the run's file-name prefix.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from dagster_databus.core.scn import Scn
from dagster_databus.dataplane.delta import DeltaFolder, DeltaSnapshot
from dagster_databus.dataplane.files import DataFile, TableFile, TableLocation
from dagster_databus.errors import ConcurrentRunError

OPERATION_KEY = "databus.operation"
CHANGE_DATA = "_change_data"  # where a table's change files go (Delta's change data feed)


def location(folder: DeltaFolder) -> TableLocation:
    """Where ``folder``'s files are, as tasks rebuild it."""
    return TableLocation(folder.lake.spec(), folder.key)


def add_actions(files: Sequence[DataFile], data_change: bool = True) -> list[AddAction]:
    now = int(time.time() * 1000)
    return [AddAction(f.path, f.size, {}, now, data_change, f.stats) for f in files]


def commit_bootstrap(snap: DeltaSnapshot, schema: pa.Schema, files: Sequence[DataFile], scn: Scn,
                     engine: str) -> None:
    """Replace the snapshot's rows with ``files``, read from the source at ``scn``, in one commit."""
    txns = [Transaction(app_id=snap.app_id, version=scn.value),
            Transaction(app_id=snap.bootstrap_app_id, version=scn.value)]
    props = CommitProperties(app_transactions=txns, custom_metadata={OPERATION_KEY: "bootstrap", "engine": engine})
    commit_files(snap, schema, files, props, f"databus snapshot of {snap.source}.{snap.table}")


def commit_absorbed(snap: DeltaSnapshot, scn: Scn, engine: str) -> None:
    """Record, changing no row, that the snapshot holds the schema changes recorded through ``scn``: the table was
    read after they were recorded, though the read's own SCN (the newest commit of the captured tables before it)
    may be lower than where capture recorded a change it found without row events."""
    table = snap.delta()
    commit_merge(snap, table, pa.schema(table.schema().to_arrow()), [], [],
                 [Transaction(app_id=snap.evolved_app_id, version=scn.value)],
                 {OPERATION_KEY: "absorb schema changes", "engine": engine}, data_change=False)


def commit_files(folder: DeltaFolder, schema: pa.Schema, files: Sequence[DataFile], props: CommitProperties,
                 description: str) -> None:
    """Replace the table's rows (and schema) with ``files`` in one commit; the table is created if absent."""
    table = folder.existing()
    try:
        if table is None:
            folder.prepare()
            create_table_with_add_actions(folder.uri, Schema.from_arrow(schema), add_actions(files), mode="overwrite",
                                          storage_options=folder.storage_options, commit_properties=props,
                                          description=description)
        else:
            actions: list[AddAction | RemoveAction] = list(add_actions(files))
            table.create_write_transaction(actions, mode="overwrite", schema=schema,
                                           commit_properties=props)
    except CommitFailedError as exc:
        raise _concurrent(folder, exc) from exc


def commit_merge(folder: DeltaFolder, table: DeltaTable, schema: pa.Schema, added: Sequence[DataFile],
                 removed: Sequence[TableFile], txns: Sequence[Transaction], metadata: dict[str, Any],
                 data_change: bool = True) -> None:
    """Swap ``removed`` for ``added`` and record ``txns``, against the version ``table`` was read at;
    ``data_change`` False: the same rows in other files (a compaction)."""
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [*add_actions(added, data_change), *(
        RemoveAction(path=f.path, size=f.size, partition_values={}, deletion_timestamp=now, data_change=data_change)
        for f in removed)]
    try:
        table.create_write_transaction(actions, mode="append", schema=schema,
                                       commit_properties=CommitProperties(app_transactions=list(txns),
                                                                          custom_metadata=metadata))
    except CommitFailedError as exc:
        raise _concurrent(folder, exc) from exc


CHANGE_FEED = "delta.enableChangeDataFeed"


def change_feed_on(table: DeltaTable) -> bool:
    """Whether ``table`` (at the version read) records a change data feed."""
    return table.metadata().configuration.get(CHANGE_FEED, "false").lower() == "true"


def set_change_feed(folder: DeltaFolder, wanted: bool) -> None:
    """Turn the table's change data feed on or off (a table property), where it differs; delta-rs raises the
    table's writer protocol to one that knows change data (4) when it turns it on."""
    table = folder.existing()
    if table is not None and change_feed_on(table) != wanted:
        table.alter.set_table_properties({CHANGE_FEED: "true" if wanted else "false"}, raise_if_not_exists=False)


def commit_with_changes(folder: DeltaFolder, table: DeltaTable, added: Sequence[DataFile], removed: Sequence[TableFile],
                        changes: Sequence[DataFile], txns: Sequence[Transaction], metadata: dict[str, Any]) -> None:
    """``commit_merge`` for a table with a change data feed: the commit also names the change files the tasks
    wrote (``cdc`` actions, which readers of the feed read instead of inferring changes from whole rewritten
    files). delta-rs's Python API commits add and remove actions only, so this one is written as the Delta
    protocol spells it and created only if version ``read + 1`` is absent: a concurrent writer's commit makes
    this one fail, as delta-rs's would, and nothing of it is kept."""
    import json

    now = int(time.time() * 1000)
    version = table.version() + 1
    info = {"timestamp": now, "operation": "MERGE", "operationParameters": {}, "readVersion": version - 1,
            "isBlindAppend": False, "engineInfo": "dagster-databus", **metadata}
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    actions += [{"txn": {"appId": t.app_id, "version": t.version, "lastUpdated": now}} for t in txns]
    actions += [{"add": {"path": f.path, "partitionValues": {}, "size": f.size, "modificationTime": now,
                         "dataChange": True, "stats": f.stats}} for f in added]
    actions += [{"remove": {"path": f.path, "dataChange": True, "deletionTimestamp": now, "extendedFileMetadata": True,
                            "partitionValues": {}, "size": f.size}} for f in removed]
    actions += [{"cdc": {"path": f.path, "partitionValues": {}, "size": f.size, "dataChange": False}} for f in changes]
    body = "\n".join(json.dumps(a, separators=(",", ":")) for a in actions).encode()
    if not folder.lake.objects.create(f"{folder.key}/_delta_log/{version:020d}.json", body):
        raise _concurrent(folder, RuntimeError(f"version {version} of the table was committed by another writer"))


def _concurrent(folder: DeltaFolder, exc: Exception) -> ConcurrentRunError:
    return ConcurrentRunError(
        f"another writer committed to {folder.uri} while this run was writing: {str(exc).splitlines()[0]}; "
        "nothing of this run was committed",
        "run again: the other run's commit is kept, and this one starts from it")


def remove_uncommitted(folder: DeltaFolder, prefix: str, committed: Sequence[DataFile] = ()) -> int:
    """Delete the files a run (``prefix``) wrote that its commit does not name; how many there were."""
    keep = {f.path.rpartition("/")[2] for f in committed}
    objects = folder.lake.objects
    stray = [o.key for where in (f"{folder.key}/{prefix}", f"{folder.key}/{CHANGE_DATA}/{prefix}")
             for o in objects.list(where) if o.key.rpartition("/")[2] not in keep]
    for key in stray:
        with contextlib.suppress(OSError):
            objects.delete(key)
    return len(stray)
