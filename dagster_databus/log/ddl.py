"""The DDL log beside a change log (Roma's DDL isolation): schema statements on captured tables,
kept out of the row-event stream. ``<lake>/log/<source>/ddl.json``, rewritten atomically."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dagster_databus.core.scn import Scn
from dagster_databus.log.durable import write_json_atomic


@dataclass(frozen=True, slots=True)
class DdlRecord:
    scn: Scn  # the position just after the statement
    table: str
    statement: str


class DdlLog:
    def __init__(self, root: Path) -> None:
        self.path = root / "ddl.json"

    def records(self) -> list[DdlRecord]:
        if not self.path.exists():
            return []
        return [DdlRecord(Scn.parse(r["scn"]), r["table"], r["statement"]) for r in json.loads(self.path.read_text())]

    def record(self, entries: Iterable[tuple[Scn, str, str]]) -> None:
        """Add statements not yet recorded; a re-read after a crash adds nothing twice."""
        existing = self.records()
        known = {(r.scn, r.table) for r in existing}
        new = [DdlRecord(scn, table, stmt) for scn, table, stmt in entries if (scn, table) not in known]
        if new:
            write_json_atomic(self.path, [{"scn": str(r.scn), "table": r.table, "statement": r.statement}
                                          for r in [*existing, *new]])

    def last_for(self, table: str) -> DdlRecord | None:
        matching = [r for r in self.records() if r.table == table]
        return max(matching, key=lambda r: r.scn) if matching else None
