"""Data files written by Spark tasks: their Delta statistics are bounds delta-rs parses exactly and prunes by
correctly (a filter on a file's minimum or maximum finds the row; a MERGE on the maximum key updates instead
of inserting a duplicate), and the routing of keys to the files that may hold them."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from dagster_databus.dataplane.commit import commit_files, location
from dagster_databus.dataplane.delta import DeltaFolder
from dagster_databus.dataplane.files import STRING_STATS_CHARS, FileWriter, TableFile, TableFiles, delta_stats
from dagster_databus.storage.lake import Lake

D = decimal.Decimal
UTC = dt.UTC

EDGES = pa.table({
    "flag": pa.array([True, False, None]),
    "tiny": pa.array([-128, 127, None], pa.int8()),
    "small": pa.array([-32768, 32767, 0], pa.int16()),
    "int": pa.array([-2**31, 2**31 - 1, None], pa.int32()),
    "long": pa.array([-2**63, 2**63 - 1, 0], pa.int64()),
    "real": pa.array([0.3, -1.5, None], pa.float32()),
    "double": pa.array([-0.0, 1e308, 5e-324], pa.float64()),
    "inf": pa.array([math.inf, -math.inf, 1.0], pa.float64()),
    "money": pa.array([D("-99999999.99"), D("0.01"), D("12.50")], pa.decimal128(10, 2)),
    "wide": pa.array([D(10**37 + 1), D(-(10**37)), D(0)], pa.decimal128(38, 0)),
    "text": pa.array(["", "zé\U0001F600", "a" * 100], pa.string()),
    "blob": pa.array([b"\x00", b"\xff" * 3, None], pa.binary()),
    "day": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None], pa.date32()),
    "at": pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC), dt.datetime(1, 1, 1, tzinfo=UTC),
                    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
    "local": pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 123456), dt.datetime(1, 1, 1),
                       dt.datetime(1999, 12, 31, 23, 59, 59, 999001)], pa.timestamp("us")),
    "empty": pa.nulls(3, pa.string()),
})


def written(tmp_path: Path, data: pa.Table, file_rows: int = 100) -> tuple[DeltaFolder, list]:
    folder = DeltaFolder(Lake.parse(str(tmp_path / "lake")), "t")
    files = FileWriter(location(folder), data.schema, file_rows, "test").write(data.to_batches())
    from deltalake import CommitProperties

    commit_files(folder, data.schema, files, CommitProperties(), "test")
    return folder, files


def test_statistics_hold_every_type_exactly_and_delta_rs_reads_them_back(tmp_path: Path) -> None:
    folder, files = written(tmp_path, EDGES)
    stats = json.loads(files[0].stats)
    assert stats["numRecords"] == 3
    assert stats["nullCount"] == {c: EDGES[c].null_count for c in EDGES.column_names}
    assert "blob" not in stats["minValues"] and "empty" not in stats["minValues"]
    assert stats["minValues"]["at"] == "0001-01-01T00:00:00.000000Z"
    assert stats["maxValues"]["at"] == "9999-12-31T23:59:59.999999Z"
    assert stats["maxValues"]["local"] == "2020-01-01 00:00:00.123456"
    assert stats["minValues"]["double"] == -0.0 and math.copysign(1, stats["minValues"]["double"]) < 0
    assert stats["maxValues"]["inf"] == "Infinity" and stats["minValues"]["inf"] == "-Infinity"
    parsed = pa.table(folder.delta().get_add_actions(flatten=True)).to_pylist()[0]
    for column in ["tiny", "small", "int", "long", "money", "wide", "day", "at", "local"]:
        values = [v for v in EDGES[column].to_pylist() if v is not None]
        assert parsed[f"min.{column}"] == min(values), column
        assert parsed[f"max.{column}"] == max(values), column


@pytest.mark.parametrize("column", ["tiny", "small", "int", "long", "real", "double", "money", "wide", "text", "day",
                                    "at", "local"])
def test_a_filter_on_a_files_minimum_or_maximum_finds_the_row(tmp_path: Path, column: str) -> None:
    folder, _ = written(tmp_path, EDGES)
    dataset = folder.delta().to_pyarrow_dataset()
    for value in pc.min_max(EDGES[column]).values():
        found = dataset.to_table(filter=pc.field(column) == value).column(column).to_pylist()
        assert found == [value.as_py()], (column, value)


@pytest.mark.parametrize("kind, keys", [
    (pa.int64(), [-(2**63), 5, 2**63 - 1]),
    (pa.decimal128(38, 0), [D(-(10**37)), D(7), D(10**37 + 1)]),
    (pa.string(), ["a", "b" * 80, "\U0010FFFF" * 70]),
    (pa.date32(), [dt.date(1, 1, 1), dt.date(2000, 2, 29), dt.date(9999, 12, 31)]),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(1970, 1, 1, tzinfo=UTC),
                                    dt.datetime(2020, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
                                    dt.datetime(2020, 1, 1, 0, 0, 0, 999999, tzinfo=UTC)]),
])
def test_a_delta_rs_merge_on_a_files_extreme_keys_updates_rather_than_duplicates(tmp_path: Path, kind, keys) -> None:
    data = pa.table({"k": pa.array(keys, kind), "v": [1, 2, 3]})
    folder, _ = written(tmp_path, data)
    source = pa.table({"k": pa.array([keys[0], keys[-1]], kind), "v": [10, 30]})
    metrics = (folder.delta().merge(source, predicate="t.k = s.k", source_alias="s", target_alias="t",
                                    streamed_exec=False)  # the MERGE that prunes files by statistics
               .when_matched_update_all().when_not_matched_insert_all().execute())
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"]) == (2, 0)
    assert sorted(DeltaTable(folder.uri).to_pyarrow_table()["v"].to_pylist()) == [2, 10, 30]


def test_long_strings_are_bounded_by_a_cut_prefix_below_and_a_raised_prefix_above() -> None:
    long = ["m" * 10 + "z" * 100, "m" * 10 + "\U0010FFFF" * 60 + "a", "b" * 200]
    stats = json.loads(delta_stats(pa.table({"s": long})))
    low, high = stats["minValues"]["s"], stats["maxValues"]["s"]
    assert len(low) == STRING_STATS_CHARS and low <= min(long)
    assert len(high) <= STRING_STATS_CHARS and high >= max(long)


def test_a_file_with_a_nan_gets_no_bounds_at_all() -> None:
    stats = json.loads(delta_stats(pa.table({"k": [1, 2], "f": [1.0, float("nan")]})))
    assert "minValues" not in stats and "maxValues" not in stats and stats["nullCount"] == {"k": 0, "f": 0}


def files(*boxes: tuple[tuple, tuple], rows: int = 10) -> list[TableFile]:
    return [TableFile(f"f{i}", 100, rows, low, high) for i, (low, high) in enumerate(boxes)]


def test_keys_route_to_the_one_file_whose_bounds_hold_them_or_to_the_gap_they_fall_in() -> None:
    index = TableFiles(files(((10,), (19,)), ((20,), (29,)), ((40,), (49,))), ["k"], [pa.int64()])
    assert index.groups == 3
    routed = index.route([pa.array([15, 20, 29, 35, 5, 99, 40], pa.int64())])
    assert routed.tolist() == [0, 1, 1, -3, -1, -4, 2]


def test_overlapping_files_share_a_group_and_a_file_without_bounds_holds_them_all() -> None:
    index = TableFiles(files(((10,), (30,)), ((20,), (29,)), ((40,), (49,)), ((45,), (60,))), ["k"], [pa.int64()])
    assert index.group_of == [0, 0, 1, 1]
    assert index.route([pa.array([25, 12, 46, 59, 35], pa.int64())]).tolist() == [0, 0, 1, 1, -3]
    unbounded = TableFiles([*files(((10,), (19,))), TableFile("g", 1, 1, (None,), (None,))], ["k"], [pa.int64()])
    assert unbounded.groups == 1 and set(unbounded.route([pa.array([1, 15, 99], pa.int64())]).tolist()) == {0}


def test_composite_keys_route_by_every_column_of_the_box() -> None:
    index = TableFiles(files(((1, "a"), (5, "z")), ((5, "b"), (9, "z"))), ["order", "line"],
                       [pa.int64(), pa.string()])
    assert index.groups == 1  # the boxes overlap where order = 5: (5, "m") could be in either
    apart = TableFiles(files(((1, "a"), (5, "m")), ((5, "n"), (9, "z"))), ["order", "line"],
                       [pa.int64(), pa.string()])
    assert apart.groups == 2
    assert apart.route([pa.array([5, 5], pa.int64()), pa.array(["m", "n"])]).tolist() == [0, 1]
    disjoint = TableFiles(files(((1, "a"), (4, "z")), ((5, "a"), (9, "z"))), ["order", "line"],
                          [pa.int64(), pa.string()])
    routed = disjoint.route([pa.array([3, 5, 10], pa.int64()), pa.array(["b", "c", "a"])])
    assert routed.tolist() == [0, 1, -3]


def test_a_small_file_takes_the_new_keys_next_to_it_and_a_full_one_does_not() -> None:
    small = TableFiles(files(((10,), (19,)), ((30,), (39,)), rows=5), ["k"], [pa.int64()])
    assert small.route([pa.array([25, 99, 1], pa.int64())], room=10).tolist() == [0, 1, 0]
    full = TableFiles(files(((10,), (19,)), ((30,), (39,)), rows=10), ["k"], [pa.int64()])
    assert full.route([pa.array([25, 99, 1], pa.int64())], room=10).tolist() == [-2, -3, -1]


def test_delta_rs_bounds_cut_or_clamped_are_widened_before_routing(tmp_path: Path) -> None:
    """delta-rs writes a timestamp maximum cut to the millisecond and a decimal beyond 64 bits clamped: a
    key just above either must still be routed to the file that holds it."""
    from deltalake import write_deltalake

    at = dt.datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    data = pa.table({"t": pa.array([dt.datetime(2019, 1, 1, tzinfo=UTC), at], pa.timestamp("us", tz="UTC")),
                     "d": pa.array([D(1), D(10**37)], pa.decimal128(38, 0))})
    write_deltalake(str(tmp_path / "t"), data)
    table = DeltaTable(str(tmp_path / "t"))
    by_time = TableFiles.of(table, ["t"], data.schema)
    assert by_time.route([pa.array([at], pa.timestamp("us", tz="UTC"))]).tolist() == [0]
    by_decimal = TableFiles.of(table, ["d"], data.schema)
    assert by_decimal.route([pa.array([D(10**37)], pa.decimal128(38, 0))]).tolist() == [0]


def test_a_writer_rolls_files_at_the_row_limit_in_key_order(tmp_path: Path) -> None:
    data = pa.table({"k": pa.array(np.arange(25), pa.int64()), "v": pa.array(np.arange(25) * 2, pa.int64())})
    _, written_files = written(tmp_path, data, file_rows=10)
    assert [f.rows for f in written_files] == [10, 10, 5]
    bounds = [(json.loads(f.stats)["minValues"]["k"], json.loads(f.stats)["maxValues"]["k"]) for f in written_files]
    assert bounds == [(0, 9), (10, 19), (20, 24)]
