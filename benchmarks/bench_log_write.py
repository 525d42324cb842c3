"""Change-log append (Avro, zstandard, fsync, manifest) vs writing the same rows as Arrow IPC."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from benchmarks.common import best_of, report
from dagster_databus.core.batch import ChangeBatch
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.log.changelog import ChangeLog

SCHEMA = TableSchema("b", "items", (Column("id", ColumnType("long")), Column("name", ColumnType("string")),
                                    Column("price", ColumnType("double")),
                                    Column("qty", ColumnType("long"))), ("id",))


def main(rows: int = 200_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-log-"))
    per_window = 1_000
    windows = []
    for w in range(rows // per_window):
        events = tuple(ChangeEvent(Scn(i + 1), i - w * per_window, "items", Op.UPDATE, (i,),
                                   {"id": i, "name": f"item {i}", "price": i * 0.5, "qty": i % 97}, 1_700_000_000_000)
                       for i in range(w * per_window, (w + 1) * per_window))
        windows.append(Window(scn=events[-1].scn, events=events))
    table = pa.table({"id": list(range(rows)), "name": [f"item {i}" for i in range(rows)],
                      "price": [i * 0.5 for i in range(rows)], "qty": [i % 97 for i in range(rows)],
                      "scn": list(range(1, rows + 1))})

    def ours() -> None:
        shutil.rmtree(work / "lake", ignore_errors=True)
        with ChangeLog(work / "lake", "b").writer() as writer:
            writer.register_schemas([SCHEMA])
            for start in range(0, len(windows), 20):
                writer.append(windows[start:start + 20], "epoch")

    batches = [ChangeBatch.from_windows(windows[start:start + 20], {"items": SCHEMA})
               for start in range(0, len(windows), 20)]

    def ours_columnar() -> None:
        shutil.rmtree(work / "lake", ignore_errors=True)
        with ChangeLog(work / "lake", "b").writer() as writer:
            writer.register_schemas([SCHEMA])
            for batch in batches:
                writer.append_batch(batch, "epoch")

    def arrow() -> None:
        with open(work / "rows.arrow", "wb") as f, ipc.new_file(f, table.schema) as out:
            out.write_table(table, max_chunksize=20_000)

    arrow_s = best_of(arrow)
    report("Change-log write, columnar batches (capture's path)", rows,
           ("Avro segments + manifest + checkpoint", best_of(ours_columnar)), ("Arrow IPC file (pyarrow)", arrow_s))
    report("Change-log write, Window objects (converted to batches)", rows,
           ("Avro segments + manifest + checkpoint", best_of(ours)), ("Arrow IPC file (pyarrow)", arrow_s))
    shutil.rmtree(work)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
