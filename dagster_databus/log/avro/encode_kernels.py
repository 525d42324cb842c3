"""The encoder's numba kernels: records sized, then written, field by field from numpy views of
the Arrow buffers, as the program rows (``encoder``) describe each field. Compiled once and cached
on disk; they let go of the GIL, so blocks are encoded on every core at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.typed import List

from dagster_databus.core.kernels import kernel
from dagster_databus.log.avro.text_kernels import plain_decimal

# A scalar integer in the kernels: a Python int or a numpy one (numba compiles both to int64).
Int = int | np.int64

# Field op codes the kernel interprets, by how the value lies in Arrow buffers: 64-bit and 32-bit
# integers (zigzag varints), float and double bits (little-endian as they are), a bit (boolean),
# bytes by 32-bit or 64-bit offsets (length, then the bytes), decimal128 (its two 64-bit halves), and
# plain decimal text by 32-bit offsets (the unscaled value's bytes, as for decimal128).
LONG, INT, FLOAT, DOUBLE, BOOL, BYTES, LARGE_BYTES, DECIMAL, DECIMAL_TEXT = range(9)
# A program row's columns. Buffers are indexes into the kernel's three lists of views (64-bit words,
# 32-bit halves, bytes); index 0 of each is an empty view, for what a field does not use.
OP, NULLABLE, VALID, WORDS, HALVES, RAW, OFFSET, SCALE, WIDEST = range(9)  # WIDEST: decimal text's
PROGRAM_COLUMNS = 9

_WORD_VIEW = types.Array(types.int64, 1, "C", readonly=True)
_HALF_VIEW = types.Array(types.int32, 1, "C", readonly=True)
_RAW_VIEW = types.Array(types.uint8, 1, "C", readonly=True)
_TILE = 4_096  # records: their output (some hundreds of KB) stays in cache while each field is written
# Unsigned constants: numba makes float64 of uint64 mixed with int64.
_U1, _U7, _U8 = np.uint64(1), np.uint64(7), np.uint64(8)
_U7F, _U80, _UFF = np.uint64(0x7F), np.uint64(0x80), np.uint64(0xFF)
_U0, _BILLION = np.uint64(0), np.uint64(1_000_000_000)
# A varint takes a byte more at each of these (7-bit groups).
_B1, _B2, _B3, _B4, _B5, _B6, _B7, _B8, _B9 = (np.uint64(1 << (7 * k)) for k in range(1, 10))


# Typed lists are built by compiled (cached) functions: typed.List's own methods compile afresh
# in every process, for a third of a second.
@kernel(nogil=False)
def lists() -> tuple[Any, Any, Any]:  # pragma: no cover - compiled
    return List.empty_list(_WORD_VIEW), List.empty_list(_HALF_VIEW), List.empty_list(_RAW_VIEW)


@kernel(nogil=False)
def push(views: Any, view: np.ndarray) -> None:  # pragma: no cover - compiled
    views.append(view)


@kernel
def sizes_of(positions: np.ndarray, starts: np.ndarray, branches: np.ndarray, first_field: np.ndarray,
             program: np.ndarray, words: Any, halves: Any,
             raw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """Where the records at ``positions`` (into the tables' rows, one table after the other: table t's
    rows are ``starts[t]`` up to ``starts[t + 1]``) start: each one's offset in the block's bytes (one
    more, the block's size), and how ``write`` goes through them (their groups).

    A record of table t is its branch varint (``branches[t]`` >= 0), then fields ``first_field[t]`` up
    to ``first_field[t + 1]`` of ``program``. The records are grouped by tile (consecutive records)
    and table, keeping their order, so that each field is done for a group's records at once, over
    views fetched once: its size added to each record's here, its bytes written at each record's
    cursor by ``write``. A tile's output stays in cache while its fields are written. A block of one
    table's consecutive rows (every block without ``order``) needs no grouping.
    """
    n = len(positions)
    tables = len(starts) - 1
    tile = max(_TILE, 64 * tables)  # tens of records per group at least: a group costs a call per field
    tiles = -(-n // tile)
    groups = tiles * tables
    group = np.zeros(groups + 1, dtype=np.int64)  # group g (tile g // tables): group[g] up to group[g + 1]
    first = -1  # consecutive rows of one table from this one: record k is row first + k
    slots = np.empty(0, dtype=np.int64)  # else each record's place in the block, and its row in its table
    rows = np.empty(0, dtype=np.int64)
    if tables == 1:  # the records as they are, a group per tile
        for g in range(tiles):
            group[g + 1] = min((g + 1) * tile, n)
        consecutive = True
        for i in range(1, n):
            consecutive &= positions[i] == positions[i - 1] + 1
        if consecutive:
            first = positions[0] - starts[0] if n else 0
        else:
            slots, rows = np.arange(n), positions - starts[0]
    else:
        key = np.empty(n, dtype=np.int64)
        t = 0
        for g0 in range(0, n, tile):
            for i in range(g0, min(g0 + tile, n)):
                p = positions[i]
                if p < starts[t] or p >= starts[t + 1]:
                    t = np.searchsorted(starts, p, side="right") - 1
                key[i] = g0 // tile * tables + t
                group[key[i] + 1] += 1
        for g in range(groups):
            group[g + 1] += group[g]
        fill = group[:-1].copy()
        slots, rows = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        for i in range(n):
            k = fill[key[i]]
            fill[key[i]] = k + 1
            slots[k] = i
            rows[k] = positions[i]
        t = 0
        for g in range(groups):  # the rows in their tables
            for k in range(group[g], group[g + 1]):
                rows[k] -= starts[t]
            t = t + 1 if t + 1 < tables else 0
    offsets = np.zeros(n + 1, dtype=np.int64)  # record i's size at i + 1, then their running sum
    sizes = offsets[1:]
    t = tables - 1
    for g in range(groups):
        t = t + 1 if t + 1 < tables else 0
        g0, g1 = group[g], group[g + 1]
        if g0 == g1:
            continue
        if branches[t] >= 0:
            size = _varint_size(branches[t])
            for k in range(g0, g1):
                sizes[k if first >= 0 else slots[k]] += size
        for j in range(first_field[t], first_field[t + 1]):
            _sizes(program[j], words, halves, raw, slots, rows, first, g0, g1, sizes)
    for i in range(n):
        offsets[i + 1] += offsets[i]
    return offsets, group, slots, rows, first


@kernel
def write(group: np.ndarray, slots: np.ndarray, rows: np.ndarray, first: int, branches: np.ndarray,
          first_field: np.ndarray, program: np.ndarray, words: Any, halves: Any, raw: Any, offsets: np.ndarray,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Writes the records ``sizes_of`` placed into ``out``, field by field as it sized them."""
    tables = len(branches)
    cursor = offsets[:-1].copy()  # each record's, moved past each field as it is written
    t = tables - 1
    for g in range(len(group) - 1):
        t = t + 1 if t + 1 < tables else 0
        g0, g1 = group[g], group[g + 1]
        if g0 == g1:
            continue
        if branches[t] >= 0:
            for k in range(g0, g1):
                i = k if first >= 0 else slots[k]
                cursor[i] = _put_varint(out, cursor[i], branches[t])
        for j in range(first_field[t], first_field[t + 1]):
            _puts(program[j], words, halves, raw, slots, rows, first, g0, g1, cursor, out)


# The per-value work is written out in the loops of _sizes and _puts, not in a helper taking the
# views: a call with array arguments that LLVM does not inline costs reference counting on every
# value, ten times the encoding itself. Their indexes are made unsigned (_U): numba wraps negative
# signed indexes around, a check on every access that also keeps LLVM from vectorizing copies.
_U = np.uint64


@kernel
def _sizes(field: np.ndarray, words: Any, halves: Any, raw: Any, slots: np.ndarray, rows: np.ndarray, first: int,
           g0: int, g1: int, sizes: np.ndarray) -> None:  # pragma: no cover - compiled
    """Adds the field's size in records ``g0`` up to ``g1`` of a group to theirs in ``sizes``: record k
    is ``slots[k]`` of the block, at ``rows[k]`` of its table (k and ``first + k`` when ``first`` >= 0)."""
    op, off, scale = field[OP], field[OFFSET], field[SCALE]
    marker = 1 if field[NULLABLE] else 0  # the ["null", T] branch: one byte
    nulls = field[VALID] != 0
    valid, w, h, b = raw[field[VALID]], words[field[WORDS]], halves[field[HALVES]], raw[field[RAW]]
    limbs = np.zeros((field[WIDEST] + scale) // 9 + 2 if op == DECIMAL_TEXT else 0, dtype=np.uint64)
    for k in range(g0, g1):
        i, r = (k, first + k + off) if first >= 0 else (slots[k], rows[k] + off)
        size: Int = marker
        if not nulls or (valid[_U(r >> 3)] >> (r & 7)) & 1:
            if op == LONG:
                size += _varint_size(w[_U(r)])
            elif op == INT:
                size += _varint_size(np.int64(h[_U(r)]))
            elif op == DOUBLE:
                size += 8
            elif op == FLOAT:
                size += 4
            elif op == BOOL:
                size += 1
            elif op == BYTES:
                length: Int = np.int64(h[_U(r + 1)]) - np.int64(h[_U(r)])
                size += _varint_size(length) + length
            elif op == LARGE_BYTES:
                length = w[_U(r + 1)] - w[_U(r)]
                size += _varint_size(length) + length
            elif op == DECIMAL:
                size += 1 + _decimal_length(w[_U(2 * r)], w[_U(2 * r + 1)])  # at most 16 bytes: a one-byte length
            else:  # DECIMAL_TEXT
                length = _limbs_length(limbs, _text_unscaled(b, h[r], h[r + 1], scale, limbs))
                size += _varint_size(length) + length
        sizes[_U(i)] += size


@kernel
def _puts(field: np.ndarray, words: Any, halves: Any, raw: Any, slots: np.ndarray, rows: np.ndarray, first: int,
          g0: int, g1: int, cursor: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Writes the field's value in records ``g0`` up to ``g1`` of a group (as for ``_sizes``) at their
    cursors, and moves each cursor past it."""
    op, off, scale = field[OP], field[OFFSET], field[SCALE]
    nullable = field[NULLABLE] != 0
    nulls = field[VALID] != 0
    valid, w, h, b = raw[field[VALID]], words[field[WORDS]], halves[field[HALVES]], raw[field[RAW]]
    limbs = np.zeros((field[WIDEST] + scale) // 9 + 2 if op == DECIMAL_TEXT else 0, dtype=np.uint64)
    for k in range(g0, g1):
        i, r = (_U(k), first + k + off) if first >= 0 else (_U(slots[k]), rows[k] + off)
        at = cursor[i]
        if nulls and not (valid[_U(r >> 3)] >> (r & 7)) & 1:
            out[_U(at)] = 0  # the null branch (zigzag 0)
            cursor[i] = at + 1
            continue
        if nullable:
            out[_U(at)] = 2  # the value's branch (zigzag 1)
            at += 1
        if op == LONG:
            at = _put_varint(out, at, w[_U(r)])
        elif op == INT:
            at = _put_varint(out, at, np.int64(h[_U(r)]))
        elif op == DOUBLE:
            v = w[_U(r)]
            for t in range(8):  # little-endian, as Avro writes it: the double's bits as they are
                out[_U(at + t)] = np.uint8((v >> (8 * t)) & 0xFF)
            at += 8
        elif op == FLOAT:
            v32 = h[_U(r)]
            for t in range(4):
                out[_U(at + t)] = np.uint8((v32 >> (8 * t)) & 0xFF)
            at += 4
        elif op == BOOL:
            out[_U(at)] = (b[_U(r >> 3)] >> (r & 7)) & 1
            at += 1
        elif op in (BYTES, LARGE_BYTES):
            if op == BYTES:
                start, end = np.int64(h[_U(r)]), np.int64(h[_U(r + 1)])
            else:
                start, end = w[_U(r)], w[_U(r + 1)]
            at = _put_varint(out, at, end - start)
            for t in range(end - start):
                out[_U(at + t)] = b[_U(start + t)]
            at += end - start
        elif op == DECIMAL:
            low, high = w[_U(2 * r)], w[_U(2 * r + 1)]
            length = _decimal_length(low, high)
            out[_U(at)] = 2 * length  # the length's varint: one byte
            for t in range(length):  # the value's low bytes, big-endian
                z = length - 1 - t
                out[_U(at + 1 + t)] = np.uint8(((low >> (8 * z)) if z < 8 else (high >> (8 * (z - 8)))) & 0xFF)
            at += 1 + length
        else:  # DECIMAL_TEXT
            at = _put_text_decimal(out, at, b, h[r], h[r + 1], scale, limbs)
        cursor[i] = at


@kernel
def _put_text_decimal(out: np.ndarray, at: Int, b: np.ndarray, start: Int, end: Int, scale: Int,
                      limbs: np.ndarray) -> Int:  # pragma: no cover - compiled
    """Plain decimal text as the unscaled value's bytes (length first), as ``_unscaled_bytes`` writes it."""
    used = _text_unscaled(b, start, end, scale, limbs)
    length = _limbs_length(limbs, used)
    at = _put_varint(out, at, length)
    negative = b[start] == 0x2D  # -
    carry = np.uint64(1)
    for k in range(length):  # little-endian byte k of the magnitude (negated: inverted, plus one)
        limb = k >> 2
        byte = (limbs[limb] >> np.uint64(8 * (k & 3))) & _UFF if limb < used else np.uint64(0)
        if negative:
            byte = (~byte & _UFF) + carry
            carry = byte >> _U8
            byte &= _UFF
        out[at + length - 1 - k] = np.uint8(byte)
    return at + length


@kernel
def _varint_size(v: Int) -> Int:  # pragma: no cover - compiled
    """Bytes of a zigzag varint: counted without branches, which mispredict on values of mixed widths."""
    u = np.uint64((v << 1) ^ (v >> 63))
    return (1 + np.int64(u >= _B1) + np.int64(u >= _B2) + np.int64(u >= _B3) + np.int64(u >= _B4)
            + np.int64(u >= _B5) + np.int64(u >= _B6) + np.int64(u >= _B7) + np.int64(u >= _B8) + np.int64(u >= _B9))


@kernel
def _put_varint(out: np.ndarray, at: Int, v: Int) -> Int:  # pragma: no cover - compiled
    """A zigzag varint (Avro int and long): low 7-bit groups first, high bit = more."""
    u = np.uint64((v << 1) ^ (v >> 63))
    while u >= _U80:
        out[_U(at)] = np.uint8((u & _U7F) | _U80)
        u >>= _U7
        at += 1
    out[_U(at)] = np.uint8(u)
    return at + 1


@kernel
def _bit_length(u: np.uint64) -> int:  # pragma: no cover - compiled
    """Bits of ``u`` without its leading zeros (Python's ``int.bit_length``)."""
    bits = 0
    while u >= np.uint64(256):
        u >>= _U8
        bits += 8
    while u:
        u >>= _U1
        bits += 1
    return bits


@kernel
def _decimal_length(low: Int, high: Int) -> Int:  # pragma: no cover - compiled
    """Bytes of a decimal128 (its low and high 64-bit halves): like fastavro (and Java's BigInteger),
    ``(|v|.bit_length() + 8) // 8``, so -2^(8n-1) takes n+1 bytes; at most the 16 there are."""
    lo, hi = np.uint64(low), np.uint64(high)
    if high < 0:  # the magnitude: two's complement negation
        lo = ~lo + _U1
        hi = ~hi + (_U1 if lo == _U0 else _U0)
    bits = 64 + _bit_length(hi) if hi else _bit_length(lo)
    return min(bits // 8 + 1, 16)


@kernel
def _text_unscaled(b: np.ndarray, start: Int, end: Int, scale: Int, limbs: np.ndarray) -> Int:  # pragma: no cover
    """The magnitude of plain decimal text ``b[start:end]`` times 10^scale, digits past the scale
    dropped (as ``int`` of the scaled ``Decimal`` truncates), into ``limbs`` (32-bit, low first);
    returns how many limbs it takes."""
    at = start + 1 if b[start] == 0x2D else start  # -
    used = 0
    chunk, chunk_scale = np.uint64(0), np.uint64(1)  # up to 9 digits, taken into the limbs at once
    point = at
    while point < end and b[point] != 0x2E:  # .
        point += 1
    # The integer's digits, then ``scale`` digits of the fraction (zeros past its end).
    for t in range(at, point + 1 + scale):
        if t == point:
            continue
        digit = np.uint64(b[t] - 0x30) if t < end else np.uint64(0)
        chunk = chunk * np.uint64(10) + digit
        chunk_scale *= np.uint64(10)
        if chunk_scale == _BILLION:
            used = _multiply_add(limbs, used, chunk_scale, chunk)
            chunk, chunk_scale = np.uint64(0), np.uint64(1)
    if chunk_scale > _U1:
        used = _multiply_add(limbs, used, chunk_scale, chunk)
    return used


@kernel
def _multiply_add(limbs: np.ndarray, used: int, factor: np.uint64, add: np.uint64) -> int:  # pragma: no cover
    """limbs = limbs * factor + add (factor and add below 2^32); returns the limbs used (the top one is
    not zero: leading zero digits take none)."""
    carry = add
    for t in range(used):
        product = limbs[t] * factor + carry
        limbs[t] = product & np.uint64(0xFFFFFFFF)
        carry = product >> np.uint64(32)
    if carry:
        limbs[used] = carry
        used += 1
    return used


@kernel
def _limbs_length(limbs: np.ndarray, used: Int) -> Int:  # pragma: no cover - compiled
    """Bytes of the unscaled value (its ``used`` limbs, the top one not zero): ``(|v|.bit_length() + 8) // 8``,
    as ``_unscaled_bytes`` writes it."""
    bits = 32 * (used - 1) + _bit_length(limbs[used - 1]) if used else 0
    return bits // 8 + 1


@kernel
def plain_decimals(offsets: np.ndarray, text: np.ndarray, valid: np.ndarray, nulls: bool, off: int,
                   n: int) -> bool:  # pragma: no cover - compiled
    """Whether every present value is plain decimal text, ``-?[0-9]+(\\.[0-9]+)?``: what the kernel reads."""
    for i in range(off, off + n):
        if nulls and not (valid[i >> 3] >> (i & 7)) & 1:
            continue
        if not plain_decimal(text, offsets[i], offsets[i + 1], False):
            return False
    return True
