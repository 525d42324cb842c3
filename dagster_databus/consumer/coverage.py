"""What a consumer position covers: the subscription a checkpoint or pull cursor was kept for.

A position (an SCN) says "everything up to here was delivered" only for the events the consumer
subscribed to: its source, its tables, its partition filter and its consumer-group member. Used with
another subscription it would lie: resuming a checkpoint of tables ``a`` with tables ``a, b`` skips
``b``'s bootstrap and every change of ``b`` up to the checkpoint, in silence. So each checkpoint and
cursor records its ``Coverage``, and a consumer resumes one only when what it asks for now is
*within* it:

* the same source (always);
* its tables a subset of the covered ones (fewer tables, or the same in another order), or any
  tables when the position covers every table;
* its partition filter provably within the covered one (``PartitionFilter.within``: fewer ids of
  the same filter, or a finer filter that splits the covered partitions), or any filter when the
  position had none;
* its group member provably within the covered one (member i of n is within member i % m of m when m
  divides n), or any member when the position had no group.

Narrowing drops nothing the consumer asks for: every event it wants was delivered up to the position
(under the wider subscription), so it continues from there and records the narrower coverage at its
next save. Widening (a table, partition or member added) is refused (``SubscriptionMismatchError``):
what was added was never delivered, and only a bootstrap of its own can bring it. A position written
before coverage was recorded covers whatever it is used with; it records the subscription at its next
save.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster_databus.consumer.filters import PartitionFilter
from dagster_databus.consumer.groups import GroupMember


@dataclass(frozen=True, slots=True)
class Coverage:
    """A subscription as a position records it. ``tables`` None: every table of the source; ``filter`` a
    canonical ``PartitionFilter.spec``; ``group`` ``"index/size"``."""

    source: str
    tables: tuple[str, ...] | None = None
    filter: str | None = None
    group: str | None = None

    @classmethod
    def of(cls, source: str, tables: Sequence[str] | None = None,
           partition_filter: PartitionFilter | str | None = None,
           group: GroupMember | str | None = None) -> Coverage:
        """The coverage of a subscription (filters and groups parsed and written in their canonical form)."""
        spec = PartitionFilter.parse(partition_filter) if isinstance(partition_filter, str) else partition_filter
        member = GroupMember.parse(group) if isinstance(group, str) else group
        return cls(source=source, tables=tuple(tables) if tables else None,
                   filter=spec.spec if spec is not None else None,
                   group=f"{member.index}/{member.size}" if member is not None else None)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "tables": list(self.tables) if self.tables is not None else None,
                "filter": self.filter, "group": self.group}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Coverage:
        tables = doc.get("tables")
        return cls(source=doc["source"], tables=tuple(tables) if tables is not None else None,
                   filter=doc.get("filter"), group=doc.get("group"))

    def describe(self) -> str:
        """``source 'shop', tables orders, customers, filter mod:10:[1,3]``: what is subscribed to."""
        parts = [f"source {self.source!r}",
                 f"tables {', '.join(self.tables)}" if self.tables is not None else "every table",
                 f"filter {self.filter}" if self.filter else "no filter"]
        if self.group:
            parts.append(f"group member {self.group}")
        return ", ".join(parts)

    def gaps(self, wanted: Coverage) -> list[str]:
        """What ``wanted`` asks for that this coverage never delivered, one phrase each; empty when ``wanted``
        is within it (the same subscription, or a narrower one)."""
        if wanted.source != self.source:
            return [f"it is of source {self.source!r}, not {wanted.source!r}"]
        gaps: list[str] = []
        if self.tables is not None:
            if wanted.tables is None:
                gaps.append(f"every table is asked for, but it covers only {', '.join(self.tables)}")
            elif added := [t for t in wanted.tables if t not in self.tables]:
                gaps.append(f"table{'s' if len(added) > 1 else ''} {', '.join(added)} "
                            f"{'were' if len(added) > 1 else 'was'} never delivered with it")
        if self.filter is not None:
            if wanted.filter is None:
                gaps.append(f"every partition is asked for, but it covers only filter {self.filter}")
            elif not PartitionFilter.parse(wanted.filter).within(PartitionFilter.parse(self.filter)):
                gaps.append(f"filter {wanted.filter} accepts keys that filter {self.filter}, which it covers, "
                            "does not")
        if self.group is not None:
            if wanted.group is None:
                gaps.append(f"every key is asked for, but it covers only group member {self.group}")
            elif not member_within(wanted.group, self.group):
                gaps.append(f"group member {wanted.group} owns keys that member {self.group}, which it covers, "
                            "does not")
        return gaps

    def same_as(self, other: Coverage) -> bool:
        """Whether the two cover the same events (each within the other): table order aside, say."""
        return not self.gaps(other) and not other.gaps(self)


def member_within(member: str, covered: str) -> bool:
    """Member i of n owns ``crc32(key) % n == i``, which fixes ``crc32(key) % m`` as ``i % m`` when m divides n
    (both written ``"index/size"``, as ``Coverage.of`` writes them)."""
    index, size = (int(x) for x in member.split("/"))
    covered_index, covered_size = (int(x) for x in covered.split("/"))
    return size % covered_size == 0 and index % covered_size == covered_index
