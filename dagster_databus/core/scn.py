"""System change numbers and positions.

An ``Scn`` is a 64-bit, commit-ordered position within one *epoch* (one lineage of a
source: a capture install, a server's binlog series). Positions of different epochs
are never compared: ``Position`` refuses to order them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering
from typing import ClassVar

from dagster_databus.errors import EpochMismatchError

_MAX = (1 << 63) - 1
# Binlog SCNs: era (failover count) in bits 52..62, binlog file number in 32..51, offset in 0..31.
_ERA_SHIFT, _FILE_BITS = 52, 20


@dataclass(frozen=True, order=True, slots=True)
class Scn:
    """An ordered, immutable system change number. Serialized as a decimal string."""

    value: int

    BEGINNING: ClassVar[Scn]
    MAX: ClassVar[Scn]

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise TypeError(f"SCN must be an int, got {type(self.value).__name__}")
        if not 0 <= self.value <= _MAX:
            raise ValueError(f"SCN {self.value} is outside 0..2^63-1")

    @classmethod
    def parse(cls, text: str | int) -> Scn:
        if isinstance(text, int):
            return cls(text)
        stripped = text.strip()
        if not stripped.isdigit():
            raise ValueError(f"not an SCN: {text!r}")
        return cls(int(stripped))

    @classmethod
    def from_binlog(cls, file_number: int, offset: int, era: int = 0) -> Scn:
        """A binlog position: its file number above the 32-bit offset.

        ``era`` counts the failovers of the source's change log: after a switch to another
        server, whose binlog positions are unrelated, SCNs carry the next era, so the log's
        SCNs keep growing (see docs/ha.md).
        """
        if not (0 <= file_number < (1 << _FILE_BITS) and 0 <= offset < (1 << 32)):
            raise ValueError(f"binlog position out of range: file {file_number}, offset {offset}")
        if not 0 <= era < (1 << (63 - _ERA_SHIFT)):
            raise ValueError(f"failover era {era} out of range")
        return cls((era << _ERA_SHIFT) | (file_number << 32) | offset)

    def binlog_parts(self) -> tuple[int, int, int]:
        """(era, binlog file number, offset) of an SCN made by ``from_binlog``."""
        return (self.value >> _ERA_SHIFT, (self.value >> 32) & ((1 << _FILE_BITS) - 1),
                self.value & 0xFFFFFFFF)

    @property
    def is_beginning(self) -> bool:
        return self.value == 0

    def __str__(self) -> str:
        return str(self.value)

    def __int__(self) -> int:
        return self.value


Scn.BEGINNING = Scn(0)
Scn.MAX = Scn(_MAX)


@total_ordering
@dataclass(frozen=True, slots=True)
class Position:
    """An SCN within an epoch. Ordering across epochs raises instead of guessing."""

    epoch: str
    scn: Scn

    def same_epoch(self, other: Position) -> bool:
        """Whether ``other`` is of this position's epoch: only then are the two ordered."""
        return self.epoch == other.epoch

    def _check(self, other: Position) -> None:
        if not self.same_epoch(other):
            raise EpochMismatchError(
                f"positions from different epochs cannot be compared: {self.epoch!r} vs {other.epoch!r}",
                "the source was replaced, restored or re-installed; bootstrap the affected tables",
                ours=self.epoch,
                theirs=other.epoch,
            )

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        self._check(other)
        return self.scn < other.scn

    def __str__(self) -> str:
        return f"{self.epoch}:{self.scn}"

