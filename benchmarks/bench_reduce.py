"""The in-process reduce (``dataplane.reduce.NewestPerKey``) of a change set with inserts, updates, deletes and
key changes: the state at each transaction's commit (``at_commit``, what the merges use) beside the newest event
per key (the floor: one hash group-by), on the same events.

Run alone: ``python -m benchmarks.bench_reduce [events] [pct_key_changes]``.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa

from benchmarks.common import best_of, report
from dagster_databus.core.event_columns import CHANGE_META
from dagster_databus.dataplane.reduce import NewestPerKey

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()), *(pa.field(n, t) for n, t in CHANGE_META)])


def changes(events: int, pct_key_changes: float, seed: int = 7) -> list[pa.RecordBatch]:
    """Transactions of 1..8 events over ``events // 4`` keys: updates, and a share of key changes (a delete of the
    old key then an insert of the new one: the events the count at commit must look into)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, max(events // 4, 1), events)
    ops = np.where(rng.random(events) < pct_key_changes / 100, "d", "u").astype(object)
    moved = np.flatnonzero(ops == "d")
    ops[np.minimum(moved + 1, events - 1)] = "i"  # the new key of each key change
    sizes = rng.integers(1, 9, events)
    scn = np.repeat(np.arange(events), sizes)[:events] + 1
    seq = np.arange(events) - np.searchsorted(scn, scn)
    table = pa.table({"id": keys, "v": rng.random(events), "__scn": scn, "__seq": seq.astype(np.int32),
                      "__window_scn": scn, "__op": pa.array(ops, pa.string()),
                      "__commit_ts_ms": scn, "__partition": (keys & 0xFFFF).astype(np.int32)}, schema=SCHEMA)
    return table.to_batches(max_chunksize=65_536)


def reduce(batches: list[pa.RecordBatch], at_commit: bool) -> int:
    reducer = NewestPerKey(SCHEMA, ["id"], at_commit=at_commit).extend(batches)
    return sum(b.num_rows for b in reducer.results())


def main(events: int = 2_000_000, pct_key_changes: float = 5.0) -> None:
    batches = changes(events, pct_key_changes)
    ours = best_of(lambda: reduce(batches, at_commit=True))
    floor = best_of(lambda: reduce(batches, at_commit=False))
    report(f"reduce at commit, {pct_key_changes:g}% key changes", events, ("state at commit (at_commit)", ours),
           ("newest event per key (floor)", floor))


if __name__ == "__main__":
    main(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (), *(float(a) for a in sys.argv[2:3]))
