"""The bulk Avro decoder: every column of every branch equals fastavro's reading of it, in Arrow form."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from dagster_databus.core.batch import ChangeBatch, batch_schema
from dagster_databus.core.events import ChangeEvent, Op, Window
from dagster_databus.core.schema import Column, TableSchema
from dagster_databus.core.scn import Scn
from dagster_databus.core.types import ColumnType
from dagster_databus.log.avro import decoder as decoder_module
from dagster_databus.log.avro.container import read_container, write_container
from dagster_databus.log.avro.decoder import Decoder, decode_segment
from dagster_databus.log.avro.encoder import encode_blocks, encode_records
from dagster_databus.log.avro.fields import Field, fields_of
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.log.segments import EVENT_AVRO_FIELDS, ROW_NAMESPACE


@pytest.fixture(autouse=True, params=["kernel", "fastavro"])
def decoded_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: groups decoded by the kernel, and by fastavro (what groups of fewer than
    ``SMALL_RECORDS`` records take): the two must give the same batches and refuse the same input."""
    monkeypatch.setattr(decoder_module, "SMALL_RECORDS", 0 if request.param == "kernel" else 10**9)
    return str(request.param)

UTC = dt.UTC
# Per product type: range ends, two's complement sign and byte-width boundaries, special floats,
# far dates, durations beyond a day, wide and non-ASCII text; each nullable column also gets NULLs.
EDGES: dict[str, list[Any]] = {
    "boolean": [True, False],
    "byte": [-128, 127, 0, -1],
    "short": [-32768, 32767, 63, 64, -64, -65],
    "integer": [-(2**31), 2**31 - 1, 0, 8191, 8192],
    "long": [-(2**63), 2**63 - 1, 0, 1, -1, 127, 128, 2**35, -(2**56)],
    "float": [0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), 3.4028234663852886e38,
              1.401298464324817e-45],
    "double": [0.0, -0.0, 0.1 + 0.2, 1.7976931348623157e308, 5e-324, float("inf"), float("-inf"), float("nan")],
    "decimal(1,0)": [Decimal(9), Decimal(-9), Decimal(0)],
    "decimal(10,2)": [Decimal("0.00"), Decimal("-0.01"), Decimal("99999999.99"), Decimal("-99999999.99"),
                      Decimal("1.28"), Decimal("-1.28"), Decimal("1.27"), Decimal("-1.29"), Decimal("-327.68")],
    "decimal(38,0)": [Decimal(10**38 - 1), Decimal(-(10**38 - 1)), Decimal(0), Decimal(-128), Decimal(-129),
                      Decimal(255), Decimal(-256), Decimal(-(2**63)), Decimal(2**63), Decimal(2**64),
                      Decimal(-(2**64)), Decimal(2**126), Decimal(-(2**126))],
    "decimal(38,38)": [Decimal("0." + "9" * 38), Decimal("-0." + "9" * 38), Decimal("-0." + "0" * 37 + "1"),
                       Decimal(0)],
    "decimal(39,0)": [Decimal(10**39 - 1), Decimal(-(10**39 - 1)), Decimal(0), Decimal(-1), Decimal(2**127),
                      Decimal(-(2**127))],
    "decimal(65,30)": [Decimal("1" + "0" * 34 + "." + "1" * 30), Decimal("-0." + "0" * 29 + "1"), Decimal(0),
                       Decimal("-" + "9" * 35 + "." + "9" * 30), Decimal("12.5")],
    "decimal(76,0)": [Decimal(10**76 - 1), Decimal(-(10**76 - 1)), Decimal(-(2**200)), Decimal(1)],
    "number": [Decimal("1.5"), Decimal("100"), Decimal("-0.001"), Decimal("1" * 60), Decimal(0),
               Decimal("-1E-30"), Decimal("1E+5")],
    "string": ["", "é中文😀", "x" * 300, "\x00 nul", '{"$r":"1"}', "ü" * 20_000],
    "binary": [b"", b"\x00\xff" * 200, b"\x80", bytes(range(256)) * 300],
    "date": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(1969, 12, 31)],
    "timestamp": [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                  dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
    "timestamp_ntz": [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1)],
    "time": [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(hours=838, minutes=59, seconds=59),
             dt.timedelta(0), dt.timedelta(microseconds=-1), dt.timedelta(days=100_000, microseconds=1)],
}
COLUMNS = tuple(Column(f"c{i}", ColumnType.parse(kind)) for i, kind in enumerate(EDGES))
WIDE = TableSchema("s", "wide", COLUMNS, ("c4",))
CODECS = ("null", "deflate", "zstandard")


def sample(rows: int, seed: int, nulls: bool = True) -> dict[str, list[Any]]:
    rng = random.Random(seed)
    return {c.name: [rng.choice([*EDGES[str(c.type)], *([None] if nulls else [])]) for _ in range(rows)]
            for c in COLUMNS}


def arrow_batch(values: Mapping[str, list[Any]], schema: TableSchema = WIDE) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([c.type.to_arrow(values[c.name]) for c in schema.columns],
                                      schema=schema.arrow(with_meta=False))


def record(name: str, fields: Sequence[Field], namespace: str = "databus.test") -> dict[str, Any]:
    """The Avro record ``encode_records`` writes ``fields`` as."""
    return {"type": "record", "name": name, "namespace": namespace,
            "fields": [{"name": f.name, "type": ["null", f.type.avro()] if f.nullable else f.type.avro()}
                       for f in fields]}


def container(schema: Any, blocks: Sequence[pa.Array], codec: str = "null") -> bytes:
    out = io.BytesIO()
    write_container(out, schema, blocks, {"databus.test": "yes"}, codec=codec)
    return out.getvalue()


def raw_records(*records: bytes) -> pa.Array:
    return pa.array(records, pa.large_binary())


# -- reading it both ways ---------------------------------------------------------------------


def by_fastavro(data: bytes, branches: Mapping[str, Sequence[Field]]) -> dict[str, tuple[pa.RecordBatch, list[int]]]:
    """fastavro's records of each branch in Arrow form (``ColumnType.to_arrow`` of the canonical value),
    and their positions in the file."""
    reader = fastavro.reader(io.BytesIO(data), return_record_name=True)
    schema = json.loads(reader.metadata["avro.schema"])
    single = None if isinstance(schema, list) else f"{schema['namespace']}.{schema['name']}"
    rows: dict[str, list[dict[str, Any]]] = {}
    positions: dict[str, list[int]] = {}
    for i, item in enumerate(reader):
        name, rec = (single, item) if single else item
        rows.setdefault(name, []).append(rec)
        positions.setdefault(name, []).append(i)
    out = {}
    for name, fields in branches.items():
        if name in rows:
            arrays = [f.type.to_arrow([f.type.from_avro(r[f.name]) for r in rows[name]]) for f in fields]
            schema = pa.schema([pa.field(f.name, f.type.arrow()) for f in fields])
            out[name] = (pa.RecordBatch.from_arrays(arrays, schema=schema), positions[name])
    return out


def by_decoder(source: Any, branches: Mapping[str, Sequence[Field]] | None,
               rows: int = 65_536) -> dict[str, tuple[pa.RecordBatch, list[int]]]:
    """The decoder's batches of each branch, joined, with their positions."""
    batches: dict[str, list[pa.RecordBatch]] = {}
    positions: dict[str, list[np.ndarray]] = {}
    for name, batch, where in decode_segment(source, branches, rows=rows):
        assert len(batch) == len(where) > 0 and where.dtype == np.int64
        batches.setdefault(name, []).append(batch)
        positions.setdefault(name, []).append(where)
    return {name: (pa.Table.from_batches(parts).combine_chunks().to_batches()[0],
                   np.concatenate(positions[name]).tolist()) for name, parts in batches.items()}


def assert_same(got: pa.RecordBatch, want: pa.RecordBatch) -> None:
    assert got.schema == want.schema
    for name in want.schema.names:
        a, b = got.column(name), want.column(name)
        a.validate(full=True)
        if pa.types.is_floating(a.type):  # by bits: NaN equals NaN, -0.0 is not 0.0
            bits = pa.uint32() if a.type == pa.float32() else pa.uint64()
            a, b = a.view(bits), b.view(bits)
        assert a.equals(b), (name, a.to_pylist()[:8], b.to_pylist()[:8])


def assert_reads_like_fastavro(data: bytes, branches: Mapping[str, Sequence[Field]],
                               rows: Sequence[int] = (65_536,)) -> None:
    """``rows``: records per kernel call, each compared."""
    want = by_fastavro(data, branches)
    for group in rows:
        got = by_decoder(io.BytesIO(data), branches, group)
        assert got.keys() == want.keys()
        for name, (batch, positions) in want.items():
            assert_same(got[name][0], batch)
            assert got[name][1] == positions, name


# -- every type, every codec --------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_every_type_edge_value_and_null_decodes_as_fastavro_reads_it(codec: str) -> None:
    values = sample(1_200, seed=11)
    fields = [Field(c.name, c.type) for c in COLUMNS]
    blocks = encode_blocks([(arrow_batch(values), fields, None)], block_records=300)
    data = container(WIDE.avro(), blocks, codec)
    # A kernel call per block, several blocks per call, one call.
    assert_reads_like_fastavro(data, {"databus.s.wide": fields}, rows=(1, 700, 65_536))


def test_fields_that_are_not_nullable_decode_without_validity() -> None:
    values = sample(600, seed=12, nulls=False)
    fields = [Field(c.name, c.type, nullable=False) for c in COLUMNS]
    data = container(record("plain", fields), encode_blocks([(arrow_batch(values), fields, None)]))
    assert_reads_like_fastavro(data, {"databus.test.plain": fields})
    [(_, batch, _)] = decode_segment(io.BytesIO(data), {"databus.test.plain": fields})
    assert all(column.buffers()[0] is None for column in batch.columns)


def test_canonical_values_come_back_as_the_arrow_columns_that_were_written() -> None:
    values = {name: [None if v is None else c.type.check(v) for v in column]
              for (name, column), c in zip(sample(1_500, seed=13).items(), COLUMNS, strict=True)}
    written = arrow_batch(values)
    fields = [Field(c.name, c.type) for c in COLUMNS]
    data = container(WIDE.avro(), encode_blocks([(written, fields, None)]), "zstandard")
    [(name, batch, positions)] = decode_segment(io.BytesIO(data), {"databus.s.wide": fields})
    assert name == "databus.s.wide" and positions.tolist() == list(range(1_500))
    assert_same(batch, written)


# -- unions -------------------------------------------------------------------------------------

SMALL = [Field("id", ColumnType("long"), nullable=False), Field("v", ColumnType("string")),
         *EVENT_AVRO_FIELDS]
TINY = [Field("flag", ColumnType("boolean")), Field("d", ColumnType.decimal(12, 3), nullable=False)]


def interleaved(codec: str, rows: int = 1_500) -> tuple[bytes, dict[str, list[Field]]]:
    """Three record branches in one union, their records interleaved at random, with empty blocks."""
    rng = random.Random(3)
    wide = arrow_batch(sample(rows, seed=4))
    small = pa.RecordBatch.from_pydict({
        "id": pa.array(range(rows), pa.int64()), "v": pa.array([rng.choice(["", "é", None, "v"]) for _ in range(rows)]),
        "__scn": pa.array(range(rows), pa.int64()), "__window_scn": pa.array(range(rows), pa.int64()),
        "__seq": pa.array([i % 7 for i in range(rows)], pa.int32()), "__op": pa.array(["i"] * rows),
        "__key": pa.array([f"[{i}]" for i in range(rows)]),
        "__partition": pa.array([i % 65_536 for i in range(rows)], pa.int32()),
        "__commit_ts_ms": pa.array([1_700_000_000_000 + i for i in range(rows)], pa.int64())})
    tiny = pa.RecordBatch.from_pydict({
        "flag": pa.array([rng.choice([True, False, None]) for _ in range(rows)]),
        "d": pa.array([Decimal(rng.randrange(-10**12 + 1, 10**12)).scaleb(-3) for _ in range(rows)],
                      pa.decimal128(12, 3))})
    wide_fields = [Field(c.name, c.type) for c in COLUMNS]
    order = list(range(3 * rows))
    rng.shuffle(order)
    order = order[: 2 * rows]  # some rows of each table are left out: branches hold different counts
    blocks = encode_blocks([(wide, wide_fields, 0), (small, SMALL, 1), (tiny, TINY, 2)], order=np.array(order),
                           block_records=333)
    empty = pa.array([], pa.large_binary())
    schema = [{**WIDE.avro(), "name": "w"}, record("small", SMALL, "other.ns"), record("tiny", TINY)]
    branches = {"databus.s.w": wide_fields, "other.ns.small": SMALL, "databus.test.tiny": TINY}
    return container(schema, [empty, *blocks[:3], empty, *blocks[3:], empty], codec), branches


@pytest.mark.parametrize("codec", CODECS)
def test_a_union_of_interleaved_branches_decodes_branch_by_branch_with_positions(codec: str) -> None:
    data, branches = interleaved(codec)
    assert_reads_like_fastavro(data, branches, rows=(500, 65_536))
    got = by_decoder(io.BytesIO(data), branches)
    assert sorted(p for _, positions in got.values() for p in positions) == list(range(3_000))


def test_branches_not_asked_for_are_skipped_over() -> None:
    data, branches = interleaved("zstandard", rows=600)
    for name in branches:
        assert_reads_like_fastavro(data, {name: branches[name]})


def test_a_union_of_more_branches_than_one_byte_of_branch_index_holds() -> None:
    fields = [Field("id", ColumnType("long"), nullable=False), Field("v", ColumnType("short"))]
    tables = [(pa.RecordBatch.from_pydict({"id": pa.array([i, -i], pa.int64()), "v": pa.array([i, None], pa.int16())}),
               fields, i) for i in range(70)]  # branches 64..69 take two bytes
    order = np.random.default_rng(5).permutation(140)
    data = container([record(f"t{i}", fields) for i in range(70)], encode_blocks(tables, order=order))
    assert_reads_like_fastavro(data, {f"databus.test.t{i}": fields for i in range(0, 70, 3)})


@pytest.mark.parametrize("runs", [False, True])
def test_branches_holding_more_than_their_share_of_a_group_get_more_room(runs: bool) -> None:
    # One table with most of the events, a few with some, many with none: shuffled, or one table after
    # another as a bootstrap writes them. The decoder sizes each branch's room by an even share first.
    fields = [Field("id", ColumnType("long"), nullable=False), Field("v", ColumnType("string"))]
    sizes = [9_000, 2_500, 1_200, 300, *([0] * 8), 1]
    tables = [(pa.RecordBatch.from_pydict({"id": pa.array(range(size), pa.int64()),
                                           "v": pa.array([f"{b}:{i}" if i % 5 else None for i in range(size)])}),
               fields, b) for b, size in enumerate(sizes)]
    order = None if runs else np.random.default_rng(9).permutation(sum(sizes))
    data = container([record(f"t{b}", fields) for b in range(len(sizes))],
                     encode_blocks(tables, order=order, block_records=6_500))
    every = {f"databus.test.t{b}": fields for b in range(len(sizes))}
    assert_reads_like_fastavro(data, every, rows=(13_000, 65_536))
    assert_reads_like_fastavro(data, {name: every[name] for name in ("databus.test.t1", "databus.test.t2")})


@pytest.mark.parametrize("workers", [2, 3])
def test_groups_decoded_on_threads_come_out_as_decoded_in_turn(workers: int) -> None:
    data, branches = interleaved("zstandard", rows=1_000)
    alone = list(decode_segment(io.BytesIO(data), branches, rows=300))
    threaded = list(decode_segment(io.BytesIO(data), branches, rows=300, workers=workers))
    assert [(name, positions.tolist()) for name, _, positions in threaded] == [
        (name, positions.tolist()) for name, _, positions in alone]
    for (_, got, _), (_, want, _) in zip(threaded, alone, strict=True):
        assert_same(got, want)


def test_without_fields_every_branch_decodes_as_its_avro_schema_reads() -> None:
    data, _ = interleaved("null", rows=500)
    metadata, _ = read_container(io.BytesIO(data))
    schema = json.loads(metadata["avro.schema"])
    inferred = {f"{r.get('namespace', 'databus.s')}.{r['name']}": fields_of(r) for r in schema}
    assert [str(f.type) for f in inferred["other.ns.small"]] == ["long", "string", "long", "long", "integer",
                                                                   "string", "string", "integer", "long"]
    want = by_fastavro(data, inferred)
    got = by_decoder(io.BytesIO(data), None)
    assert got.keys() == want.keys()
    for name, (batch, positions) in want.items():
        assert_same(got[name][0], batch)
        assert got[name][1] == positions


def test_the_container_header_and_blocks() -> None:
    data, _ = interleaved("deflate", rows=500)
    metadata, blocks = read_container(io.BytesIO(data))
    assert metadata["databus.test"] == "yes" and metadata["avro.codec"] == "deflate"
    counts = [b.count for b in blocks]
    assert counts[0] == 0 and sum(counts) == 1_000 and counts.count(0) == 3
    decoder = Decoder(json.loads(metadata["avro.schema"]))
    assert decoder.names == ("databus.s.w", "other.ns.small", "databus.test.tiny")
    assert list(decoder.decode([])) == []


# -- real segments --------------------------------------------------------------------------------

PEOPLE = TableSchema("s", "people", (Column("id", ColumnType("long")), Column("name", ColumnType("string"))), ("id",))
PEOPLE_V2 = TableSchema("s", "people", (*PEOPLE.columns, Column("born", ColumnType("date"))), ("id",))
WIDE_TABLE = TableSchema("s", "wide", (Column("id", ColumnType("long")), *COLUMNS), ("id",))


def windows(first_scn: int, count: int, seed: int, people: TableSchema) -> list[Window]:
    """Windows of a few events each, both tables mixed within a window."""
    rng = random.Random(seed)
    values = sample(count, seed)
    out, scn, pending = [], first_scn, []
    for i in range(count):
        if rng.random() < 0.5:
            row = {"id": i, **{c.name: None if values[c.name][i] is None else c.type.check(values[c.name][i])
                               for c in COLUMNS}}
            event = ChangeEvent(Scn(scn), len(pending), "wide", Op.INSERT, (i,), row, 1_000 + scn)
        else:
            row = {"id": i, "name": rng.choice(["ann", "bö", None]), "born": dt.date(1900 + i % 200, 1, 1)}
            row = {c.name: row[c.name] for c in people.columns}
            event = ChangeEvent(Scn(scn), len(pending), "people", rng.choice([Op.UPDATE, Op.DELETE]), (i,), row,
                                1_000 + scn)
        pending.append(event)
        if rng.random() < 0.2 or i == count - 1:
            out.append(Window(Scn(scn), tuple(pending)))
            pending = []
        scn += 1
    return out


def test_segments_the_log_writer_writes_decode_to_the_batches_it_was_given(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, "s")
    with log.writer() as w:
        w.register_schemas([WIDE_TABLE, PEOPLE])
        first = windows(1, 1_500, seed=1, people=PEOPLE)
        w.append(first, "e1")
        w.register_schemas([WIDE_TABLE, PEOPLE_V2])  # a second version of people: another branch
        second = windows(10_000, 1_500, seed=2, people=PEOPLE_V2)
        w.append_batch(ChangeBatch.from_windows(second, w.schemas()), "e1")
    written = [(first, {"wide": WIDE_TABLE, "people": PEOPLE}), (second, {"wide": WIDE_TABLE, "people": PEOPLE_V2})]
    for segment, (events, schemas) in zip(log.manifest().segments, written, strict=True):
        path = log.segments_dir / segment.file
        with open(path, "rb") as f:
            metadata, _ = read_container(f)
        rows = json.loads(metadata["databus.rows"])
        branches = {f"{ROW_NAMESPACE}.{name}": [*(Field(c.name, c.type) for c in log.schemas.load(t, v).columns),
                                                *EVENT_AVRO_FIELDS] for name, (t, v) in rows.items()}
        data = path.read_bytes()
        assert_reads_like_fastavro(data, branches)
        expected = ChangeBatch.from_windows(events, schemas)
        got = by_decoder(path, branches)
        order: list[tuple[int, str]] = []
        for name, (table, _) in rows.items():
            batch, positions = got[f"{ROW_NAMESPACE}.{name}"]
            assert batch.schema == batch_schema(schemas[table])
            assert_same(batch, expected.tables[table])
            order += [(p, table) for p in positions]
        # Positions interleave the tables back into commit order.
        assert [t for _, t in sorted(order)] == [e.table for window in events for e in window.events]


# -- what fastavro reads differently, or refuses ---------------------------------------------------


def test_booleans_and_number_texts_read_as_fastavro_reads_them() -> None:
    fields = [Field("b", ColumnType("boolean"), nullable=False), Field("n", ColumnType("number"))]
    texts = ["1e2", "+1", "00.5", "-0", "1.50", "0.0", ".5", "7.", "NaN", "-0.000", "12"]
    records = [bytes([2 * i % 256 if i % 3 else 0]) + b"\x02" + bytes([2 * len(t)]) + t.encode()
               for i, t in enumerate(texts)]
    data = container(record("r", fields), [raw_records(*records)])
    assert_reads_like_fastavro(data, {"databus.test.r": fields})
    [(_, batch, _)] = decode_segment(io.BytesIO(data), {"databus.test.r": fields})
    assert batch.column("n").to_pylist()[:4] == ["100", "1", "0.5", "-0"]


def test_decimals_longer_than_sixteen_bytes_only_by_their_sign_decode_as_fastavro_reads_them() -> None:
    fields = [Field("d", ColumnType.decimal(38, 2), nullable=False)]
    values = [b"\x00" * 16 + b"\x01", b"\xff" * 19 + b"\x80" + b"\x00" * 3, b"\x00" * 4 + (10**38 - 1).to_bytes(16),
              b"\xff" * 30 + (-(10**38 - 1)).to_bytes(16, signed=True), b""]
    data = container(record("r", fields), [raw_records(*(bytes([2 * len(v)]) + v for v in values))])
    assert_reads_like_fastavro(data, {"databus.test.r": fields})
    for wide in (b"\x01" + b"\x00" * 16, b"\x00" + b"\x80" + b"\x00" * 15):  # 2^128; 2^127 (needs a sign byte)
        data = container(record("r", fields), [raw_records(bytes([2 * len(wide)]) + wide)])
        with pytest.raises(ValueError, match="wider than 128 bits"):
            list(decode_segment(io.BytesIO(data), {"databus.test.r": fields}))


def test_fields_not_as_the_branch_describes_them_are_refused_before_decoding() -> None:
    fields = [Field("id", ColumnType("long")), Field("v", ColumnType("string"))]
    data = container(record("r", fields), [encode_records(pa.RecordBatch.from_pydict(
        {"id": pa.array([1], pa.int64()), "v": pa.array(["a"])}), fields)])
    refused = {
        "is not how nullable binary": [fields[0], Field("v", ColumnType("binary"))],
        "is not how long": [Field("id", ColumnType("long"), nullable=False), fields[1]],
        "not the expected": [fields[0]],
        "is not how nullable decimal": [fields[0], Field("v", ColumnType.decimal(5, 2))],
    }
    for message, wanted in refused.items():
        with pytest.raises(ValueError, match=message):
            decode_segment(io.BytesIO(data), {"databus.test.r": wanted})
    with pytest.raises(ValueError, match="not in the container's schema"):
        decode_segment(io.BytesIO(data), {"databus.test.other": fields})


@pytest.mark.parametrize("shape", [
    {"type": "array", "items": "long"},
    {"type": "map", "values": "long"},
    {"type": "fixed", "name": "f16", "size": 16},
    {"type": "enum", "name": "e", "symbols": ["a"]},
    ["null", "long", "string"],
    ["long", "null"],
    {"type": "record", "name": "inner", "fields": []},
    "databus.test.r",  # a named type by reference
])
def test_avro_shapes_no_product_type_is_written_as_are_refused_even_in_branches_only_skipped(shape: Any) -> None:
    odd = {"type": "record", "name": "odd", "fields": [{"name": "x", "type": shape}]}
    plain = record("r", [Field("id", ColumnType("long"))])
    data = container([plain, odd], [])
    for branches in ({"databus.test.r": [Field("id", ColumnType("long"))]}, None):
        with pytest.raises(ValueError, match="field x"):
            decode_segment(io.BytesIO(data), branches)


def test_other_containers_are_refused() -> None:
    plain = record("r", [Field("id", ColumnType("long"))])
    with pytest.raises(ValueError, match="record or a union of records"):
        decode_segment(io.BytesIO(container("long", [])))
    with pytest.raises(ValueError, match="record or a union of records"):
        decode_segment(io.BytesIO(container(["null", plain], [])))
    snappy = container(plain, []).replace(b"\x14avro.codec\x08null", b"\x14avro.codec\x0csnappy")
    with pytest.raises(ValueError, match="codec 'snappy'"):
        decode_segment(io.BytesIO(snappy))
    with pytest.raises(ValueError, match="not an Avro object container"):
        decode_segment(io.BytesIO(b"PAR1"))


def out_of_range(written: Field, read: Field, value: Any) -> bytes:
    batch = pa.RecordBatch.from_arrays([written.type.to_arrow([value])], names=[read.name])
    return container(record("r", [read]), [encode_records(batch, [written])])


@pytest.mark.parametrize(("written", "read", "value"), [
    (ColumnType("long"), ColumnType("integer"), 2**40),  # an Avro int holding more than 32 bits
    (ColumnType("integer"), ColumnType("short"), 40_000),
    (ColumnType("integer"), ColumnType("byte"), -129),
    (ColumnType("integer"), ColumnType("date"), 3_000_000),  # after 9999-12-31
    (ColumnType("long"), ColumnType("timestamp"), -(2**62)),  # before year 1
    (ColumnType("long"), ColumnType("timestamp_ntz"), 2**62),
    (ColumnType.decimal(20, 2), ColumnType.decimal(10, 2), Decimal("123456789012.34")),
])
def test_values_fastavro_or_to_arrow_refuse_are_refused(written: ColumnType, read: ColumnType, value: Any) -> None:
    if read.kind in ("date", "timestamp", "timestamp_ntz"):
        read_avro = read.avro()
        data = container({"type": "record", "name": "r", "namespace": "databus.test",
                          "fields": [{"name": "x", "type": ["null", read_avro]}]},
                         [encode_records(pa.RecordBatch.from_arrays([pa.array([value], written.arrow())],
                                                                    names=["x"]), [Field("x", written)])])
    else:
        data = out_of_range(Field("x", written), Field("x", read), value)
    fields = {"databus.test.r": [Field("x", read)]}
    with pytest.raises(Exception):  # noqa: B017 - fastavro and Arrow raise their own kinds
        by_fastavro(data, fields)
    with pytest.raises(ValueError, match="field x"):
        list(decode_segment(io.BytesIO(data), fields))


def test_wide_decimals_of_more_digits_than_their_precision_are_refused_not_rounded() -> None:
    # fastavro rounds them to the precision (11...15 to 1.1...1E+60), and the text column takes that.
    data = out_of_range(Field("x", ColumnType.decimal(70, 0)), Field("x", ColumnType.decimal(50, 0)),
                        Decimal("1" * 60 + "5"))
    fields = {"databus.test.r": [Field("x", ColumnType.decimal(50, 0))]}
    assert by_fastavro(data, fields)["databus.test.r"][0].column("x").to_pylist() == ["1" * 50 + "0" * 11]
    with pytest.raises(ValueError, match="more than 50 digits"):
        list(decode_segment(io.BytesIO(data), fields))


def test_damaged_containers_are_refused() -> None:
    fields = [Field("id", ColumnType("long")), Field("v", ColumnType("string"))]
    batch = pa.RecordBatch.from_pydict({"id": pa.array(range(100), pa.int64()), "v": pa.array(["x" * 50] * 100)})
    data = container(record("r", fields), [encode_records(batch, fields)])
    branches = {"databus.test.r": fields}
    with pytest.raises(ValueError, match="ends at byte"):
        list(decode_segment(io.BytesIO(data[:-40]), branches))
    with pytest.raises(ValueError, match="sync marker"):
        list(decode_segment(io.BytesIO(data[:-1] + bytes([data[-1] ^ 1])), branches))
    # A block whose record count is one more, or one less, than its records: framing and records disagree.
    sync = data[-16:]
    block = data.index(sync) + 16  # the first block follows the header, which ends with the sync marker
    assert data[block:block + 2] == b"\xc8\x01"  # 100 records
    too_many = data[:block] + b"\xca\x01" + data[block + 2:]
    too_few = data[:block] + b"\xc6\x01" + data[block + 2:]
    with pytest.raises(ValueError, match="runs past the end of its block"):
        list(decode_segment(io.BytesIO(too_many), branches))
    with pytest.raises(ValueError, match="bytes after its 99 records"):
        list(decode_segment(io.BytesIO(too_few), branches))
    bad_null = container(record("r", fields), [raw_records(b"\x04\x02")])
    with pytest.raises(ValueError, match="union index 2"):
        list(decode_segment(io.BytesIO(bad_null), branches))
    not_utf8 = container(record("r", fields), [raw_records(b"\x00\x02\x02\xff")])
    with pytest.raises(ValueError, match="field v"):
        list(decode_segment(io.BytesIO(not_utf8), branches))
    numbers = [Field("n", ColumnType("number"))]
    for text in (b"\xff", b"1x", b""):  # not UTF-8, not a decimal, empty: fastavro's path refuses them too
        odd = container(record("r", numbers), [raw_records(b"\x02" + bytes([2 * len(text)]) + text)])
        with pytest.raises(ValueError, match="field n"):
            list(decode_segment(io.BytesIO(odd), {"databus.test.r": numbers}))
    union = container([record("r", fields)], [raw_records(b"\x02\x00\x00")])
    with pytest.raises(ValueError, match="names union branch 1"):
        list(decode_segment(io.BytesIO(union), {"databus.test.r": fields}))
