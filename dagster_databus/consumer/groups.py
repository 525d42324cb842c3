"""Consumer groups split by key: which member of a group receives a change.

``KeyRouter`` is the one hash the product routes keys by, ``crc32(encoded key) % N``
(``core.events.key_partition`` over ``core.events.encode_key``), so a key lands on the same member in
every run, process and Python version (no ``hash()``, which is salted per process). ``GroupMember``
is one member of such a group, as a client or a checkpoint's coverage names it (``"index/size"``).

Pure values with no state: ``coverage`` (what a position covers), ``ordering`` (the sink guard) and
the clients all build on them, and this module imports none of theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dagster_databus.core.events import encode_key, key_partition
from dagster_databus.core.scn import Scn
from dagster_databus.errors import GroupSpecError


class Change(Protocol):
    """What routing and the sink need of a change; ``ChangeEvent`` and ``LogicalEvent`` have it."""

    @property
    def scn(self) -> Scn: ...
    @property
    def seq(self) -> int: ...
    @property
    def table(self) -> str: ...
    @property
    def key(self) -> tuple[Any, ...]: ...
    @property
    def commit_ts_ms(self) -> int: ...


C = TypeVar("C", bound=Change)


@dataclass(frozen=True, slots=True)
class KeyRouter:
    """Assigns each primary key to one of ``members`` consumers: ``crc32(encode_key(key)) % members``."""

    members: int

    def __post_init__(self) -> None:
        if self.members < 1:
            raise GroupSpecError(f"a consumer group of {self.members} members cannot receive anything",
                                 "use a group size of 1 or more")

    def member(self, key: Sequence[Any]) -> int:
        return key_partition(encode_key(key), self.members)

    def member_of_encoded(self, key_json: str) -> int:
        """The member of a key as the log stores it (``encode_key``'s JSON): no decoding needed."""
        return key_partition(key_json, self.members)

    def split(self, changes: Iterable[C]) -> list[list[C]]:
        """Changes per member, each list in arrival order (so per-key order is kept)."""
        out: list[list[C]] = [[] for _ in range(self.members)]
        for change in changes:
            out[self.member(change.key)].append(change)
        return out


@dataclass(frozen=True, slots=True)
class GroupMember:
    """Member ``index`` of a consumer group of ``size``: receives the keys ``KeyRouter(size)`` gives it."""

    index: int
    size: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.size:
            raise GroupSpecError(f"member {self.index} of a group of {self.size} does not exist",
                                 f"number the members 0..{max(self.size, 1) - 1}")

    @classmethod
    def parse(cls, spec: str) -> GroupMember:
        """``"1/3"``: member 1 of a group of 3."""
        index, sep, size = spec.partition("/")
        if not (sep and index.strip().isdigit() and size.strip().isdigit()):
            raise GroupSpecError(f"group member {spec!r} is not <index>/<size>", "for example 0/3, 1/3 and 2/3")
        return cls(int(index), int(size))

    @property
    def router(self) -> KeyRouter:
        return KeyRouter(self.size)

    def owns(self, key: Sequence[Any]) -> bool:
        return self.router.member(key) == self.index

    def owns_encoded(self, key_json: str) -> bool:
        return self.router.member_of_encoded(key_json) == self.index
