"""Events/s delivered to a no-op callback consumer vs a bare fastavro read of the same segments
(the floor), without and with a partition filter."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import fastavro

from benchmarks.common import best_of
from dagster_databus.consumer.client import DatabusClient, DatabusConsumer
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.log.changelog import ChangeLog

SCHEMA = TableSchema("b", "items", (Column("id", ColumnType("long")), Column("name", ColumnType("string")),
                                    Column("price", ColumnType("double")),
                                    Column("qty", ColumnType("long"))), ("id",))


def main(rows: int = 200_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-consumer-"))
    try:
        per_window = 1_000
        with ChangeLog(work, "b").writer() as writer:
            writer.register_schemas([SCHEMA])
            for start in range(0, rows, 20 * per_window):
                windows = []
                for w in range(start, min(rows, start + 20 * per_window), per_window):
                    events = tuple(ChangeEvent(Scn(i + 1), i - w, "items", Op.UPDATE, (i,),
                                               {"id": i, "name": f"item {i}", "price": i * 0.5, "qty": i % 97}, 0)
                                   for i in range(w, w + per_window))
                    windows.append(Window(scn=events[-1].scn, events=events))
                writer.append(windows, "epoch")
        log = ChangeLog(work, "b")
        files = [log.segments_dir / s.file for s in log.manifest().segments]

        def bare() -> None:
            n = 0
            for path in files:
                with open(path, "rb") as f:
                    for _ in fastavro.reader(f):
                        n += 1
            assert n == rows

        def deliver(spec: str | None) -> None:
            DatabusClient(work, "b", DatabusConsumer(), partition_filter=spec, bootstrap=False).run()

        floor = best_of(bare)
        print(f"\nConsumer delivery ({rows:,} events in windows of {per_window:,})")
        print(f"  {'bare fastavro read of the segments':<44}{floor:8.3f}s {rows / floor:>12,.0f} events/s")
        for label, spec, share in (("no-op callbacks, no filter", None, 1.0),
                                   ("no-op callbacks, filter mod:4:[0]", "mod:4:[0]", 0.25)):
            seconds = best_of(lambda spec=spec: deliver(spec))
            print(f"  {label:<44}{seconds:8.3f}s {rows / seconds:>12,.0f} events/s scanned "
                  f"({rows * share / seconds:,.0f} delivered)   takes {seconds / floor:5.2f}x the floor")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
