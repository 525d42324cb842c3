"""The pull API over the change log, after Canal's meta manager (seed 001).

``MetaManager`` keeps each client identity's subscription (tables, filter) and its cursor, the
last acknowledged position, under ``<lake>/consumers/<source>/``. A ``PullConsumer`` fetches
batches without acknowledging them (``get_without_ack``), each with an increasing batch id;
``ack`` must follow the order batches were handed out; ``rollback`` returns un-acknowledged
batches for redelivery. Batches hold whole consistency windows. Un-acknowledged batches live
in memory: after a restart delivery resumes from the cursor (at least once).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_databus.consumer.filters import PartitionFilter
from dagster_databus.core.events import ChangeEvent
from dagster_databus.core.identifiers import is_plain_name
from dagster_databus.core.scn import Scn
from dagster_databus.errors import DatabusError
from dagster_databus.log.durable import write_json_atomic
from dagster_databus.log.store import ChangeLog


class PullError(DatabusError):
    """A pull-API call out of order or for an unknown client."""


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
    def __init__(self, lake: str | Path, source: str) -> None:
        self.lake = Path(lake)
        self.root = self.lake / "consumers" / source
        self.source = source

    def _path(self, client_id: str) -> Path:
        if not is_plain_name(client_id):
            raise PullError(f"client id {client_id!r} is not a plain name", "use letters, digits and underscores")
        return self.root / f"{client_id}.json"

    def _load(self, client_id: str) -> dict[str, Any] | None:
        path = self._path(client_id)
        return json.loads(path.read_text()) if path.exists() else None

    def _store(self, client_id: str, doc: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self._path(client_id), doc)

    def subscribe(self, client_id: str, tables: list[str] | None = None, filter: str | None = None) -> Subscription:
        """Add a client, starting at the oldest change the log holds now; an existing client is left
        as it is (Canal: "no change if it exists")."""
        if filter is not None:
            PartitionFilter.parse(filter)
        doc = self._load(client_id)
        if doc is None:
            start = ChangeLog(self.lake, self.source).manifest().start_scn
            doc = {"client_id": client_id, "tables": tables, "filter": filter, "cursor": str(start),
                   "last_batch_id": 0}
            self._store(client_id, doc)
        return Subscription(client_id, tuple(doc["tables"]) if doc["tables"] else None, doc["filter"])

    def unsubscribe(self, client_id: str) -> None:
        self._path(client_id).unlink(missing_ok=True)

    def has_subscribed(self, client_id: str) -> bool:
        return self._load(client_id) is not None

    def subscriptions(self) -> list[Subscription]:
        return [Subscription(d["client_id"], tuple(d["tables"]) if d["tables"] else None, d["filter"])
                for d in (json.loads(p.read_text()) for p in sorted(self.root.glob("*.json")))]

    def cursors(self) -> dict[str, Scn | None]:
        return {d["client_id"]: Scn.parse(d["cursor"]) if d["cursor"] is not None else None
                for d in (json.loads(p.read_text()) for p in sorted(self.root.glob("*.json")))}

    def cursor(self, client_id: str) -> Scn | None:
        doc = self._require(client_id)
        return Scn.parse(doc["cursor"]) if doc["cursor"] is not None else None

    def _require(self, client_id: str) -> dict[str, Any]:
        doc = self._load(client_id)
        if doc is None:
            raise PullError(f"client {client_id!r} is not subscribed to source {self.source!r}",
                            "call subscribe(client_id) first")
        return doc


class PullConsumer:
    def __init__(self, lake: str | Path, source: str, client_id: str) -> None:
        self.meta = MetaManager(lake, source)
        self.log = ChangeLog(Path(lake), source)
        self.client_id = client_id
        doc = self.meta._require(client_id)
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
        if start < self.log.manifest().start_scn:
            raise PullError(f"client {self.client_id!r} is at SCN {start}, but the log now starts after "
                            f"{self.log.manifest().start_scn}", "bootstrap the client from the snapshots")
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
        doc = self.meta._require(self.client_id)
        doc["last_batch_id"] = batch.id
        self.meta._store(self.client_id, doc)
        self.next_batch_id += 1
        self.outstanding.append(batch)
        return batch

    def ack(self, batch_id: int) -> None:
        """Acknowledge the oldest outstanding batch; acking out of order is refused (seed 001)."""
        if not self.outstanding:
            raise PullError(f"batch {batch_id} acked, but no batch is outstanding for {self.client_id!r}",
                            "ack only batch ids returned by get_without_ack")
        first = self.outstanding[0]
        if batch_id != first.id:
            raise PullError(f"batch {batch_id} acked out of order: batch {first.id} was handed out first and is "
                            "not acked yet", "ack batches in the order get_without_ack returned them")
        doc = self.meta._require(self.client_id)
        doc["cursor"] = str(first.end)
        self.meta._store(self.client_id, doc)
        self.outstanding.pop(0)

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
