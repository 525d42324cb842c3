"""Table fingerprints for reconciliation: row counts and order-independent hashes per key bucket.

A row's digest is the first 64 bits of the MD5 of its canonical text; a table's fingerprint is,
for each of ``BUCKETS`` buckets (the top 12 bits of the CRC-32 of the row's key text), the row count
and the sum of digests modulo 2**64. Sums do not depend on row order, so a source database can
compute them in one aggregate query (a kind's ``fingerprint.sql``) and this module computes the
same figures from Arrow batches (Delta snapshots, streamed sources) in bounded memory. Buckets
that differ locate the rows to compare one by one.

The canonical text is defined per column type so that SQL can produce it byte for byte:

- each column contributes, in schema order, ``<byte length>:<value text>`` for strings and binary
  (which may hold any byte) and ``<value text>|`` for every other type (whose texts never hold ``|``);
  ``-`` and ``-|`` when NULL;
- integers, decimals: their decimal text (decimals with exactly ``scale`` fractional digits);
- float, double: ``<e>:<m>`` with ``value = m * 2**(e-53)`` (``frexp``), exact and free of any
  text formatting; ``0`` for zero;
- date: days since 1970-01-01; timestamp, timestamp_ntz, time: microseconds (since the epoch);
- boolean: ``1`` or ``0``; string: its UTF-8 bytes; binary: its bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_databus.core.kernels import few, kernel
from dagster_databus.core.schema import TableSchema
from dagster_databus.core.types import ColumnType

BUCKET_BITS = 12
BUCKETS = 1 << BUCKET_BITS
NULL_TEXT = b"-"
_MASK = (1 << 64) - 1


@dataclass
class Fingerprint:
    """Per bucket: row count and the sum of row digests modulo 2**64."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(BUCKETS, np.int64))
    sums: np.ndarray = field(default_factory=lambda: np.zeros(BUCKETS, np.uint64))

    @property
    def rows(self) -> int:
        return int(self.counts.sum())

    @property
    def digest(self) -> int:
        """The whole table's order-independent hash."""
        return int(self.sums.sum(dtype=np.uint64)) & _MASK

    def add(self, buckets: np.ndarray, digests: np.ndarray, sign: int = 1) -> None:
        """Count rows in (sign 1) or out (sign -1)."""
        _accumulate(self.counts, self.sums, buckets, digests, sign)

    def add_bucket(self, bucket: int, rows: int, digest_sum: int) -> None:
        self.counts[bucket] += rows
        self.sums[bucket] = np.uint64((int(self.sums[bucket]) + digest_sum) & _MASK)

    def differing(self, other: Fingerprint) -> list[int]:
        """Buckets whose count or hash differs from ``other``'s."""
        return np.flatnonzero((self.counts != other.counts) | (self.sums != other.sums)).tolist()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fingerprint) and not self.differing(other)

    __hash__ = None  # type: ignore[assignment]


def value_text(array: pa.Array, column_type: ColumnType) -> pa.Array:
    """A column's values as canonical text (binary), nulls kept."""
    kind = column_type.kind
    if kind in ("float", "double"):
        return _float_text(array)
    if kind == "boolean":
        array = pc.cast(array, pa.int8())
    elif kind in ("date", "timestamp", "timestamp_ntz"):
        if pa.types.is_timestamp(array.type) and array.type.unit != "us":
            array = pc.cast(array, pa.timestamp("us", array.type.tz))
        array = pc.cast(array, pa.int32() if kind == "date" else pa.int64())
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        return pc.cast(array, pa.binary())
    return pc.cast(pc.cast(array, pa.string()), pa.binary())


def _float_text(array: pa.Array) -> pa.Array:
    values = pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)
    valid = np.asarray(array.is_valid()) if array.null_count else np.ones(len(values), bool)
    special = np.isnan(values) | np.isinf(values)
    values = np.where(valid & ~special, values, 0.0)
    mantissa, exponent = np.frexp(np.abs(values))
    whole = np.ldexp(mantissa, 53).astype(np.int64) * np.where(np.signbit(values), -1, 1)
    text = pc.binary_join_element_wise(pa.array(exponent.astype(np.int64)).cast(pa.string()),
                                       pa.array(whole).cast(pa.string()), ":")
    text = pc.if_else(pa.array(values == 0), pa.scalar("0"), text)
    if special.any():  # some databases' binary doubles hold these, others' cannot
        raw = pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)
        names = np.where(np.isnan(raw), "nan", np.where(raw > 0, "inf", "-inf"))
        text = pc.if_else(pa.array(special), pa.array(names), text)
    return pc.cast(pc.if_else(pa.array(valid), text, pa.scalar(None, pa.string())), pa.binary())


def part(text: pa.Array, column_type: ColumnType) -> pa.Array:
    """One column's contribution to the row text (see the module's docstring)."""
    if column_type.kind in ("string", "binary"):
        length = pc.cast(pc.cast(pc.binary_length(text), pa.string()), pa.binary())
        return pc.fill_null(pc.binary_join_element_wise(length, b":", text, b""), NULL_TEXT)
    return pc.binary_join_element_wise(pc.fill_null(text, NULL_TEXT), b"|", b"")


def row_texts(batch: pa.RecordBatch | pa.Table, schema: TableSchema,
              columns: Sequence[str] | None = None) -> tuple[pa.Array, pa.Array]:
    """(key text, row text) of each row; ``columns`` (default: all) in ``schema`` order."""
    names = list(columns) if columns is not None else list(schema.column_names)
    parts = {c.name: part(_flat(value_text(_flat(batch.column(c.name)), c.type)), c.type)
             for c in schema.columns if c.name in names or c.name in schema.primary_key}
    key = _join([parts[k] for k in schema.primary_key])
    row = _join([parts[n] for n in schema.column_names if n in names])
    return key, row


def _join(parts: Sequence[pa.Array]) -> pa.Array:
    return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, b"")


def _flat(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


SMALL_DIGESTS = 256  # fewer texts than this are hashed by hashlib, a text at a time (``kernels.few``)


def digests(texts: pa.Array) -> np.ndarray:
    """The first 64 bits of each text's MD5, big-endian (as ``CONV(LEFT(MD5(x), 16), 16, 10)``)."""
    data, offsets = _buffers(texts)
    n = len(offsets) - 1
    if few(n, SMALL_DIGESTS):
        view, bounds = data.data, offsets.tolist()
        prefixes = (hashlib.md5(view[bounds[i]:bounds[i + 1]], usedforsecurity=False).digest()[:8] for i in range(n))
        return np.fromiter((int.from_bytes(p, "big") for p in prefixes), np.uint64, count=n)
    out = np.empty(n, np.uint64)
    _md5_prefixes(data, offsets, out)
    return out


def _buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    texts = _flat(texts)
    if texts.null_count:
        raise ValueError("texts to hash must not be null")
    _, offsets_buf, data_buf = texts.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32)[texts.offset:texts.offset + len(texts) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets.astype(np.int64)


def buckets(key_texts: pa.Array) -> np.ndarray:
    """Each key's bucket: the top ``BUCKET_BITS`` of the CRC-32 of its text (as ``CRC32(x) >> 20``).
    CRC-32 is several times cheaper than MD5 in the database and spreads keys as evenly."""
    from dagster_databus.core.crc32 import crc32_each

    texts = _flat(key_texts)
    if texts.null_count:
        raise ValueError("texts to hash must not be null")
    return (crc32_each(texts) >> (32 - BUCKET_BITS)).astype(np.int64)


def fingerprint_batches(batches: Iterable[pa.RecordBatch | pa.Table], schema: TableSchema,
                        into: Fingerprint | None = None) -> Fingerprint:
    """The fingerprint of the rows in ``batches`` (each holding ``schema``'s columns)."""
    result = into if into is not None else Fingerprint()
    for batch in batches:
        if batch.num_rows:
            key, row = row_texts(batch, schema)
            result.add(buckets(key), digests(row))
    return result


# -- kernels -------------------------------------------------------------------------------

_SHIFTS = np.array([7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4,
                   np.int64)
_K = np.array([int(abs(np.sin(i + 1)) * 2**32) & 0xFFFFFFFF for i in range(64)], np.int64)




@kernel
def _accumulate(counts: np.ndarray, sums: np.ndarray, buckets: np.ndarray, values: np.ndarray,  # pragma: no cover
                sign: int) -> None:
    for i in range(len(buckets)):
        b = buckets[i]
        if sign > 0:
            counts[b] += 1
            sums[b] += values[i]
        else:
            counts[b] -= 1
            sums[b] -= values[i]


@kernel
def _md5_block(block: np.ndarray, state: np.ndarray, shifts: np.ndarray, k: np.ndarray) -> None:  # pragma: no cover
    m = np.empty(16, np.int64)
    for j in range(16):
        m[j] = (block[4 * j] | (block[4 * j + 1] << 8) | (block[4 * j + 2] << 16) | (block[4 * j + 3] << 24))
    a, b, c, d = state[0], state[1], state[2], state[3]
    mask = 0xFFFFFFFF
    for i in range(64):
        if i < 16:
            f = (b & c) | (~b & mask & d)
            g = i
        elif i < 32:
            f = (d & b) | (~d & mask & c)
            g = (5 * i + 1) % 16
        elif i < 48:
            f = b ^ c ^ d
            g = (3 * i + 5) % 16
        else:
            f = c ^ (b | (~d & mask))
            g = (7 * i) % 16
        f = (f + a + k[i] + m[g]) & mask
        a, d, c = d, c, b
        s = shifts[i]
        b = (b + (((f << s) | (f >> (32 - s))) & mask)) & mask
    state[0] = (state[0] + a) & mask
    state[1] = (state[1] + b) & mask
    state[2] = (state[2] + c) & mask
    state[3] = (state[3] + d) & mask


@kernel
def _bswap32(x: int) -> int:  # pragma: no cover
    return ((x & 0xFF) << 24) | ((x & 0xFF00) << 8) | ((x >> 8) & 0xFF00) | ((x >> 24) & 0xFF)


@kernel
def _md5_prefixes(data: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    block = np.empty(64, np.int64)
    tail = np.zeros(128, np.int64)
    state = np.empty(4, np.int64)
    shifts, k = _SHIFTS, _K
    for i in range(len(out)):
        start, end = offsets[i], offsets[i + 1]
        n = end - start
        state[0], state[1], state[2], state[3] = 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476
        full = n // 64
        for blk in range(full):
            base = start + 64 * blk
            for j in range(64):
                block[j] = data[base + j]
            _md5_block(block, state, shifts, k)
        rest = n - 64 * full
        for j in range(128):
            tail[j] = 0
        for j in range(rest):
            tail[j] = data[start + 64 * full + j]
        tail[rest] = 0x80
        size = 64 if rest < 56 else 128
        bits = n * 8
        for j in range(8):
            tail[size - 8 + j] = (bits >> (8 * j)) & 0xFF
        _md5_block(tail[:64], state, shifts, k)
        if size == 128:
            _md5_block(tail[64:], state, shifts, k)
        out[i] = (np.uint64(_bswap32(state[0])) << np.uint64(32)) | np.uint64(_bswap32(state[1]))
