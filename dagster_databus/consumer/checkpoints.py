"""Consumer checkpoints (Databus's checkpoint persistence, JSON) and the stores that keep them.

Every consumer keeps one document that says how far it got: a callback consumer its
``ConsumerCheckpoint``, a logical-table consumer its checkpoint vector (``logical.LogicalCheckpoint``),
a dedupe sink its held positions (``ordering.SinkState``). One set of stores keeps any of them
(``CheckpointStore[D]``): ``FileStore`` (a JSON file replaced atomically), ``MemoryStore`` (this
process only) and ``LakeCheckpointStore`` (numbered versions in the lake, created only if absent).
Each consumer module binds them to its document type (``FileCheckpointStore``,
``FileLogicalCheckpointStore``, ``FilePositionStore``, ...).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from dagster_databus.consumer.coverage import Coverage
from dagster_databus.core.scn import Scn
from dagster_databus.errors import CheckpointFormatError, ConcurrentRunError
from dagster_databus.storage.documents import VersionedDocuments
from dagster_databus.storage.durable import write_json_atomic

if TYPE_CHECKING:
    from dagster_databus.storage.objects import LakeObjects


class Document(Protocol):
    """What a store keeps: anything that writes itself as JSON (its store is given how to read it back)."""

    def to_json(self) -> dict[str, Any]: ...


D = TypeVar("D", bound=Document)


class CheckpointStore(Protocol[D]):
    """Where a consumer keeps its document: any object with ``load`` and ``save``."""

    def load(self) -> D | None: ...
    def save(self, checkpoint: D) -> None: ...


class FileStore(Generic[D]):
    """A JSON file, replaced atomically (fsync + rename) on every save."""

    def __init__(self, path: str | Path, decode: Callable[[dict[str, Any]], D]) -> None:
        self.path = Path(path)
        self.decode = decode

    def load(self) -> D | None:
        if not self.path.exists():
            return None
        try:
            return self.decode(json.loads(self.path.read_text()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointFormatError(
                f"{self.path} is not a consumer checkpoint this version reads ({type(exc).__name__}: {exc})",
                "name the checkpoint file this consumer wrote (not its config or output); to start afresh, "
                "name a new file") from exc

    def save(self, checkpoint: D) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, checkpoint.to_json())

    def describe(self) -> str:
        return f"file {self.path}"


class MemoryStore(Generic[D]):
    """Holds the document in this process only. ``copy`` keeps the store's own copy of a document its
    owner goes on changing after a save (a dedupe sink's maps); immutable documents are kept as they are."""

    def __init__(self, checkpoint: D | None = None, copy: Callable[[D], D] | None = None) -> None:
        self.copy = copy
        self.checkpoint = checkpoint if checkpoint is None or copy is None else copy(checkpoint)

    def load(self) -> D | None:
        if self.checkpoint is None or self.copy is None:
            return self.checkpoint
        return self.copy(self.checkpoint)

    def save(self, checkpoint: D) -> None:
        self.checkpoint = checkpoint if self.copy is None else self.copy(checkpoint)

    def describe(self) -> str:
        return "in memory"


@dataclass(frozen=True, slots=True)
class ConsumerCheckpoint:
    """Everything ``covers`` subscribes to at or below ``scn`` has been delivered. ``scn`` is a position of
    ``epoch`` in the change log ``log_id`` names. After a bootstrap, ``table_floors`` holds each table's
    snapshot SCN: log events of that table at or below it were in the snapshot.

    ``log_id`` and ``covers`` are None in a checkpoint written before they were recorded: it is taken to
    cover the subscription it is used with, and records that subscription at its next save
    (``coverage``). The JSON keys ``log_id`` and ``covers`` appear only when set, so such a checkpoint
    (and a logical-table checkpoint's parts, which record neither) keeps its earlier shape.
    """

    scn: Scn
    epoch: str | None = None
    table_floors: dict[str, int] = field(default_factory=dict)
    log_id: str | None = None
    covers: Coverage | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"scn": str(self.scn), "epoch": self.epoch, "table_floors": self.table_floors}
        if self.log_id:
            doc["log_id"] = self.log_id
        if self.covers is not None:
            doc["covers"] = self.covers.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ConsumerCheckpoint:
        covers = doc.get("covers")
        return cls(scn=Scn.parse(doc["scn"]), epoch=doc.get("epoch"), table_floors=doc.get("table_floors", {}),
                   log_id=doc.get("log_id") or None, covers=Coverage.from_json(covers) if covers else None)


class FileCheckpointStore(FileStore[ConsumerCheckpoint]):
    """A callback consumer's checkpoint in a JSON file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, ConsumerCheckpoint.from_json)


class MemoryCheckpointStore(MemoryStore[ConsumerCheckpoint]):
    """A callback consumer's checkpoint in memory (the default: kept as long as its client)."""


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

    def describe(self) -> str:
        return f"{self.objects.location.described()}/{self.prefix}"

    def load(self) -> Any:
        versions = self._versions()
        self.version = versions[-1] if versions else 0
        if not versions:
            return None
        data = self.documents.read(versions[-1])
        if data is None:  # dropped since it was listed: a newer one is there
            return self.load()
        try:
            return self.decode(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointFormatError(
                f"checkpoint version {versions[-1]} at {self.describe()} is not a consumer checkpoint this version "
                f"reads ({type(exc).__name__}: {exc})",
                "upgrade dagster-databus if a newer one wrote it; else start the consumer afresh under a new name"
            ) from exc

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
