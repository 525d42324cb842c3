"""A load generator whose every change carries a unique, increasing operation id, and a checker
that proves nothing acknowledged was lost and nothing unacknowledged appeared."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from dagster_databus.config import DatabusConfig
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.harness import SourceHarness

TABLE = "kv"
DDL = "CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL, payload VARCHAR(64))"


class LoadGenerator:
    """Transactions of upserts and deletes on ``kv``; ``v`` holds the id of the op that wrote the row."""

    def __init__(self, harness: SourceHarness, keys: int = 300, seed: int = 1) -> None:
        self.harness = harness
        self.keys = keys
        self.rng = random.Random(seed)
        self.next_op = 1
        self.state: dict[int, int] = {}  # key -> op id of its acknowledged current row
        self.acknowledged: set[int] = set()

    def run(self, transactions: int, per_txn: int = 5) -> None:
        for _ in range(transactions):
            statements: list[tuple[str, tuple[Any, ...]]] = []
            pending = dict(self.state)
            ops = []
            for _ in range(per_txn):
                op, key = self.next_op, self.rng.randrange(self.keys)
                self.next_op += 1
                ops.append(op)
                if key in pending and self.rng.random() < 0.25:
                    statements.append(("DELETE FROM kv WHERE k = ?", (key,)))
                    del pending[key]
                elif key in pending:
                    statements.append(("UPDATE kv SET v = ?, payload = ? WHERE k = ?", (op, f"p{op}", key)))
                    pending[key] = op
                else:
                    statements.append(("INSERT INTO kv VALUES (?, ?, ?)", (key, op, f"p{op}")))
                    pending[key] = op
            self.harness.execute(statements)  # returns once committed: acknowledged
            self.state = pending
            self.acknowledged.update(ops)


@dataclass(frozen=True, slots=True)
class Report:
    lost: list[int]  # keys whose acknowledged row is missing or older in the snapshot
    phantom: list[int]  # keys in the snapshot holding a never-acknowledged op, or that should be gone
    duplicates: int  # change-log events carrying an op id already seen (re-read windows)
    equal_at_one_scn: bool

    @property
    def clean(self) -> bool:
        return not self.lost and not self.phantom and self.equal_at_one_scn


def check(config: DatabusConfig, generator: LoadGenerator, source: str = "faults") -> Report:
    rows = {r["k"]: r["v"] for r in DeltaSnapshot(config.lake, source, TABLE).read().to_pylist()}
    lost = sorted(k for k, op in generator.state.items() if rows.get(k) != op)
    phantom = sorted(k for k, op in rows.items() if op not in generator.acknowledged or k not in generator.state)
    seen = Counter(e.event.row["v"] for e in ChangeLog(config.lake, source).read(tables=[TABLE])
                   if e.event.op.value != "d")
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    equal = reconcile_table(config, config.source(source), TABLE).equal
    return Report(lost, phantom, duplicates, equal)
