"""Consumer checkpoints (Databus's checkpoint persistence, JSON) and pluggable stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dagster_databus.core.scn import Scn
from dagster_databus.errors import ConcurrentRunError
from dagster_databus.storage.documents import VersionedDocuments
from dagster_databus.storage.durable import write_json_atomic

if TYPE_CHECKING:
    from dagster_databus.storage.objects import LakeObjects


@dataclass(frozen=True, slots=True)
class ConsumerCheckpoint:
    """Everything at or below ``scn`` has been delivered. After a bootstrap, ``table_floors`` holds
    each table's snapshot SCN: log events of that table at or below it were in the snapshot."""

    scn: Scn
    epoch: str | None = None
    table_floors: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"scn": str(self.scn), "epoch": self.epoch, "table_floors": self.table_floors}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ConsumerCheckpoint:
        return cls(scn=Scn.parse(doc["scn"]), epoch=doc.get("epoch"), table_floors=doc.get("table_floors", {}))


class CheckpointStore(Protocol):
    def load(self) -> ConsumerCheckpoint | None: ...
    def save(self, checkpoint: ConsumerCheckpoint) -> None: ...


class FileCheckpointStore:
    """A JSON file, replaced atomically on every save."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> ConsumerCheckpoint | None:
        if not self.path.exists():
            return None
        return ConsumerCheckpoint.from_json(json.loads(self.path.read_text()))

    def save(self, checkpoint: ConsumerCheckpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, checkpoint.to_json())


class MemoryCheckpointStore:
    def __init__(self, checkpoint: ConsumerCheckpoint | None = None) -> None:
        self.checkpoint = checkpoint

    def load(self) -> ConsumerCheckpoint | None:
        return self.checkpoint

    def save(self, checkpoint: ConsumerCheckpoint) -> None:
        self.checkpoint = checkpoint


class LakeCheckpointStore:
    """Checkpoints kept in the lake (a local folder or an object store) as numbered versions, each
    written with create-if-absent: a consumer that loaded version n can only write n+1, so a second
    instance of the same consumer that advanced meanwhile is detected instead of silently overwritten.
    Works the same with no shared disk and no lock service."""

    KEEP = 3  # versions kept; older ones are removed after each save

    def __init__(self, objects: LakeObjects, prefix: str,
                 decode: Callable[[dict[str, Any]], Any] = ConsumerCheckpoint.from_json) -> None:
        self.objects, self.prefix = objects, prefix.rstrip("/") + "/"
        self.documents = VersionedDocuments(objects, self.prefix)
        self.decode = decode  # the document's type: callback consumers' checkpoints, or logical tables'
        self.version: int | None = None  # what this instance loaded or saved last

    @classmethod
    def for_consumer(cls, objects: LakeObjects, source: str, consumer: str) -> LakeCheckpointStore:
        return cls(objects, f"consumers/{source}/{consumer}/checkpoint")

    def _versions(self) -> list[int]:
        return self.documents.versions()

    def load(self) -> Any:
        versions = self._versions()
        self.version = versions[-1] if versions else 0
        if not versions:
            return None
        data = self.documents.read(versions[-1])
        return self.decode(json.loads(data)) if data is not None else self.load()

    def save(self, checkpoint: Any) -> None:
        if self.version is None:
            self.load()
        assert self.version is not None
        following = self.version + 1
        if not self.documents.create(following, json.dumps(checkpoint.to_json()).encode()):
            raise ConcurrentRunError(
                f"the checkpoint at {self.objects.location.described()}/{self.prefix} moved past version "
                f"{self.version} while this consumer ran: another instance of the same consumer is running",
                "run one instance per consumer name (give each instance its own name), then restart this one: it "
                "resumes from the newer checkpoint")
        self.version = following
        for old in self._versions()[:-self.KEEP]:
            self.documents.delete(old)
