"""Compare a source table with its snapshot, row by row (used by the demo and the tests)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Comparison:
    table: str
    source_rows: int
    snapshot_rows: int
    missing: int  # in the source, not in the snapshot
    extra: int  # in the snapshot, not in the source
    different: int  # same key, different values
    examples: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return self.missing == self.extra == self.different == 0


def compare_rows(table: str, key: Sequence[str], source: Iterable[Mapping[str, Any]],
                 snapshot: Iterable[Mapping[str, Any]]) -> Comparison:
    def index(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r[k] for k in key): {c: v for c, v in r.items() if not c.startswith("__")} for r in rows}

    src, snap = index(source), index(snapshot)
    missing = [k for k in src if k not in snap]
    extra = [k for k in snap if k not in src]
    different = [k for k in src if k in snap and src[k] != snap[k]]
    examples = tuple(
        [f"missing {k}" for k in missing[:3]] + [f"extra {k}" for k in extra[:3]]
        + [f"differs {k}: source {src[k]} vs snapshot {snap[k]}" for k in different[:3]]
    )
    return Comparison(table=table, source_rows=len(src), snapshot_rows=len(snap), missing=len(missing),
                      extra=len(extra), different=len(different), examples=examples)
