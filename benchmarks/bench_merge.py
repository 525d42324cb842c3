"""Merge of changed rows into a Delta snapshot: ours (log read + reduce + streamed delta-rs MERGE) vs a
bare delta-rs MERGE of pre-reduced rows vs rewriting the final table with pyarrow (the floor), and
the process's peak memory growth for ours and for the bare MERGE beside the change set's size."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from benchmarks.common import best_of, peak_rss_growth, report
from dagster_databus.config import parse_config
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.log.store import ChangeLog
from dagster_databus.snapshot.delta import DeltaRsEngine, DeltaSnapshot, with_meta
from dagster_databus.snapshot.merge import sync_table
from dagster_databus.spark.session import get_spark

SCHEMA = TableSchema("b", "items", (Column("id", ColumnType("long")), Column("name", ColumnType("string")),
                                    Column("price", ColumnType("double"))),
                     ("id",))


def main(rows: int = 1_000_000, changed_pct: float = 10.0) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-merge-"))
    config = parse_config({"lake": str(work / "lake"), "sources": [
        {"name": "b", "kind": "sqlite", "path": str(work / "unused.db"),
         "tables": [{"name": "items", "primary_key": ["id"]}]}]}, base=work)
    base = pa.table({"id": pa.array(range(rows), pa.int64()), "name": [f"n{i}" for i in range(rows)],
                     "price": [float(i) for i in range(rows)]})
    changed = int(rows * changed_pct / 100)
    # Two updates per changed key, so the reduce has work to do.
    events = [ChangeEvent(Scn(n + 1), n, "items", Op.UPDATE, (k,), {"id": k, "name": f"u{n}", "price": -1.0}, 0)
              for n, k in enumerate([*range(0, rows, rows // changed)] * 2)]
    with ChangeLog(config.lake, "b").writer() as writer:
        writer.register_schemas([SCHEMA])
        writer.append([Window(scn=events[-1].scn, events=tuple(events))], "e")
    reduced = {e.key[0]: e for e in events}
    final_changes = pa.table({"id": list(reduced), "name": [e.row["name"] for e in reduced.values()],
                              "price": [-1.0] * len(reduced)})
    snap = DeltaSnapshot(config.lake, "b", "items")

    def fresh_snapshot() -> None:
        shutil.rmtree(snap.path, ignore_errors=True)
        DeltaRsEngine().bootstrap(snap, SCHEMA, iter(base.to_batches(max_chunksize=200_000)), Scn(0))

    spark = get_spark(config.spark)

    def ours() -> None:
        sync_table(spark, config, config.sources[0], "items", DeltaRsEngine())

    def bare_merge() -> None:
        meta = pa.Table.from_batches([with_meta(b, Scn(len(events)), "u", 0) for b in final_changes.to_batches()])
        (DeltaTable(str(snap.path)).merge(meta, predicate="t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().execute())

    # First runs, so neither reuses pages the other freed: the bare MERGE first, then ours.
    fresh_snapshot()
    bare_growth = peak_rss_growth(bare_merge)
    fresh_snapshot()
    growth = peak_rss_growth(ours)

    def rewrite() -> None:
        keep = base.filter(pa.compute.invert(pa.compute.is_in(base["id"], final_changes["id"])))
        pq.write_table(pa.concat_tables([keep, final_changes]), work / "rewrite.parquet")

    mine = best_of(ours, setup=fresh_snapshot)
    peer = best_of(bare_merge, setup=fresh_snapshot)
    floor = best_of(rewrite)
    report(f"Merge {changed_pct:g}% changed ({len(events):,} events, {changed:,} keys) into the snapshot", rows,
           ("ours: log read + reduce + MERGE", mine), ("bare delta-rs MERGE, pre-reduced", peer),
           ("pyarrow rewrite of the final table", floor))
    print(f"  driver memory: peak +{growth / 2**20:,.0f} MiB during ours, +{bare_growth / 2**20:,.0f} MiB during "
          f"the bare MERGE; the change set is {len(events):,} events, the reduced set "
          f"{final_changes.nbytes / 2**20:,.0f} MiB in Arrow ({len(reduced):,} rows)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000, float(sys.argv[2]) if len(sys.argv) > 2 else 10.0)
