"""The source-vs-snapshot comparison every end-to-end test relies on must itself catch differences."""

from __future__ import annotations

import hashlib
import math
import random
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from dagster_databus import capture
from dagster_databus.core.crc32 import _TABLE, _crc32
from dagster_databus.core.fingerprint import (
    BUCKET_BITS,
    _buffers,
    _md5_prefixes,
    buckets,
    digests,
    fingerprint_batches,
    value_text,
)
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.types import ColumnType
from dagster_databus.dataplane.delta import DeltaSnapshot
from dagster_databus.sources.mysql.types import fingerprint_text
from dagster_databus.sync.reconcile import compare_rows, reconcile_table
from tests.support.checks import cycle
from tests.support.harness import SourceHarness, make_config

SHOP = [("customers", ["id"]), ("orders", ["id"]), ("order_items", ["order_id", "line_no"])]

SOURCE = [{"id": 1, "v": "a"}, {"id": 2, "v": None}, {"id": 3, "v": 1.5}]


def test_equal_rows_ignore_metadata_columns() -> None:
    snapshot = [{**r, "__scn": 9, "__op": "i"} for r in reversed(SOURCE)]
    assert compare_rows("t", ["id"], SOURCE, snapshot).equal


def test_missing_extra_and_different_rows_are_counted() -> None:
    snapshot = [{"id": 1, "v": "a"}, {"id": 2, "v": "not null"}, {"id": 4, "v": "x"}]
    result = compare_rows("t", ["id"], SOURCE, snapshot)
    assert (result.missing, result.extra, result.different, result.equal) == (1, 1, 1, False)
    assert any("differs (2,)" in e for e in result.examples)


# -- the fingerprint itself ----------------------------------------------------------------


def test_digests_are_md5_prefixes_for_every_length_and_slice() -> None:
    texts = [bytes(range(n % 256)) * (n // 256 + 1) for n in range(0, 300, 7)] + ["é€😀".encode()]
    texts = [t[:n] for n, t in zip(range(0, 300, 7), texts, strict=False)] + [texts[-1]]
    array = pa.array(texts, pa.binary())
    expected = [int(hashlib.md5(t).hexdigest()[:16], 16) for t in texts]
    assert digests(array).tolist() == expected  # a few texts: hashlib's, a text at a time
    assert digests(array.slice(5, 10)).tolist() == expected[5:15]
    for sliced, want in ((array, expected), (array.slice(5, 10), expected[5:15])):  # the kernel, on the same texts
        data, offsets = _buffers(sliced)
        out = np.empty(len(sliced), np.uint64)
        _md5_prefixes(data, offsets, out)
        assert out.tolist() == want


def test_buckets_are_the_top_bits_of_crc32() -> None:
    texts = [b"", b"1", "clé".encode(), bytes(range(256)) * 3]
    expected = [zlib.crc32(t) >> (32 - BUCKET_BITS) for t in texts]
    assert buckets(pa.array(texts, pa.binary())).tolist() == expected
    assert buckets(pa.array(texts, pa.binary()).slice(1, 2)).tolist() == expected[1:3]
    values = pa.array([t.decode("latin-1") for t in texts])  # the kernel, on texts of the same bytes' lengths
    data = np.frombuffer(values.buffers()[2], np.uint8)
    out = np.empty(len(values), np.uint32)
    _crc32(data, np.frombuffer(values.buffers()[1], np.int32, len(values) + 1), _TABLE, out)
    assert out.tolist() == [zlib.crc32(v.encode()) for v in values.to_pylist()]


def test_float_text_is_exact_and_free_of_formatting() -> None:
    values = [0.1, -2.5, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1 - 2**-53, 123456789.125]
    for value, text in zip(values, _texts(pa.array(values), "double"), strict=True):
        exponent, mantissa = map(int, text.split(":"))
        assert math.ldexp(mantissa, exponent - 53) == value, (value, text)
    # A FLOAT holds a float32: its text is that of the exact widened value, never a rounded print.
    assert _texts(pa.array([0.1], pa.float32()), "float") == _texts(pa.array([float(np.float32(0.1))]), "double")
    assert _texts(pa.array([0.0, -0.0, None, float("nan"), float("-inf")]), "double") == [
        "0", "0", None, "nan", "-inf"]


def _texts(array: pa.Array, kind: str) -> list[str | None]:
    return [None if v is None else v.decode() for v in value_text(array, ColumnType(kind)).to_pylist()]  # type: ignore[arg-type]


def test_fingerprints_ignore_row_order_and_see_every_change() -> None:
    schema = TableSchema("s", "t", (Column("id", ColumnType("long")), Column("v", ColumnType("string"))), ("id",))
    rows = pa.table({"id": pa.array(range(1000), pa.int64()), "v": [f"v{i}" for i in range(1000)]})
    forward = fingerprint_batches([rows], schema)
    backward = fingerprint_batches(rows.take(pa.array(range(999, -1, -1))).to_batches(max_chunksize=77), schema)
    assert forward == backward and forward.rows == 1000
    changed = rows.set_column(1, "v", pa.array([*(f"v{i}" for i in range(999)), None]))
    different = fingerprint_batches([changed], schema)
    assert different != forward and len(different.differing(forward)) == 1 and different.rows == 1000
    # The same value moved to another column must not cancel out.
    swapped = fingerprint_batches([pa.table({"id": pa.array([1], pa.int64()), "v": ["1"]})], schema)
    assert swapped != fingerprint_batches([pa.table({"id": pa.array([1], pa.int64()), "v": ["2"]})], schema)


# -- reconciliation against real sources and Delta -----------------------------------------------


def test_reconciliation_names_the_differing_keys_and_columns(source: SourceHarness, tmp_path: Path, spark) -> None:
    source.create_shop()
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP))
    source.workload(seed=5).run(40)
    cycle(config, spark)
    result = reconcile_table(config, config.source("shop"), "order_items")
    assert result.reconciled and result.equal and result.source_rows > 10, result
    assert result.pushed_down == (source.kind == "mysql")

    # Diverge the snapshot behind the pipeline's back: a changed cell, a lost row, an invented row.
    snap = DeltaTable(str(DeltaSnapshot(config.lake, "shop", "order_items").path))
    rows = sorted(snap.to_pyarrow_table().to_pylist(), key=lambda r: (r["order_id"], r["line_no"]))
    changed, lost, model = rows[0], rows[1], rows[2]
    snap.update(updates={"qty": "qty + 1000"},
                predicate=f"order_id = {changed['order_id']} AND line_no = {changed['line_no']}")
    snap.delete(f"order_id = {lost['order_id']} AND line_no = {lost['line_no']}")
    invented = {**model, "line_no": 9999}
    write_deltalake(snap.table_uri, pa.Table.from_pylist([invented], snap.to_pyarrow_table().schema), mode="append")

    result = reconcile_table(config, config.source("shop"), "order_items")
    assert result.reconciled and not result.equal
    assert (result.source_rows, result.snapshot_rows) == (len(rows), len(rows))  # one lost, one invented
    assert 1 <= result.differing_buckets <= 3
    found = {(d.key, d.what, d.columns) for d in result.differences}
    assert found == {((changed["order_id"], changed["line_no"]), "differs", ("qty",)),
                     ((lost["order_id"], lost["line_no"]), "missing", ()),
                     ((model["order_id"], 9999), "extra", ())}
    assert [d.key for d in result.differences] == sorted(d.key for d in result.differences)
    differs = next(d for d in result.differences if d.what == "differs")
    assert differs.snapshot["qty"] == differs.source["qty"] + 1000  # type: ignore[index]
    assert "qty: source" in differs.describe()


def test_reconciliation_waits_for_the_log_to_reach_the_source(source: SourceHarness, tmp_path: Path, spark) -> None:
    source.create_shop()
    config = make_config(tmp_path / "lake", source.source_config("shop", SHOP))
    workload = source.workload(seed=6)
    workload.run(10)
    cycle(config, spark)
    workload.run(10)  # not captured yet
    result = reconcile_table(config, config.source("shop"), "orders")
    assert not result.reconciled and "capture first" in result.reason
    capture.run(config, "shop")  # captured, not merged: the check applies the log's events itself
    result = reconcile_table(config, config.source("shop"), "orders")
    assert result.reconciled and result.equal, result


def test_mysql_renders_every_double_exactly_as_the_fingerprint_does(mariadb) -> None:
    """The float text (exponent and mantissa) from MariaDB's arithmetic equals numpy's ``frexp`` for
    edge values (largest, smallest subnormal, powers of two and their neighbours) and random bit patterns,
    as DOUBLE and as FLOAT columns."""
    rng = random.Random(7)
    values = [0.1, -2.5, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 2.225073858507201e-308,
              1 - 2**-53, 2 - 2**-52, 123456789.125, 3.4028234663852886e38, 1.401298464324817e-45]
    values += [2.0 ** rng.randint(-1074, 1023) * rng.choice([1, 1 - 2**-53, 1 + 2**-52]) for _ in range(500)]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(63)))[0] * rng.choice([1, -1]) for _ in range(500)]
    values = [v for v in values if math.isfinite(v) and v != 0]
    singles = [float(np.float32(v)) if abs(v) < 3.4e38 else 1.0 for v in values]
    server = mariadb
    server.execute("CREATE DATABASE IF NOT EXISTS floats", "DROP TABLE IF EXISTS floats.f",
                   "CREATE TABLE floats.f (id INT PRIMARY KEY, d DOUBLE, s FLOAT)")
    conn = server.connect("floats")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO f VALUES (%s, %s, %s)", list(zip(range(len(values)), values, singles,
                                                                      strict=True)))
    conn.commit()
    d, s = Column("d", ColumnType("double"), "double"), Column("s", ColumnType("float"), "float")
    rendered = server.query(f"SELECT {fingerprint_text(d)}, {fingerprint_text(s)} FROM f ORDER BY id",
                            database="floats")
    assert [r[0] for r in rendered] == _texts(pa.array(values), "double")
    assert [r[1] for r in rendered] == _texts(pa.array(singles, pa.float32()), "float")
