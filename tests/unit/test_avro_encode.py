"""The encoding kernels on inputs the columnar and decoder tests do not make: columns sliced at offsets
of their own, chunked columns, all-null and empty columns, long values, other Arrow layouts and
unaligned buffers, decimal text (and the Python path for text that is not plain), many interleaved
tables; every record byte for byte what fastavro writes."""

from __future__ import annotations

import decimal
import io
import itertools
import random
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from dagster_databus.core.types import ColumnType
from dagster_databus.log.avro.encoder import encode_blocks, encode_records
from dagster_databus.log.avro.fields import Field
from tests.unit.test_avro_decode import COLUMNS, EDGES

FIELDS = [Field(c.name, c.type) for c in COLUMNS]


def record(fields: Sequence[Field]) -> dict[str, Any]:
    return {"type": "record", "name": "r", "namespace": "databus.test",
            "fields": [{"name": f.name, "type": ["null", f.type.avro()] if f.nullable else f.type.avro()}
                       for f in fields]}


def varint(value: int) -> bytes:
    u, out = (value << 1) ^ (value >> 63), bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    return bytes([*out, u])


def fastavro_records(batch: pa.RecordBatch | pa.Table, fields: Sequence[Field],
                     union_index: int | None = None) -> list[bytes]:
    """fastavro's encoding of each row's canonical values (``ColumnType.from_arrow``)."""
    schema = fastavro.parse_schema(record(fields))
    columns = {f.name: f.type.from_arrow(batch.column(f.name)) for f in fields}
    out = []
    for i in range(batch.num_rows):
        buffer = io.BytesIO()
        if union_index is not None:
            buffer.write(varint(union_index))
        fastavro.schemaless_writer(buffer, schema, {f.name: f.type.to_avro(columns[f.name][i]) for f in fields})
        out.append(buffer.getvalue())
    return out


def assert_encodes_like_fastavro(batch: pa.RecordBatch | pa.Table, fields: Sequence[Field]) -> None:
    records = encode_records(batch, fields)
    assert records.type == pa.large_binary() and len(records) == batch.num_rows
    assert records.to_pylist() == fastavro_records(batch, fields)


def edge_column(column: Any, rows: int, seed: int, nulls: bool = True) -> list[Any]:
    rng = random.Random(seed)
    return [rng.choice([*EDGES[str(column.type)], *([None] if nulls else [])]) for _ in range(rows)]


def test_columns_sliced_each_at_an_offset_of_its_own() -> None:
    # Offsets 0..12: values, offsets and validity bitmaps all start mid-buffer, and mid-byte.
    arrays = [c.type.to_arrow(edge_column(c, 900 + i, seed=i)).slice(i % 13, 700) for i, c in enumerate(COLUMNS)]
    batch = pa.RecordBatch.from_arrays(arrays, names=[c.name for c in COLUMNS])
    assert len({a.offset for a in arrays}) == 13
    assert_encodes_like_fastavro(batch, FIELDS)
    # Again sliced: offsets add up.
    assert_encodes_like_fastavro(batch.slice(5, 300), FIELDS)


def test_chunked_columns_of_a_table_chunked_differently() -> None:
    rows = 1_000
    columns = []
    for i, c in enumerate(COLUMNS):
        array = c.type.to_arrow(edge_column(c, rows, seed=40 + i))
        cuts = [0, *sorted(random.Random(i).sample(range(1, rows), i % 4)), rows]
        columns.append(pa.chunked_array([array.slice(a, b - a) for a, b in itertools.pairwise(cuts)],
                                        array.type))
    table = pa.Table.from_arrays(columns, names=[c.name for c in COLUMNS])
    assert {col.num_chunks for col in table.columns} == {1, 2, 3, 4}
    assert_encodes_like_fastavro(table, FIELDS)
    blocks = encode_blocks([(table, FIELDS, None)], block_records=300)
    assert pa.concat_arrays(blocks).to_pylist() == fastavro_records(table, FIELDS)


def test_columns_with_every_row_null() -> None:
    rows = 37
    typed = [pa.nulls(rows, c.type.arrow()) for c in COLUMNS]
    untyped = [pa.nulls(rows) for _ in COLUMNS]  # Arrow's null type: no buffers at all
    for arrays in (typed, untyped):
        batch = pa.RecordBatch.from_arrays(arrays, names=[c.name for c in COLUMNS])
        assert encode_records(batch, FIELDS).to_pylist() == [b"\x00" * len(COLUMNS)] * rows
        assert encode_records(batch.slice(3, 9), FIELDS, union_index=64).to_pylist() == \
            [b"\x80\x01" + b"\x00" * len(COLUMNS)] * 9


def test_empty_batches_tables_and_orders() -> None:
    empty = pa.RecordBatch.from_arrays([c.type.to_arrow([]) for c in COLUMNS], names=[c.name for c in COLUMNS])
    records = encode_records(empty, FIELDS, union_index=3)
    assert records.type == pa.large_binary() and len(records) == 0
    assert encode_blocks([(empty, FIELDS, 0)]) == []
    assert encode_blocks([(empty, FIELDS, 0)], order=np.array([], dtype=np.int64)) == []
    # An empty table between others: positions skip past it.
    ids = pa.RecordBatch.from_pydict({"id": pa.array([5, 6, 7], pa.int64())})
    fields = [Field("id", ColumnType("long"), nullable=False)]
    blocks = encode_blocks([(ids, fields, 0), (empty, FIELDS, 1), (ids, fields, 2)], order=np.array([3, 0, 5, 1]))
    assert [b.to_pylist() for b in blocks] == [[b"\x04\x0a", b"\x00\x0a", b"\x04\x0e", b"\x00\x0c"]]
    # A record of no fields is no bytes (or only its branch).
    assert encode_records(ids, []).to_pylist() == [b""] * 3
    assert encode_records(ids, [], union_index=1).to_pylist() == [b"\x02"] * 3


@pytest.mark.parametrize("layout", ["plain", "large", "view", "dictionary"])
def test_long_text_and_bytes_in_any_arrow_layout(layout: str) -> None:
    sizes = [0, 1, 63, 64, 8_191, 8_192, 1_048_579]  # lengths of 1, 2 and 3 varint bytes
    text = [("é中😀x" * (n // 4 + 1))[:n] for n in sizes] + [None]
    data = [bytes(range(256)) * (n // 256) + bytes(n % 256) for n in sizes] + [None]
    strings, binaries = pa.array(text, pa.string()), pa.array(data, pa.binary())
    if layout == "large":
        strings, binaries = strings.cast(pa.large_string()), binaries.cast(pa.large_binary())
    elif layout == "view":
        strings, binaries = strings.cast(pa.string_view()), binaries.cast(pa.binary_view())
    elif layout == "dictionary":
        strings, binaries = strings.dictionary_encode(), binaries.dictionary_encode()
    batch = pa.RecordBatch.from_arrays([strings, binaries, strings], names=["s", "b", "n"])
    fields = [Field("s", ColumnType("string")), Field("b", ColumnType("binary")), Field("n", ColumnType("string"))]
    assert_encodes_like_fastavro(batch, fields)
    assert_encodes_like_fastavro(batch.slice(2, 5), fields)


def test_integer_columns_in_other_arrow_types() -> None:
    values = [0, 1, -1, 63, 64, -65, 127, None]
    unsigned = [0, 1, 63, 64, 127, 128, 255, None]
    batch = pa.RecordBatch.from_pydict({
        "i8": pa.array(values, pa.int8()), "i16": pa.array(values, pa.int16()),
        "u8": pa.array(unsigned, pa.uint8()), "u16": pa.array([*unsigned[:-1], 65_535], pa.uint16()),
        "u32": pa.array([*unsigned[:-1], 2**32 - 1], pa.uint32()),
        "u64": pa.array([*unsigned[:-1], 2**63 - 1], pa.uint64()),
    })
    fields = [Field(name, ColumnType("long")) for name in batch.schema.names]
    assert_encodes_like_fastavro(batch, fields)
    assert_encodes_like_fastavro(batch, [Field("i8", ColumnType("integer")), Field("i16", ColumnType("short"))])


def test_decimal128_lengths_at_every_byte_boundary() -> None:
    # Two's complement boundaries of each width: 2^(8n-1) - 1 takes n bytes, -2^(8n-1) takes n + 1
    # (as fastavro and Java's BigInteger write it), its neighbours the widths on either side.
    values = sorted({sign * (2 ** (8 * n - 1) + d) for n in range(1, 16) for d in (-1, 0, 1) for sign in (1, -1)})
    typ = ColumnType.decimal(38, 0)
    batch = pa.RecordBatch.from_arrays([typ.to_arrow([Decimal(v) for v in values])], names=["d"])
    assert_encodes_like_fastavro(batch, [Field("d", typ, nullable=False)])


WIDE_TEXT = ["0", "-0", "1", "-1", "12.5", "-0.000", "000123.40", "9" * 35 + "." + "9" * 30,
             "-" + "9" * 35 + "." + "9" * 30, "-0." + "0" * 29 + "1", "128", "-128", "-129", "255", "-256",
             "1" + "0" * 46, None]


@pytest.mark.parametrize("typ", [ColumnType.decimal(65, 30), ColumnType.decimal(76, 0), ColumnType.decimal(40, 7)])
def test_wide_decimals_as_plain_text_of_any_scale(typ: ColumnType) -> None:
    # Fewer fractional digits than the scale (or none) are zeros; leading zeros and "-0" are values too.
    texts = [t for t in WIDE_TEXT if t is None or (-Decimal(t).as_tuple().exponent <= typ.scale
                                                   and Decimal(t).adjusted() + 1 + typ.scale <= typ.precision)]
    for text in (pa.array(texts, pa.string()), pa.array(texts, pa.large_string())):
        batch = pa.RecordBatch.from_arrays([text], names=["d"])
        assert_encodes_like_fastavro(batch, [Field("d", typ)])


def test_wide_decimal_text_past_the_scale_is_truncated_toward_zero() -> None:
    typ = ColumnType.decimal(65, 2)
    texts = ["1.239", "-1.239", "-0.001", "0.999", "12.5"]
    [records] = [encode_records(pa.RecordBatch.from_arrays([pa.array(texts)], names=["d"]),
                                [Field("d", typ, nullable=False)]).to_pylist()]
    for text, got in zip(texts, records, strict=True):
        unscaled = int(Decimal(text).scaleb(2))
        value = unscaled.to_bytes((abs(unscaled).bit_length() + 8) // 8, "big", signed=True)
        assert got == varint(len(value)) + value, text


def test_decimal_text_that_is_not_plain_goes_through_python_decimal() -> None:
    typ = ColumnType.decimal(65, 3)
    texts = ["1E+2", "+5", " 7", "1_000", "12.", ".5", "-2.5e-2", None, "3.25"]
    batch = pa.RecordBatch.from_arrays([pa.array(texts)], names=["d"])
    assert_encodes_like_fastavro(batch, [Field("d", typ)])
    with pytest.raises(decimal.InvalidOperation):
        encode_records(pa.RecordBatch.from_arrays([pa.array(["1.5", "x"])], names=["d"]), [Field("d", typ)])


def test_decimals_in_a_wider_arrow_type() -> None:
    typ = ColumnType.decimal(38, 2)
    values = [Decimal("1.25"), Decimal("-99.99"), None, Decimal(0)]
    batch = pa.RecordBatch.from_arrays([pa.array(values, pa.decimal256(38, 2))], names=["d"])
    assert_encodes_like_fastavro(batch, [Field("d", typ)])


def test_many_tables_interleaved_in_commit_order() -> None:
    # More tables than a group of the kernel holds a few records each of, and more records than a tile.
    tables, rows = 100, 120
    fields = [Field("id", ColumnType("long"), nullable=False), Field("v", ColumnType("string")),
              Field("d", ColumnType.decimal(12, 3))]
    batches = [pa.RecordBatch.from_pydict({
        "id": pa.array([t * 1_000 + i for i in range(rows)], pa.int64()),
        "v": pa.array([None if i % 7 == 0 else f"{t}:{i}" * (i % 5) for i in range(rows)]),
        "d": pa.array([Decimal(i * 37 - 2_000).scaleb(-3) for i in range(rows)], pa.decimal128(12, 3))})
        for t in range(tables)]
    expected = [r for t, batch in enumerate(batches) for r in fastavro_records(batch, fields, union_index=t)]
    order = np.random.default_rng(8).permutation(tables * rows)
    blocks = encode_blocks([(batch, fields, t) for t, batch in enumerate(batches)], order=order, block_records=5_000)
    assert [len(b) for b in blocks] == [5_000, 5_000, 2_000]
    assert pa.concat_arrays(blocks).to_pylist() == [expected[p] for p in order]


def test_positions_outside_the_tables_are_refused() -> None:
    ids = pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int64())})
    fields = [Field("id", ColumnType("long"))]
    for order in ([0, 2], [-1]):
        with pytest.raises(IndexError):
            encode_blocks([(ids, fields, None)], order=np.array(order))


def test_nulls_in_a_field_that_is_not_nullable_are_refused() -> None:
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, None], pa.int64())})
    with pytest.raises(ValueError, match="holds nulls but is not nullable"):
        encode_records(batch, [Field("id", ColumnType("long"), nullable=False)])


def test_buffers_at_unaligned_addresses() -> None:
    # Arrow allows them (a buffer sliced off another, memory from elsewhere); the kernel reads aligned copies.
    def unaligned(data: bytes) -> pa.Buffer:
        buffer = pa.py_buffer(b"\0" + data).slice(1)
        assert buffer.address % 8
        return buffer

    ids = pa.Array.from_buffers(pa.int64(), 4, [None, unaligned(np.array([1, -2, 300, 2**40], np.int64).tobytes())])
    text = pa.Array.from_buffers(pa.string(), 3, [None, unaligned(np.array([0, 2, 2, 7], np.int32).tobytes()),
                                                  unaligned(b"abcdefg")])
    batch = pa.RecordBatch.from_arrays([ids.slice(1), text], names=["id", "s"])
    assert_encodes_like_fastavro(batch, [Field("id", ColumnType("long")), Field("s", ColumnType("string"))])
