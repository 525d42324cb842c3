"""A decoded branch's Arrow columns, cut with numpy from the kernel's value and validity matrices.

Values fastavro (or ``ColumnType.to_arrow``) would refuse are refused here too (``ValueError``), so
the columns are exactly fastavro's values mapped through ``ColumnType.to_arrow``.
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa

from dagster_databus.log.avro.decode_kernels import copy_values, decimals_as_text, plain_numbers
from dagster_databus.log.avro.decode_program import BOOL, DEC128, DOUBLE, FLOAT, LONG, Branch
from dagster_databus.log.avro.fields import Field

_INT_RANGES = {"byte": (np.int8, -(2**7), 2**7 - 1), "short": (np.int16, -(2**15), 2**15 - 1),
               "integer": (np.int32, -(2**31), 2**31 - 1),
               # fastavro reads a date as date.fromordinal: years 1..9999.
               "date": (np.int32, -719_162, 2_932_896)}
# fastavro reads timestamps as epoch + timedelta: years 1..9999 (0001-01-01 .. 9999-12-31 23:59:59.999999).
_TIMESTAMP_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_MAX_OFFSET = 2**31 - 1  # string and binary arrays have 32-bit offsets


def branch_column(branch: Branch, j: int, vals: np.ndarray, valid: np.ndarray, data: np.ndarray, n: int) -> pa.Array:
    """Field ``j`` of ``branch`` as an Arrow array of its ``n`` rows (``vals``/``valid``: the branch's slots)."""
    f, op, s = branch.fields[j], branch.ops[j], branch.slots[j]
    validity, nulls = None, 0
    if f.nullable:
        present = int(np.count_nonzero(valid[s]))
        if present < n:
            validity, nulls = pa.py_buffer(np.packbits(valid[s], bitorder="little")), n - present
    kind, typ = f.type.kind, f.type.arrow()
    values = vals[s]
    if op == LONG:
        if kind in _INT_RANGES:
            dtype, low, high = _INT_RANGES[kind]
            _check_range(f, values, low, high)
            values = values.astype(dtype)
        else:
            if kind in ("timestamp", "timestamp_ntz"):
                _check_range(f, values, *_TIMESTAMP_RANGE)
            values = values.copy()  # the matrices are used again
        buffers = [pa.py_buffer(values)]
    elif op == BOOL:
        buffers = [pa.py_buffer(np.packbits(values.astype(np.bool_), bitorder="little"))]
    elif op == FLOAT:  # the float's 4 bytes, kept as bits: -0.0 and NaN payloads stay as written
        buffers = [pa.py_buffer(values.astype(np.uint32).view(np.float32))]
    elif op == DOUBLE:
        buffers = [pa.py_buffer(values.copy())]
    elif op == DEC128:
        buffers = [pa.py_buffer(_decimal128(f, values, vals[s + 1]))]
    else:
        starts, lengths = values, vals[s + 1]
        if kind == "decimal":  # wider than Delta holds: the exact plain text
            return _decimal_text(f, data, starts, lengths, valid[s] if f.nullable else None, validity, nulls, n)
        offsets, payload = _gather(f, data, starts, lengths)
        array = pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(payload)], nulls)
        if kind == "number":
            return _number_text(f, array, offsets, payload)
        if kind == "string":  # fastavro refuses text that is not UTF-8; Arrow strings must be UTF-8 too
            try:
                array.validate(full=True)
            except pa.ArrowInvalid as e:
                raise ValueError(f"field {f.name}: {e}") from None
        return array
    return pa.Array.from_buffers(typ, n, [validity, *buffers], nulls)


def _check_range(f: Field, values: np.ndarray, low: int, high: int) -> None:
    """Values fastavro (or ``ColumnType.to_arrow``) would refuse are refused here too."""
    if len(values) and (values.min() < low or values.max() > high):
        bad = values[(values < low) | (values > high)][0]
        raise ValueError(f"field {f.name}: value {bad} is outside what {f.type} holds ({low}..{high})")


def _decimal128(f: Field, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Arrow's decimal128 buffer (little-endian 128-bit unscaled values) from their 64-bit halves."""
    # fastavro rounds values of more digits than the precision; to_arrow then refuses them.
    top_high, top_low = _halves(10**f.type.precision)
    bottom_high, bottom_low = _halves(-(10**f.type.precision))
    low_u = low.view(np.uint64)  # the low half compares unsigned, the high half signed
    above = (high > top_high) | ((high == top_high) & (low_u >= top_low))
    below = (high < bottom_high) | ((high == bottom_high) & (low_u <= bottom_low))
    if np.any(above | below):
        raise ValueError(f"field {f.name}: a value with more than {f.type.precision} digits")
    out = np.empty((len(low), 2), dtype=np.int64)
    out[:, 0], out[:, 1] = low, high
    return out


def _halves(value: int) -> tuple[np.int64, np.uint64]:
    """A 128-bit two's complement value as its (signed high, unsigned low) 64-bit halves."""
    value &= (1 << 128) - 1
    return np.uint64(value >> 64).astype(np.int64), np.uint64(value & (2**64 - 1))


def _gather(f: Field, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """32-bit offsets and the values' bytes, copied out of the block side by side."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _MAX_OFFSET:
        raise ValueError(f"field {f.name}: {offsets[-1]} bytes in one batch, more than a {f.type.arrow()} "
                         "array holds; decode fewer rows at a time")
    payload = np.empty(int(offsets[-1]), dtype=np.uint8)
    copy_values(data, starts, lengths, offsets, payload)
    return offsets.astype(np.int32), payload


def _number_text(f: Field, array: pa.Array, offsets: np.ndarray, payload: np.ndarray) -> pa.Array:
    """``number`` columns: the text as ``to_arrow(from_avro(text))`` gives it. That is the text itself
    when it is plain (``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``), as this project writes it; otherwise
    (hand-made files) the whole column goes through ``decimal`` like fastavro's path."""
    if plain_numbers(payload, offsets, np.asarray(array.is_valid()) if array.null_count else
                      np.ones(len(array), dtype=np.bool_)):
        return array
    try:
        array.validate(full=True)  # UTF-8, as for strings
        return f.type.to_arrow([None if v is None else decimal.Decimal(v) for v in array.to_pylist()])
    except (decimal.InvalidOperation, pa.ArrowInvalid) as e:
        raise ValueError(f"field {f.name}: text that is not a decimal: {e!r}") from None


def _decimal_text(f: Field, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None,
                  validity: pa.Buffer | None, nulls: int, n: int) -> pa.Array:
    """Decimals wider than Delta holds, as ``plain_decimal`` of fastavro's value: all ``scale`` digits."""
    present = np.ones(n, dtype=np.bool_) if valid is None else valid.astype(np.bool_)
    stride = f.type.precision + 3  # sign, point, and a zero before the point when every digit is after it
    text = np.empty(n * stride, dtype=np.uint8)
    text_lengths = np.empty(n, dtype=np.int64)
    failed = decimals_as_text(data, starts, lengths, present, f.type.precision, f.type.scale, stride, text,
                               text_lengths)
    if failed >= 0:
        raise ValueError(f"field {f.name}: a value with more than {f.type.precision} digits")
    text.flags.writeable = False  # read-only like the blocks: one compiled copy_values for both
    offsets, payload = _gather(f, text, np.arange(n, dtype=np.int64) * stride, text_lengths)
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(payload)], nulls)
