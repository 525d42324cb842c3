"""Consumer checkpoints (Databus's checkpoint persistence, JSON) and pluggable stores."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dagster_databus.core.scn import Scn
from dagster_databus.log.durable import write_json_atomic


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
