"""What a delete does to a snapshot, by option (``tables[].deletes``): ``apply`` removes the row; ``soft`` keeps it,
marked ``__op = 'd'`` with the delete's SCN, and every reader of current rows (the snapshot's own reads, the
reconciliation, consumer bootstrap, history and logical loads) passes over it. SQLite and MariaDB, both engines."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from dagster_databus.consumer.history import as_of
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sync.merge import sync_source
from dagster_databus.sync.reconcile import reconcile_table
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import SourceHarness, make_config


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_soft_deletes_keep_the_row_marked_and_readers_pass_over_it(source: SourceHarness, tmp_path: Path,
                                                                    engine: str, lazy_spark) -> None:
    source.execute(["CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(32), qty INTEGER)",
                    *[f"INSERT INTO items VALUES ({i}, 'item {i}', {i})" for i in range(1, 31)]])
    document = source.source_config("shop", [("items", ["id"])], change_data_feed=True)
    document["tables"][0].update(deletes="soft", history=True)
    config = make_config(tmp_path / "lake", document, merge={"engine": engine, "file_rows": 8})
    cycle(config, lazy_spark)
    source.execute(["UPDATE items SET qty = 100 WHERE id = 5"])
    cycle(config, lazy_spark)
    source.execute(["DELETE FROM items WHERE id IN (5, 6, 7, 25)",
                    "DELETE FROM items WHERE id = 999", "INSERT INTO items VALUES (40, 'new', 1)"])
    result = cycle(config, lazy_spark)[0]
    source.execute(["INSERT INTO items VALUES (6, 'back', 2)"])
    cycle(config, lazy_spark)
    assert result.counts.deleted == 4
    snap = DeltaSnapshot(config.lake, "shop", "items")
    raw = {r["id"]: r for r in snap.delta().to_pyarrow_table().to_pylist()}
    deleted = {k for k, r in raw.items() if r["__op"] == "d"}
    assert deleted == {5, 7, 25}
    # The marked row keeps the last values the snapshot held, and carries the delete's SCN.
    assert raw[5]["qty"] == 100 and raw[5]["name"] == "item 5" and raw[6]["name"] == "back"
    scn_of_delete = max(e.event.scn.value for e in ChangeLog(config.lake, "shop").read() if e.event.key == (25,))
    assert raw[25]["__scn"] == scn_of_delete
    assert_snapshots_match(config)  # the snapshot's reads: current rows only
    assert snap.row_count() == len(raw) - 3
    assert reconcile_table(config, config.sources[0], "items").equal
    # A history started again from the snapshot (a rebuild) starts from its current rows only.
    cycle(config, lazy_spark)
    sync_source(lazy_spark, config, "shop", mode="rebuild")
    current = as_of(config.lake, "shop", "items", scn=snap.applied_scn())
    assert sorted(current["id"].to_pylist()) == sorted(k for k in raw if k not in deleted)
    # The change feed saw each soft delete as what it did to the table: an update of the row.
    delta = snap.delta()
    feed = pa.table(delta.load_cdf(starting_version=delta.version() - 1).read_all()).to_pylist()
    marked = [r for r in feed if r["id"] == 25]
    assert {r["_change_type"] for r in marked} == {"update_preimage", "update_postimage"}


def test_a_snapshots_row_count_is_read_from_the_delta_log_unless_a_file_may_hold_a_soft_delete(tmp_path: Path) -> None:
    """``row_count`` (the snapshot_rows of every sync) sums the files' counts from the Delta log when no file's
    ``__op`` bounds allow a 'd': it stays right with the data files gone, so it read none. A file whose bounds
    allow one is scanned, and its marked rows are not counted."""
    from deltalake import write_deltalake

    def rows(ops: str, first: int) -> pa.Table:
        return pa.table({"id": pa.array(range(first, first + len(ops)), pa.int64()),
                         "__scn": pa.array([7] * len(ops), pa.int64()), "__op": pa.array(list(ops))})

    snap = DeltaSnapshot(tmp_path / "lake", "shop", "items")
    write_deltalake(snap.uri, rows("iiu", 0))
    write_deltalake(snap.uri, rows("uuiu", 10), mode="append")
    for data in Path(snap.uri).glob("*.parquet"):
        data.unlink()
    assert snap.row_count() == 7
    soft = DeltaSnapshot(tmp_path / "lake", "shop", "soft")
    write_deltalake(soft.uri, rows("iiu", 0))
    write_deltalake(soft.uri, rows("udid", 10), mode="append")
    assert soft.row_count() == 5
