"""The source-vs-snapshot comparison every end-to-end test relies on must itself catch differences."""

from __future__ import annotations

from dagster_databus.snapshot.reconcile import compare_rows

SOURCE = [{"id": 1, "v": "a"}, {"id": 2, "v": None}, {"id": 3, "v": 1.5}]


def test_equal_rows_ignore_metadata_columns() -> None:
    snapshot = [{**r, "__scn": 9, "__op": "i"} for r in reversed(SOURCE)]
    assert compare_rows("t", ["id"], SOURCE, snapshot).equal


def test_missing_extra_and_different_rows_are_counted() -> None:
    snapshot = [{"id": 1, "v": "a"}, {"id": 2, "v": "not null"}, {"id": 4, "v": "x"}]
    result = compare_rows("t", ["id"], SOURCE, snapshot)
    assert (result.missing, result.extra, result.different, result.equal) == (1, 1, 1, False)
    assert any("differs (2,)" in e for e in result.examples)
