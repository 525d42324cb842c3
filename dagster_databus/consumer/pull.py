"""The pull API over the change log, after Canal's meta manager (a cursor and subscription per client id).

``MetaManager`` keeps each client identity's subscription (tables, filter) and its cursor, the
last acknowledged position, under ``<lake>/consumers/<source>/``, as numbered versions written
create-if-absent (two consumers with one client id cannot both move it on). A ``PullConsumer`` fetches
batches without acknowledging them (``get_without_ack``), each with an increasing batch id;
``ack`` must follow the order batches were handed out; ``rollback`` returns un-acknowledged
batches for redelivery. Batches hold whole consistency windows. Un-acknowledged batches live
in memory: after a restart delivery resumes from the cursor (at least once).

A cursor is a position of one change log: its document records the log's epoch and id beside it,
and a cursor the log no longer places (the source was bootstrapped, the log restored from an older
copy: before its start, of another epoch or log, past its end) is refused at ``get_without_ack``
rather than resumed. Subscribing an existing client again follows ``coverage``'s rule: the same
subscription, or a narrower one (fewer tables, fewer partitions), keeps the cursor; one that adds a
table or partitions the cursor never covered is refused (``SubscriptionMismatchError``), since the
cursor would skip every change of what was added up to it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_databus.consumer.coverage import Coverage
from dagster_databus.consumer.delivery import log_end
from dagster_databus.consumer.filters import PartitionFilter
from dagster_databus.core.events import ChangeEvent
from dagster_databus.core.identifiers import is_plain_name
from dagster_databus.core.scn import Scn
from dagster_databus.errors import PullError, SubscriptionMismatchError
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.compat import cursor_v0_key
from dagster_databus.log.manifest import Manifest
from dagster_databus.storage.documents import VersionedDocuments
from dagster_databus.storage.lake import Lake, as_lake
from dagster_databus.storage.objects import LakeObjects


@dataclass(frozen=True, slots=True)
class Subscription:
    client_id: str
    tables: tuple[str, ...] | None = None
    filter: str | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    id: int  # -1: nothing to deliver right now
    start: Scn  # exclusive
    end: Scn  # inclusive: the cursor after an ack
    events: tuple[ChangeEvent, ...] = field(default=())


class MetaManager:
    """Subscriptions and cursors, one document per client, kept in the lake as numbered versions
    (``consumers/<source>/<client>/meta/<n>.json``). Each write creates the next version only if it
    is free, so a consumer whose cursor another process moved on is refused instead of overwriting
    it; this works the same on a local disk and on an object store."""

    KEEP = 3  # versions kept per client

    def __init__(self, lake: Lake | str | Path, source: str, objects: LakeObjects | None = None) -> None:
        self.lake = as_lake(lake)
        self.source = source
        self.objects = objects if objects is not None else self.lake.objects
        self.prefix = f"consumers/{source}/"

    def _versioned(self, client_id: str) -> VersionedDocuments:
        if not is_plain_name(client_id):
            raise PullError(f"client id {client_id!r} is not a plain name", "use letters, digits and underscores")
        return VersionedDocuments(self.objects, f"{self.prefix}{client_id}/meta/")

    def _legacy_key(self, client_id: str) -> str:
        """Version 0: where an earlier dagster-databus kept the document (``log.compat``)."""
        return cursor_v0_key(self.prefix, client_id)

    def _versions(self, client_id: str) -> list[int]:
        return self._versioned(client_id).versions()

    def _read(self, client_id: str, version: int) -> bytes | None:
        return self._versioned(client_id).read(version) if version else self.objects.read(self._legacy_key(client_id))

    def _delete(self, client_id: str, version: int) -> None:
        if version:
            self._versioned(client_id).delete(version)
        else:
            self.objects.delete(self._legacy_key(client_id))

    def _load_versioned(self, client_id: str) -> tuple[dict[str, Any] | None, int]:
        """(document, its version): the newest; (None, 0) for a client that is not subscribed."""
        for version in reversed([0, *self._versions(client_id)]):
            data = self._read(client_id, version)
            if data is not None:
                return json.loads(data), version
        return None, 0

    def _load(self, client_id: str) -> dict[str, Any] | None:
        return self._load_versioned(client_id)[0]

    def _store(self, client_id: str, doc: dict[str, Any], expected: int | None = None) -> int:
        """Write the version after ``expected`` (default: the newest there is); its number."""
        if expected is None:
            expected = self._load_versioned(client_id)[1]
        following = expected + 1
        if not self._versioned(client_id).create(following, json.dumps(doc).encode()):
            raise PullError(
                f"client {client_id!r} of source {self.source!r} was moved on by another process while this one "
                f"held it at version {expected}: another consumer with the same client id is running",
                "run one consumer per client id; restart this one to resume from the stored cursor")
        for old in [0, *self._versions(client_id)]:
            if old < following - self.KEEP + 1 or old == 0:
                self._delete(client_id, old)
        return following

    def subscribe(self, client_id: str, tables: list[str] | None = None, filter: str | None = None) -> Subscription:
        """Add a client, starting at the oldest change the log holds now. An existing client subscribed to
        the same keeps its cursor (Canal: "no change if it exists"), as does one subscribed again to less
        (fewer tables or partitions: recorded, and its cursor kept); subscribing it to more than its cursor
        covers is refused with ``SubscriptionMismatchError``."""
        wanted = Coverage.of(self.source, tables, filter)  # a filter that cannot be parsed is refused here
        doc, version = self._load_versioned(client_id)
        if doc is None:
            manifest = ChangeLog(self.lake, self.source).manifest()
            doc = {"client_id": client_id, "tables": tables, "filter": filter, "cursor": str(manifest.start_scn),
                   "last_batch_id": 0, **_log_of(manifest)}
            try:
                self._store(client_id, doc, expected=0)
            except PullError:  # subscribed by another process meanwhile: theirs stands
                doc = self._require(client_id)
                self._resubscribe(client_id, doc, None, wanted)
        else:
            doc = self._resubscribe(client_id, doc, version, wanted)
        return Subscription(client_id, tuple(doc["tables"]) if doc["tables"] else None, doc["filter"])

    def _resubscribe(self, client_id: str, doc: dict[str, Any], version: int | None,
                     wanted: Coverage) -> dict[str, Any]:
        """The document of ``client_id`` subscribed again to ``wanted``: as it is, or narrowed (written as the
        version after ``version``); refused when ``wanted`` asks for more than its cursor covers."""
        held = Coverage.of(self.source, doc["tables"], doc["filter"])
        if gaps := held.gaps(wanted):
            raise SubscriptionMismatchError(
                f"client {client_id!r} of source {self.source!r} is subscribed to {held.describe()}, with its "
                f"cursor at SCN {doc['cursor']}; subscribing it to {wanted.describe()} asks for more: "
                f"{'; '.join(gaps)}. Its cursor would silently skip what was added: every change of it up to SCN "
                f"{doc['cursor']}",
                "subscribe a new client id for the new subscription (it starts at the oldest change the log holds); "
                "or subscribe with the client's subscription or a narrower one; or unsubscribe the client and "
                "subscribe it again to start it over", source=self.source, client=client_id)
        if held.same_as(wanted) or version is None:
            return doc
        narrowed = {**doc, "tables": list(wanted.tables) if wanted.tables is not None else None,
                    "filter": wanted.filter}
        self._store(client_id, narrowed, expected=version)
        return narrowed

    def unsubscribe(self, client_id: str) -> None:
        for version in [0, *self._versions(client_id)]:
            self._delete(client_id, version)

    def _clients(self) -> list[str]:
        names = set()
        for o in self.objects.list(self.prefix):
            rest = o.key[len(self.prefix):]
            if rest.endswith(".json") and "/" not in rest:
                names.add(rest[:-5])
            elif "/meta/" in rest:
                names.add(rest.split("/", 1)[0])
        return sorted(n for n in names if is_plain_name(n))

    def has_subscribed(self, client_id: str) -> bool:
        return self._load(client_id) is not None

    def _documents(self) -> list[dict[str, Any]]:
        return [d for d in map(self._load, self._clients()) if d is not None]

    def subscriptions(self) -> list[Subscription]:
        return [Subscription(d["client_id"], tuple(d["tables"]) if d["tables"] else None, d["filter"])
                for d in self._documents()]

    def cursors(self) -> dict[str, Scn | None]:
        return {d["client_id"]: Scn.parse(d["cursor"]) if d["cursor"] is not None else None
                for d in self._documents()}

    def cursor(self, client_id: str) -> Scn | None:
        doc = self._require(client_id)
        return Scn.parse(doc["cursor"]) if doc["cursor"] is not None else None

    def _require(self, client_id: str) -> dict[str, Any]:
        doc = self._load(client_id)
        if doc is None:
            raise PullError(f"client {client_id!r} is not subscribed to source {self.source!r}",
                            "call subscribe(client_id) first")
        return doc


def _log_of(manifest: Manifest) -> dict[str, Any]:
    """What a cursor document records of the log its cursor is a position of."""
    return {"epoch": manifest.epoch, "log_id": manifest.log_id or None}


class PullConsumer:
    def __init__(self, lake: Lake | str | Path, source: str, client_id: str,
                 objects: LakeObjects | None = None) -> None:
        self.meta = MetaManager(lake, source, objects)
        self.log = ChangeLog(self.meta.lake, source)
        self.client_id = client_id
        doc = self.meta._require(client_id)
        # The version this consumer holds: a write after another process moved the client on is refused.
        self.doc, self.version = self.meta._load_versioned(client_id)
        self.tables = set(doc["tables"]) if doc["tables"] else None
        self.filter = PartitionFilter.parse(doc["filter"]) if doc["filter"] else None
        self.next_batch_id = int(doc["last_batch_id"]) + 1
        self.outstanding: list[Batch] = []

    def _keep(self, table: str, key_json: str) -> bool:
        return (self.tables is None or table in self.tables) and (
            self.filter is None or self.filter.accepts_encoded(key_json))

    def _position(self) -> Scn:
        if self.outstanding:
            return self.outstanding[-1].end
        cursor = self.meta.cursor(self.client_id)
        return cursor if cursor is not None else self.log.manifest().start_scn

    def get_without_ack(self, batch_size: int, timeout_s: float = 0.0) -> Batch:
        """Up to ``batch_size`` events (whole windows; one larger window comes whole), waiting up to
        ``timeout_s`` for some to arrive; then whatever there is."""
        deadline = time.monotonic() + timeout_s
        start = self._position()
        manifest = self.log.manifest()
        self._check(start, manifest)
        while True:
            events: list[ChangeEvent] = []
            end = start
            for window in self.log.read_windows(start, keep=self._keep):
                if events and len(events) + len(window.events) > batch_size:
                    break
                events += window.events
                end = window.scn
            if events or time.monotonic() >= deadline:
                break
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        if not events:
            return Batch(id=-1, start=start, end=start)
        batch = Batch(id=self.next_batch_id, start=start, end=end, events=tuple(events))
        # Persist the id before handing the batch out, so ids keep increasing across restarts.
        self._save(last_batch_id=batch.id, **_log_of(manifest))
        self.next_batch_id += 1
        self.outstanding.append(batch)
        return batch

    def _check(self, start: Scn, manifest: Manifest) -> None:
        """Refuse a position ``start`` the log no longer places: delivering from it would skip changes."""
        if start < manifest.start_scn:
            raise PullError(f"client {self.client_id!r} is at SCN {start}, but the log now starts after "
                            f"{manifest.start_scn}", "bootstrap the client from the snapshots")
        held = self.doc or {}
        epoch, log_id = held.get("epoch"), held.get("log_id")
        # A failover switches epochs but keeps the log; a restarted log begins where the source was, so a
        # position of the log before it is the same place only at that start.
        foreign = epoch is not None and manifest.epoch is not None and not manifest.knows_epoch(epoch)
        other_log = log_id is not None and bool(manifest.log_id) and log_id != manifest.log_id \
            and start != manifest.start_scn
        end = log_end(manifest)
        if foreign or other_log or start > end:
            why = (f"a position of epoch {epoch}, but the log is of epoch {manifest.epoch} now" if foreign else
                   f"a position of change log {log_id}, but the log was restarted since (now {manifest.log_id})"
                   if other_log else f"past the end of the log (it has reached SCN {end})")
            raise PullError(
                f"client {self.client_id!r} of source {self.log.source!r} has its cursor at SCN {start}, {why}: "
                "the log does not place it, and delivering from it would skip changes",
                "rebuild the client's data from the snapshots, then unsubscribe the client and subscribe it again "
                "(it starts at the oldest change the log holds); check first that this is the lake the client "
                "was subscribed in")

    def ack(self, batch_id: int) -> None:
        """Acknowledge the oldest outstanding batch; acking out of order is refused, as Canal refuses it: the
        cursor only moves past batches in the order they were handed out."""
        if not self.outstanding:
            raise PullError(f"batch {batch_id} acked, but no batch is outstanding for {self.client_id!r}",
                            "ack only batch ids returned by get_without_ack")
        first = self.outstanding[0]
        if batch_id != first.id:
            raise PullError(f"batch {batch_id} acked out of order: batch {first.id} was handed out first and is "
                            "not acked yet", "ack batches in the order get_without_ack returned them")
        self._save(cursor=str(first.end))
        self.outstanding.pop(0)

    def _save(self, **changes: Any) -> None:
        doc = {**(self.doc or {}), **changes}
        self.version = self.meta._store(self.client_id, doc, expected=self.version)
        self.doc = doc

    def rollback(self, batch_id: int | None = None) -> None:
        """Return un-acked batches: all of them, or ``batch_id`` and those handed out after it."""
        if batch_id is None:
            self.outstanding = []
            return
        ids = [b.id for b in self.outstanding]
        if batch_id not in ids:
            raise PullError(f"batch {batch_id} is not outstanding for {self.client_id!r} (outstanding: {ids})",
                            "roll back a batch that was handed out and not acked")
        self.outstanding = self.outstanding[: ids.index(batch_id)]
