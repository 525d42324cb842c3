"""Change events (Databus's DbusEvent) and consistency windows."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dagster_databus.core.scn import Scn
from dagster_databus.core.types import json_value


class Op(StrEnum):
    INSERT = "i"
    UPDATE = "u"
    DELETE = "d"


OPS: dict[str, Op] = {op.value: op for op in Op}  # a dict lookup: several times cheaper than Op(...)


def encode_key(values: Sequence[Any]) -> str:
    """The primary key as a compact JSON array: a stable, comparable string form. Values that JSON has
    no type for take their one text form (``core.types.json_value``), so a key read from a snapshot
    encodes exactly as the same key read from the log."""
    if all(type(v) is int for v in values):  # the common key, and exactly what JSON writes for it
        return f"[{','.join(map(str, values))}]"
    # A float's -0 is the same key as its 0 (each source's = says so): one text, so one partition, for both.
    return _KEY_JSON.encode([json_value(v + 0.0 if type(v) is float else v) for v in values])


_KEY_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one encoder, not one per key


def key_partition(key: str, buckets: int = 1 << 16) -> int:
    """A stable hash partition of an encoded key, stored with every event for server-side filters."""
    return zlib.crc32(key.encode()) % buckets


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One row change. ``row`` is the after image (inserts, updates) or, for a delete, the before image
    (a binlog's) or the key with the other columns None (triggers' capture keeps only the key)."""

    scn: Scn
    seq: int
    table: str
    op: Op
    key: tuple[Any, ...]
    row: Mapping[str, Any]
    commit_ts_ms: int


@dataclass(frozen=True, slots=True)
class Window:
    """A consistency window: whole source transactions, written, merged and delivered as a unit.

    ``scn`` is the window's end SCN (Databus's EndDataEventSequence SCN): a checkpoint at
    ``scn`` means every event of this window and all earlier ones has been handled.
    """

    scn: Scn
    events: tuple[ChangeEvent, ...]
    # The schema version each event's row was written in, when read back from the change log (else empty):
    # where it was read from, not what the window is, so it takes no part in comparing windows.
    schema_versions: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.events:
            raise ValueError("a window has at least one event")
        scns = [e.scn.value for e in self.events]  # ints: sorted() compares them in C
        if scns != sorted(scns) or scns[-1] > self.scn.value:
            raise ValueError(f"events of window {self.scn} are not in SCN order")

    @property
    def first_scn(self) -> Scn:
        return self.events[0].scn
