"""Columnar change batches: the bulk Avro encoder, ``append_batch``, and SQLite capture by column."""

from __future__ import annotations

import datetime as dt
import io
import random
import sqlite3
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from dagster_databus.core.batch import ChangeBatch, SpooledBatch
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.errors import SchemaMismatchError
from dagster_databus.log.avro import encoder
from dagster_databus.log.avro.container import write_container
from dagster_databus.log.avro.encoder import encode_blocks, encode_records
from dagster_databus.log.avro.fields import Field
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources.sqlite import batch as sqlite_batch
from dagster_databus.sources.sqlite.source import SqliteSource
from dagster_databus.sources.sqlite.stream import _decode_json
from tests.support.harness import CUT, SqliteHarness, make_config

UTC = dt.UTC
# Per product type: edge values (range ends, sign boundaries of the two's complement, sub-normals,
# infinities, widest text), each column also gets NULLs.
EDGES: dict[str, list[object]] = {
    "boolean": [True, False],
    "byte": [-128, 127, 0, -1],
    "short": [-32768, 32767, 63, 64, -64, -65],
    "integer": [-(2**31), 2**31 - 1, 0, 8191, 8192],
    "long": [-(2**63), 2**63 - 1, 0, 1, -1, 127, 128, 2**35, -(2**56)],
    "float": [0.0, -0.0, 1.5, float("inf"), float("-inf"), 3.4028234663852886e38, 1.401298464324817e-45],
    "double": [0.0, -0.0, 0.1 + 0.2, 1.7976931348623157e308, 5e-324, float("inf"), float("-inf")],
    "decimal(10,2)": [Decimal("0.00"), Decimal("-0.01"), Decimal("99999999.99"), Decimal("-99999999.99"),
                      Decimal("1.28"), Decimal("-1.28"), Decimal("1.27"), Decimal("-1.29"), Decimal("-327.68")],
    "decimal(38,0)": [Decimal(10**38 - 1), Decimal(-(10**38 - 1)), Decimal(0), Decimal(-128), Decimal(-129),
                      Decimal(255), Decimal(-256), Decimal(-(2**63))],
    "decimal(65,30)": [Decimal("1" + "0" * 34 + "." + "1" * 30), Decimal("-0." + "0" * 29 + "1"), Decimal(0)],
    "number": [Decimal("1.5"), Decimal("100"), Decimal("-0.001"), Decimal("1" * 60)],
    "string": ["", "é中文😀", "x" * 300, "\x00 nul", '{"$r":"1"}'],
    "binary": [b"", b"\x00\xff" * 200, b"\x80"],
    "date": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(1969, 12, 31)],
    "timestamp": [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                  dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
    "timestamp_ntz": [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1)],
    "time": [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(hours=838, minutes=59, seconds=59),
             dt.timedelta(0), dt.timedelta(microseconds=-1)],
}
COLUMNS = tuple(Column(f"c{i}", ColumnType.parse(kind)) for i, kind in enumerate(EDGES))
WIDE = TableSchema("s", "wide", COLUMNS, ("c4",))


def sample(rows: int, seed: int = 7) -> dict[str, list[object]]:
    rng = random.Random(seed)
    return {c.name: [rng.choice([*EDGES[str(c.type)], None]) for _ in range(rows)] for c in COLUMNS}


def test_each_record_is_byte_for_byte_what_fastavro_writes_for_every_type_edge_value_and_null() -> None:
    values = sample(3_000)
    batch = pa.RecordBatch.from_arrays([c.type.to_arrow(values[c.name]) for c in COLUMNS],
                                       schema=WIDE.arrow(with_meta=False))
    avro = fastavro.parse_schema(WIDE.avro())
    # Slices start mid-buffer (and mid-validity-bitmap): offsets must be honoured.
    for start, stop in ((0, 3_000), (13, 2_000), (2_999, 3_000)):
        records = encode_records(batch.slice(start, stop - start), [Field(c.name, c.type) for c in COLUMNS])
        assert len(records) == stop - start
        for i, record in enumerate(records.to_pylist()):
            expected = io.BytesIO()
            fastavro.schemaless_writer(expected, avro, {c.name: c.type.to_avro(values[c.name][start + i])
                                                        for c in COLUMNS})
            assert record == expected.getvalue(), (start + i, {c.name: values[c.name][start + i] for c in COLUMNS})


def test_small_batches_encoded_by_fastavro_are_byte_for_byte_the_kernels_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    values = sample(1_500, seed=11)
    wide = pa.RecordBatch.from_arrays([c.type.to_arrow(values[c.name]) for c in COLUMNS],
                                      schema=WIDE.arrow(with_meta=False))
    ids = pa.RecordBatch.from_arrays([pa.array(range(300), pa.int64())],
                                     schema=pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    tables = [(wide.slice(7, 1_400), [Field(c.name, c.type) for c in COLUMNS], 0),
              (ids, [Field("id", ColumnType("long"), nullable=False)], 71)]  # a branch past one varint byte
    order = list(range(1_700))
    random.Random(2).shuffle(order)
    small = encode_blocks(tables, order, block_records=600)
    alone = encode_blocks(tables[:1])
    monkeypatch.setattr(encoder, "SMALL_RECORDS", 0)  # the kernels, whatever the size
    assert [b.to_pylist() for b in small] == [b.to_pylist() for b in encode_blocks(tables, order, block_records=600)]
    assert [b.to_pylist() for b in alone] == [b.to_pylist() for b in encode_blocks(tables[:1])]
    assert [len(b) for b in small] == [600, 600, 500]


def test_a_container_of_two_tables_in_commit_order_reads_back_in_any_avro_reader(tmp_path: Path) -> None:
    small = TableSchema("s", "small", (Column("id", ColumnType("long")),), ("id",))
    wide_rows = sample(40_000, seed=3)
    wide = pa.RecordBatch.from_arrays([c.type.to_arrow(wide_rows[c.name]) for c in COLUMNS],
                                      schema=WIDE.arrow(with_meta=False))
    ids = pa.RecordBatch.from_arrays([pa.array(range(40_000), pa.int64())], schema=small.arrow(with_meta=False))
    order = [i // 2 if i % 2 == 0 else 40_000 + i // 2 for i in range(80_000)]  # interleaved
    blocks = encode_blocks([(wide, [Field(c.name, c.type) for c in COLUMNS], 0),
                            (ids, [Field("id", ColumnType("long"))], 1)], order=order, block_records=7_000)
    assert [len(b) for b in blocks] == [7_000] * 11 + [3_000]
    union = [{**WIDE.avro(), "name": "w"}, {**small.avro(), "name": "s"}]
    for codec in ("zstandard", "deflate", "null"):
        with open(tmp_path / f"{codec}.avro", "wb") as f:
            write_container(f, union, blocks, {"databus.test": "yes"}, codec=codec)
        with open(tmp_path / f"{codec}.avro", "rb") as f:
            reader = fastavro.reader(f, return_record_name=True)
            assert reader.metadata["databus.test"] == "yes" and reader.codec == codec
            records = list(reader)
        assert [name for name, _ in records[:4]] == ["databus.s.w", "databus.s.s"] * 2
        assert [r["id"] for name, r in records if name == "databus.s.s"] == list(range(40_000))
        read_wide = [r for name, r in records if name == "databus.s.w"]
        for column in COLUMNS:
            assert [r[column.name] for r in read_wide] == [column.type.to_avro(v) for v in wide_rows[column.name]]


def test_a_segment_of_more_tables_than_one_byte_of_union_branch_holds(tmp_path: Path) -> None:
    schemas = [TableSchema("s", f"t{i:03d}", (Column("id", ColumnType("long")),), ("id",)) for i in range(70)]
    log = ChangeLog(tmp_path, "s")
    events = tuple(ChangeEvent(Scn(i + 1), i, s.table, Op.INSERT, (i,), {"id": i}, 1) for i, s in enumerate(schemas))
    with log.writer() as w:
        w.register_schemas(schemas)  # union branches 64..69 take two bytes
        w.append([Window(Scn(70), events)], "e1")
    assert [e.event for e in log.read()] == list(events)


def events_of(table: str, scns: list[int], window: int, seq0: int = 0) -> list[ChangeEvent]:
    return [ChangeEvent(Scn(s), seq0 + i, table, Op.UPDATE if s % 2 else Op.INSERT, (s,), {"id": s, "v": f"v{s}"},
                        1_000 + s) for i, s in enumerate(scns)]


T1 = TableSchema("s", "t1", (Column("id", ColumnType("long")), Column("v", ColumnType("string"))), ("id",))
T2 = TableSchema("s", "t2", (Column("id", ColumnType("long")), Column("v", ColumnType("string"))), ("id",))


def mixed_windows() -> list[Window]:
    first = [*events_of("t1", [1, 2], 3), *events_of("t2", [3], 3, seq0=2)]
    second = [*events_of("t2", [5], 6), *events_of("t1", [6], 6, seq0=1)]
    return [Window(Scn(3), tuple(first)), Window(Scn(6), tuple(second))]


def test_batches_and_windows_are_two_forms_of_the_same_changes(tmp_path: Path) -> None:
    windows = mixed_windows()
    batch = ChangeBatch.from_windows(windows, {"t1": T1, "t2": T2})
    assert batch.to_windows({"t1": T1, "t2": T2}) == windows
    scns, commits = batch.window_ends()
    assert list(scns) == [3, 6] and list(commits) == [1_003, 1_006]
    assert batch.op_counts() == {"i": 2, "u": 3}

    by_windows, by_batch = ChangeLog(tmp_path / "a", "s"), ChangeLog(tmp_path / "b", "s")
    with by_windows.writer() as w:
        w.register_schemas([T1, T2])
        w.append(windows, "e1")
    with by_batch.writer() as w:
        w.register_schemas([T1, T2])
        info = w.append_batch(batch, "e1")
    assert (info.first_scn, info.last_scn, info.windows, info.events, info.tables) == (1, 6, 2, 5, {"t1": 3, "t2": 2})
    assert list(by_batch.read_windows()) == list(by_windows.read_windows()) == windows


def test_append_batch_refuses_what_append_refuses_and_writes_nothing(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([T1, T2])
        w.append_batch(ChangeBatch.from_windows(mixed_windows(), {"t1": T1, "t2": T2}), "e1")
        again = ChangeBatch.from_windows([Window(Scn(6), tuple(events_of("t1", [6], 6)))], {"t1": T1})
        with pytest.raises(ValueError, match="commit order after SCN 6"):
            w.append_batch(again, "e1")
        # A window whose events run backwards is refused, wherever it sits in the batch.
        backwards = again.tables["t1"].set_column(2, "__scn", pa.array([7], pa.int64()))
        late = ChangeBatch.from_windows([Window(Scn(9), tuple(events_of("t2", [8, 9], 9)))], {"t2": T2})
        with pytest.raises(ValueError, match="commit order"):
            w.append_batch(ChangeBatch({"t1": backwards, **late.tables}), "e1")
        other = TableSchema("s", "t1", (Column("id", ColumnType("long")),), ("id",))
        with pytest.raises(ValueError, match="registered schema"):
            w.append_batch(ChangeBatch.from_windows([Window(Scn(8), (
                ChangeEvent(Scn(8), 0, "t1", Op.INSERT, (8,), {"id": 8}, 1),))], {"t1": other}), "e1")
    assert log.committed_scn() == Scn(6) and len(log.manifest().segments) == 1
    assert sorted(p.name for p in log.segments_dir.iterdir()) == [log.manifest().segments[0].file]


def test_spooled_pieces_make_one_segment_equal_to_the_batch_and_pieces_out_of_order_write_nothing(
        tmp_path: Path) -> None:
    windows = mixed_windows()
    pieces = [ChangeBatch.from_windows([w], {"t1": T1, "t2": T2}) for w in windows]
    spooled = SpooledBatch(windows[0].first_scn, windows[-1].scn, 2, 1_006, lambda: iter(pieces))
    log = ChangeLog(tmp_path / "a", "s")
    with log.writer() as w:
        w.register_schemas([T1, T2])
        with pytest.raises(ValueError, match="out of commit order"):
            w.append_spooled(replace(spooled, pieces=lambda: iter(pieces[::-1])), "e1")
        with pytest.raises(ValueError, match="out of commit order"):  # a piece past the windows it was given as
            w.append_spooled(replace(spooled, last_scn=Scn(5)), "e1")
        assert log.manifest().empty and not list(log.segments_dir.glob("*.avro"))
        info = w.append_spooled(spooled, "e1")
        with pytest.raises(ValueError, match="commit order after SCN 6"):
            w.append_spooled(spooled, "e1")
    assert (info.first_scn, info.last_scn, info.windows, info.events, info.tables, info.last_commit_ms) == (
        1, 6, 2, 5, {"t1": 3, "t2": 2}, 1_006)
    assert list(log.read_windows()) == windows and len(log.manifest().segments) == 1


# -- SQLite capture by column ------------------------------------------------------------------

FAST = {"n": "INTEGER", "t": "TEXT", "r": "REAL", "b": "BLOB", "f": "BOOLEAN"}
FAST_VALUES: dict[str, list[object]] = {
    "n": [-(2**63), 2**63 - 1, 0, -1, 2**53 + 1],
    "t": ["", "é中文😀", "tab\tquote\"back\\slash\nline", '{"$r":"1"}', '{"$b":"00"}', "x" * 2_000],
    "r": [0.1 + 0.2, 5e-324, 1.7976931348623157e308, -2.5, float("inf"), float("-inf"), 1e-300, 123456789.125],
    "b": [b"", b"\x00", bytes(range(256))],
    "f": [0, 1],
}


NEXT_EPOCH = CUT  # what a poll does first: the changes so far become a window


@pytest.fixture()
def fast_table(tmp_path: Path):
    from dagster_databus import capture

    columns = ", ".join(f"{name} {decl}" for name, decl in FAST.items())
    source = SqliteHarness(tmp_path / "src.db")
    source.execute([f"CREATE TABLE fast (id INTEGER PRIMARY KEY, {columns})"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("fast", ["id"])],
                                                                 poll={"chunk_rows": 50_000}))
    capture.install(config, "shop")
    rng = random.Random(5)
    rows = [(i, *(rng.choice([*FAST_VALUES[n], None]) for n in FAST)) for i in range(1, 3_001)]
    # Each transaction in a window of its own (as polls between them would leave it).
    source.execute([("INSERT INTO fast VALUES (?, ?, ?, ?, ?, ?)", row) for row in rows])
    source.execute([NEXT_EPOCH, *(("UPDATE fast SET t = ?, r = ? WHERE id = ?", ("u", -0.5, i))
                                  for i in range(1, 3_001, 7))])
    source.execute([NEXT_EPOCH, *(("DELETE FROM fast WHERE id = ?", (i,)) for i in range(2, 3_001, 11))])
    return source, config


def txlog_rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT scn, tbl, op, row, ts FROM _databus_images ORDER BY scn").fetchall()


def test_sqlite_images_parsed_by_column_equal_the_row_by_row_conversion(fast_table) -> None:
    source, config = fast_table
    src = SqliteSource(config.sources[0])
    schema = src.catalog.schemas()["fast"]
    rows = txlog_rows(source.path)
    texts = pa.array([r[3] for r in rows], pa.string())
    scns = [r[0] for r in rows]
    by_json = sqlite_batch._columns_by_json(schema, texts)  # raises _Fallback if any image misses the fast shape
    by_row = sqlite_batch._columns_by_row(schema, texts, scns, _decode_json)
    for column, fast, slow in zip(schema.columns, by_json, by_row, strict=True):
        assert fast.type == slow.type == column.type.arrow(), column.name
        assert fast.to_pylist() == slow.to_pylist(), column.name


def test_sqlite_capture_by_column_keeps_windows_keys_and_values(fast_table) -> None:
    from dagster_databus import capture

    source, config = fast_table
    source.execute([NEXT_EPOCH, "UPDATE fast SET n = n WHERE id = 1", "INSERT INTO fast (id, t) VALUES (5000, 'w')"])
    changes = len(txlog_rows(source.path))
    result = capture.run(config, "shop")
    log = ChangeLog(config.lake, "shop")
    events = [e.event for e in log.read()]
    assert result.events == len(events) == changes
    assert result.windows == 4 and result.events_by_op["d"] == len(range(2, 3_001, 11))
    with sqlite3.connect(source.path) as conn:
        live = {r[0]: r for r in conn.execute("SELECT id, n, t, r, b, f FROM fast")}
    final: dict[int, dict[str, object]] = {}
    for event in events:
        if event.op is Op.DELETE:
            final.pop(event.key[0])
        else:
            final[event.key[0]] = event.row
    assert set(final) == set(live)
    for key, row in final.items():
        expected = live[key]
        assert (row["id"], row["n"], row["t"], row["r"], row["b"]) == expected[:5]
        assert row["f"] == (None if expected[5] is None else bool(expected[5]))
    windows = list(log.read_windows())
    assert [[e.seq for e in w.events] for w in windows] == [list(range(len(w.events))) for w in windows]


# DECIMAL, date and time columns: SQLite stores integers, reals and text side by side in them.
TYPED = {"d": "DECIMAL(10,2)", "dt": "DATE", "ts": "DATETIME", "tz": "TIMESTAMP", "tm": "TIME"}
TYPED_VALUES: dict[str, list[object]] = {
    "d": [0, -5, 99999999, 0.25, -1.5, 0.1, 12.3, "12.30", "0012.5", 1e-2, -0.0],
    "dt": ["2024-02-29", "0001-01-01", "9999-12-31", "1969-12-31"],
    "ts": ["2024-01-02 03:04:05", "2024-01-02T03:04:05.5", "2024-01-02", "2024-01-02 03:04", "0001-01-01 00:00:00",
           "9999-12-31 23:59:59.999999"],
    "tz": ["2024-01-02 03:04:05Z", "1969-12-31 23:59:59.999999", "2024-01-02T00:00"],
    "tm": ["-838:59:59", "838:59:59.000001", "00:00", "12:34:56.7", "-00:00:00.000001"],
}
# Values the row path takes in another form than the fast one reads (it converts them), and values it
# refuses: the fast path must hand each to it, never read it otherwise.
TYPED_UNUSUAL: dict[str, list[object]] = {
    "d": ["1_000", " 5"],
    "ts": ["2024-01-02 03:04:05.1234560"],
    "tz": ["2024-01-02 03:04:05+02:00", "2024-01-02 03:04:05-01:30"],
}
TYPED_REFUSED: dict[str, list[object]] = {
    "d": [12.345, 1e-7, 1e9, "abc", b"\x01", "Infinity"],
    "dt": ["2024-02-30", 20240101, "2024-1-2", "0000-01-01", "\uff12\uff10\uff12\uff14-01-01", "2024-01-01\n"],
    "ts": ["2024-01-02 24:00:00", "2024-01-02 03:04:60", "2024-01-02 03:04:05+02:00", "2024-01-02 03:04:05.1234567",
           1.5],
    "tz": ["2024-13-01 00:00:00", "noon"],
    "tm": ["12:60", "12:00:60", "1:00", 3600],
}


def typed_images(tmp_path: Path, rows: list[tuple[object, ...]]) -> tuple[TableSchema, pa.Array, list[int]]:
    from dagster_databus import capture

    source = SqliteHarness(tmp_path / f"typed{random.random()}.db")
    source.execute([f"CREATE TABLE typed (id INTEGER PRIMARY KEY, {', '.join(f'{n} {d}' for n, d in TYPED.items())})"])
    config = make_config(tmp_path / "lake", source.source_config("shop", [("typed", ["id"])]))
    capture.install(config, "shop")
    source.execute([("INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?)", row) for row in rows])
    logged = txlog_rows(source.path)
    schema = SqliteSource(config.sources[0]).catalog.schemas()["typed"]
    return schema, pa.array([r[3] for r in logged], pa.string()), [r[0] for r in logged]


def test_sqlite_decimal_and_date_columns_parsed_by_column_equal_the_row_by_row_conversion(tmp_path: Path) -> None:
    rng = random.Random(11)
    rows = [(i, *(rng.choice([*TYPED_VALUES[n], None]) for n in TYPED)) for i in range(1, 2_001)]
    rows += [(5000 + i, *(None if n != "d" else rng.uniform(-1e6, 1e6) for n in TYPED)) for i in range(200)]
    rows = [r if not isinstance(r[1], float) else (r[0], round(r[1], 2), *r[2:]) for r in rows]
    schema, texts, scns = typed_images(tmp_path, rows)
    by_column = sqlite_batch._columns_by_json(schema, texts)  # _Fallback if any value missed the fast path
    by_row = sqlite_batch._columns_by_row(schema, texts, scns, _decode_json)
    for column, fast, slow in zip(schema.columns, by_column, by_row, strict=True):
        assert fast.type == slow.type == column.type.arrow(), column.name
        assert fast.to_pylist() == slow.to_pylist(), column.name


@pytest.mark.parametrize("column", sorted(TYPED))
def test_sqlite_typed_values_the_fast_path_does_not_read_as_is_go_value_by_value(tmp_path: Path, column: str) -> None:
    position = list(TYPED).index(column) + 1
    for value in TYPED_UNUSUAL.get(column, []) + TYPED_REFUSED[column]:
        row = [1, *(None for _ in TYPED)]
        row[position] = value
        schema, texts, scns = typed_images(tmp_path, [tuple(row)])
        with pytest.raises(sqlite_batch._Fallback):
            sqlite_batch._columns_by_json(schema, texts)
        if value in TYPED_REFUSED[column]:
            with pytest.raises(SchemaMismatchError, match=rf"column typed\.{column} "):
                sqlite_batch._columns_by_row(schema, texts, scns, _decode_json)
        else:  # taken value by value, and taken
            assert sqlite_batch._columns_by_row(schema, texts, scns, _decode_json)[position].to_pylist() != [None]


def test_key_partitions_are_zlib_crc32_of_each_key_including_sliced_and_non_ascii_keys() -> None:
    import zlib

    from dagster_databus.core.batch import partitions
    from dagster_databus.core.events import key_partition

    rng = random.Random(14)
    alphabet = "ab\x00é漢🙂[]\",:0123456789"
    keys = ["", "[]", "[1]", '["a"]'] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(5000)
    ]
    whole = pa.array(keys, pa.string())
    expected = [zlib.crc32(k.encode()) & 0xFFFF for k in keys]
    assert partitions(whole).to_pylist() == expected
    assert partitions(whole.slice(1234, 777)).to_pylist() == expected[1234:2011]
    assert partitions(keys[:50]).to_pylist() == [key_partition(k) for k in keys[:50]]
