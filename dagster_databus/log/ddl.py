"""The DDL log beside a change log (Roma's DDL isolation): schema statements on captured tables,
kept out of the row-event stream. One object per statement, ``<lake>/log/<source>/ddl/<scn>-<table>.json``,
created only if absent, so a re-read after a crash or two writers at once record nothing twice.
Logs written before kept them all in ``ddl.json``; it is still read (``log.compat``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_databus.core.scn import Scn
from dagster_databus.log.compat import ddl_records_v0

if TYPE_CHECKING:
    from dagster_databus.storage.lake import Lake


@dataclass(frozen=True, slots=True)
class DdlRecord:
    scn: Scn  # the position just after the statement
    table: str
    statement: str


class DdlLog:
    def __init__(self, lake: Lake, prefix: str) -> None:
        self.lake = lake
        self.prefix = prefix  # ends in '/': the records' folder

    def records(self) -> list[DdlRecord]:
        objects = self.lake.objects
        docs = ddl_records_v0(objects, self.prefix)
        for info in objects.list(self.prefix):
            data = objects.read(info.key)
            if data is not None:
                docs.append(json.loads(data))
        found = {(r["scn"], r["table"]): DdlRecord(Scn.parse(r["scn"]), r["table"], r["statement"]) for r in docs}
        return sorted(found.values(), key=lambda r: (r.scn, r.table))

    def record(self, entries: Iterable[tuple[Scn, str, str]]) -> None:
        """Add statements not yet recorded; a re-read after a crash adds nothing twice."""
        for scn, table, statement in entries:
            self.lake.objects.create(f"{self.prefix}{scn.value:020d}-{table}.json",
                                     json.dumps({"scn": str(scn), "table": table, "statement": statement}).encode())

    def last_for(self, table: str) -> DdlRecord | None:
        matching = [r for r in self.records() if r.table == table]
        return max(matching, key=lambda r: r.scn) if matching else None
