"""Server-side partition filters on the primary key (Databus's partition and server-side filtering): the
reader drops what a consumer does not own, so it never crosses to the consumer.

``range:<interval>:<ids>``: partition = first key column // interval (integer keys).
``mod:<buckets>:<ids>``: bucket = key % buckets for a single integer key, else crc32 of the key as
the log stores it (``core.events.key_partition``, the same hash ``groups.KeyRouter`` uses).
Id lists use Databus's syntax: ``[1,5,10]``, ``[1-10]``, ``[1,2,5-10]``. The reader applies
a filter to each record's stored key before building its event.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from dagster_databus.core.events import encode_key, key_partition
from dagster_databus.errors import FilterSpecError


def parse_ids(text: str) -> frozenset[int]:
    """``[1,2,5-10]`` → {1, 2, 5, 6, 7, 8, 9, 10}."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise FilterSpecError(f"id list {text!r} must be bracketed, like [1,2,5-10]",
                              "write ids and ranges inside brackets: [1,5,10], [1-10] or [1,2,5-10]")
    ids: set[int] = set()
    for part in filter(None, (p.strip() for p in body[1:-1].split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise FilterSpecError(f"{part!r} in id list {text!r} is not an id or a range",
                                  "use non-negative integers and ranges like 5-10")
        lo, hi = int(match.group(1)), int(match.group(2) or match.group(1))
        if hi < lo:
            raise FilterSpecError(f"range {part!r} in {text!r} runs backwards", f"write it as {hi}-{lo}")
        ids.update(range(lo, hi + 1))
    if not ids:
        raise FilterSpecError(f"id list {text!r} is empty", "name at least one partition or bucket")
    return frozenset(ids)


def format_ids(ids: frozenset[int]) -> str:
    """{1, 2, 5, 6, 7} → ``[1,2,5-7]``: ``parse_ids`` reads it back as the same set."""
    parts: list[str] = []
    ordered = sorted(ids)
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            lo, hi = ordered[start], ordered[i - 1]
            parts.append(str(lo) if lo == hi else f"{lo},{hi}" if hi == lo + 1 else f"{lo}-{hi}")
            start = i
    return f"[{','.join(parts)}]"


@dataclass(frozen=True, slots=True)
class PartitionFilter:
    kind: Literal["range", "mod"]
    size: int  # interval size (range) or bucket count (mod)
    ids: frozenset[int]

    @classmethod
    def parse(cls, spec: str) -> PartitionFilter:
        match = re.fullmatch(r"(range|mod):(\d+):(\[.*\])", spec.strip())
        if not match or int(match.group(2)) <= 0:
            raise FilterSpecError(f"partition filter {spec!r} is not range:<size>:[ids] or mod:<buckets>:[ids]",
                                  "for example mod:10:[1,3] or range:1000000:[0-2]")
        kind = match.group(1)
        ids = parse_ids(match.group(3))
        size = int(match.group(2))
        if kind == "mod" and max(ids) >= size:
            raise FilterSpecError(f"bucket ids {sorted(ids)} go beyond {size} buckets in {spec!r}",
                                  f"use bucket ids 0..{size - 1}")
        return cls(kind=kind, size=size, ids=ids)  # type: ignore[arg-type]

    def partition(self, key: list[Any]) -> int:
        first = key[0]
        if self.kind == "range":
            if not isinstance(first, int) or isinstance(first, bool):
                raise FilterSpecError(f"range partitioning needs an integer first key column, got {first!r}",
                                      "use a mod filter for this table")
            return first // self.size
        if len(key) == 1 and isinstance(first, int) and not isinstance(first, bool):
            return first % self.size
        # The product's one key hash (see consumer/groups.py): the key as the log stores it, so a
        # key read back from the log and the same key from a snapshot land in the same bucket.
        return key_partition(encode_key(key), self.size)

    def accepts(self, key: list[Any]) -> bool:
        return self.partition(key) in self.ids

    @property
    def spec(self) -> str:
        """The filter as ``parse`` reads it, in one canonical form (ids sorted, runs as ranges)."""
        return f"{self.kind}:{self.size}:{format_ids(self.ids)}"

    def within(self, other: PartitionFilter) -> bool:
        """Whether every key this filter accepts ``other`` accepts too (provably, for every key; False when
        that cannot be shown, as between a range and a mod filter).

        mod: ``k % n`` determines ``k % m`` when m divides n (and crc32 likewise), so mod:n:A is within
        mod:m:B when every a % m is in B. range: ``k // m == (k // i) // (m // i)`` when i divides m, so
        range:i:A is within range:m:B when every a // (m // i) is in B.
        """
        if self.kind != other.kind:
            return False
        if self.kind == "mod":
            return self.size % other.size == 0 and all(i % other.size in other.ids for i in self.ids)
        return other.size % self.size == 0 and all(i // (other.size // self.size) in other.ids for i in self.ids)

    def accepts_encoded(self, key_json: str) -> bool:
        return self.accepts(json.loads(key_json))
