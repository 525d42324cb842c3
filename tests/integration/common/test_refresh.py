"""On-demand snapshots of chosen rows (``dataplane.refresh``): a key range or a filter read again from the
source and folded into a snapshot that is kept, on every source kind that runs here and both engines. The
snapshot is damaged behind the log's back (as a restore from an old backup, or a fix made with the binlog
off, would leave it); reading the range again repairs exactly that range, while the log goes on."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_databus import capture
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.errors import ConfigError
from dagster_databus.sources import open_source, read_rows
from dagster_databus.sync.merge import sync_source
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import SourceHarness, make_config

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]


def damaged(config, table: str, key: str) -> tuple[DeltaSnapshot, list[int]]:
    """The snapshot of ``table`` with its first keys damaged: one row gone, one changed, and one row the
    source never had (key 0)."""
    snap = DeltaSnapshot(config.lake, "shop", table)
    keys = sorted(snap.read().column(key).to_pylist())
    dt = DeltaTable(snap.uri, storage_options=snap.storage_options)
    dt.delete(f"{key} = {keys[0]}")
    dt.update(predicate=f"{key} = {keys[1]}", updates={"total": "-1"})
    ghost = snap.read().filter(snap.read().column(key).to_numpy() == keys[2]).to_pylist()[0]
    ghost |= {key: 0, "__scn": 1}
    write_deltalake(dt, _table(snap, [ghost]), mode="append")
    return snap, keys


def _table(snap: DeltaSnapshot, rows: list[dict]):
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=snap.arrow_schema())


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_a_key_range_read_again_repairs_that_range_and_leaves_the_rest(source: SourceHarness, tmp_path: Path,
                                                                       lazy_spark, engine: str) -> None:
    source.create_shop()
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP), merge={"engine": engine})
    workload = source.workload(seed=11)
    workload.run(60)
    cycle(config, lazy_spark)
    snap, keys = damaged(config, "orders", "id")
    workload.run(20)  # the log goes on over the damage
    cycle(config, lazy_spark)
    upper = keys[len(keys) // 2]
    outside = max(snap.read().column("id").to_pylist())
    DeltaTable(snap.uri, storage_options=snap.storage_options).update(predicate=f"id = {outside}",
                                                                      updates={"total": "-2"})
    applied = snap.applied_scn()
    rows = capture.row_selection(config, "shop", ["orders"], after=[-1], through=[upper])
    [result] = sync_source(lazy_spark, config, "shop", ["orders"], mode="refresh", rows=rows)
    refreshed = result.refreshed
    assert refreshed is not None and refreshed.deletes_checked and refreshed.ranges >= 1
    source_rows = {r["id"]: r for r in read_rows(open_source(config.source("shop")), "orders")}
    in_range = {k for k in source_rows if k <= upper}
    assert refreshed.rows_read == len(in_range) and refreshed.deletes_found == 1  # the ghost
    assert snap.applied_scn() == applied == result.to_scn  # the refresh keeps the applied SCN
    held = {r["id"]: r for r in snap.read().to_pylist()}
    assert 0 not in held
    for k in in_range:
        assert {c: held[k][c] for c in source_rows[k]} == source_rows[k], k
    assert outside > upper and held[outside]["total"] == -2  # outside the range: not read, so still damaged
    # The log goes on over the rows read: later changes apply as usual, and the damage outside the range is
    # all a whole refresh still has to repair.
    workload.run(20)
    cycle(config, lazy_spark)
    [whole] = sync_source(lazy_spark, config, "shop", ["orders"], mode="refresh")
    assert whole.refreshed is not None and whole.refreshed.rows_read == len(read_rows(
        open_source(config.source("shop")), "orders"))
    assert_snapshots_match(config)


def test_a_filter_reads_only_matching_rows_and_a_bad_one_is_refused_before_anything_is_read(
        source: SourceHarness, tmp_path: Path, spark) -> None:
    source.create_shop()
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP))
    source.workload(seed=12).run(60)
    cycle(config, spark)
    snap = DeltaSnapshot(config.lake, "shop", "orders")
    DeltaTable(snap.uri, storage_options=snap.storage_options).update(updates={"total": "-1"})
    rows = capture.row_selection(config, "shop", ["orders"], where="status = 'shipped'")
    [result] = sync_source(spark, config, "shop", ["orders"], mode="refresh", rows=rows)
    shipped = {r["id"]: r for r in read_rows(open_source(config.source("shop")), "orders") if r["status"] == "shipped"}
    assert shipped, "the workload ships some orders"
    assert result.refreshed is not None and not result.refreshed.deletes_checked
    assert result.refreshed.rows_read == len(shipped)
    held = {r["id"]: r for r in snap.read().to_pylist()}
    assert all(held[k]["total"] == r["total"] for k, r in shipped.items())
    assert all(r["total"] == -1 for k, r in held.items() if k not in shipped)  # the others were not read
    version = snap.version()
    for where, problem in [("no_such_column = 1", "cannot select"), ("1 = 1; DROP TABLE orders", "holds a ';'"),
                           ("(status = 'new'", "parenthesis open"), ("status = 'x' -- c", "comment")]:
        with pytest.raises(ConfigError, match=problem):
            sync_source(spark, config, "shop", ["orders"], mode="refresh",
                        rows=capture.row_selection(config, "shop", ["orders"], where=where))
    with pytest.raises(ConfigError, match=r"exactly one table"):
        capture.row_selection(config, "shop", ["orders", "customers"], where="1 = 1")
    with pytest.raises(ConfigError, match=r"one value per key column"):
        capture.row_selection(config, "shop", ["order_items"], after=[1])
    with pytest.raises(ConfigError, match=r"'x' is not a value of key column 'id'"):
        capture.row_selection(config, "shop", ["orders"], through=["x"])
    assert snap.version() == version


def test_the_keys_held_in_a_range_follow_key_order_over_every_key_column(tmp_path: Path) -> None:
    """Which of the snapshot's keys a range holds decides which become deletes: (after, through] in the
    order of (order_id, line_no), as the source's row-value comparison orders them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagster_databus.dataplane.files import TableFile, TableFiles, TableLocation
    from dagster_databus.dataplane.refresh import RangeChanges
    from dagster_databus.sources.base import KeyRange
    from dagster_databus.storage.lake import Lake

    keys = [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 1), (4, 0)]
    target = pa.schema([("order_id", pa.int64()), ("line_no", pa.int64()), ("__scn", pa.int64())])
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(pa.table({"order_id": [k[0] for k in keys], "line_no": [k[1] for k in keys],
                             "__scn": [1] * len(keys)}), folder / "a.parquet")
    files = TableFiles([TableFile("a.parquet", 1, len(keys), (1, 0), (4, 3))], ["order_id", "line_no"],
                       [pa.int64(), pa.int64()])
    changes = RangeChanges(target, target, ("order_id", "line_no"), True)
    location = TableLocation(Lake.parse(str(tmp_path)).spec(), "t")

    def held(after, through) -> list[tuple[int, int]]:
        table = changes.held(KeyRange(after, through), location, files)
        return list(zip(table.column("order_id").to_pylist(), table.column("line_no").to_pylist(), strict=True))

    assert held((1, 2), (2, 3)) == [(2, 1), (2, 2), (2, 3)]
    assert held((2, 1), (3, 1)) == [(2, 2), (2, 3), (3, 1)]
    assert held(None, (1, 2)) == [(1, 1), (1, 2)]
    assert held((3, 1), None) == [(4, 0)]
    assert held((5, 0), None) == []
