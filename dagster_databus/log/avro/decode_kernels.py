"""The decoder's numba kernels: Avro records decoded by their branches' programs into the value and
validity matrices, and the byte-level helpers the Arrow columns are cut with. Compiled once and
cached on disk; they let go of the GIL, so groups of blocks decode on several threads at once.
"""

from __future__ import annotations

import numpy as np

from dagster_databus.core.kernels import kernel
from dagster_databus.log.avro.decode_program import BOOL, BYTES, DOUBLE, FLOAT, LONG
from dagster_databus.log.avro.text_kernels import plain_decimal

# What ``decode_records`` returns first: OK, a failure, or FULL (a branch's range of columns is full).
OK, TRUNCATED, BAD_BRANCH, BAD_NULL, TOO_WIDE, TRAILING, FULL = range(7)
# (status, record or branch, op index or -1, detail): some of them numpy integers as the kernel has them.
Status = tuple[int, int | np.int64, int, int | np.int64]
_U7F = np.uint64(0x7F)
_U1 = np.uint64(1)
_U8 = np.uint64(8)
_ALL_ONES = np.uint64(2**64 - 1)


@kernel
def _varint(data: np.ndarray, pos: int, end: int) -> tuple[np.int64, np.int64]:  # pragma: no cover - compiled
    """A zigzag varint (Avro int and long) at ``pos``: (value, position after it); position -1 when it
    runs past ``end`` or past 64 bits."""
    if pos >= end:
        return np.int64(0), np.int64(-1)
    b = data[pos]
    if b < 0x80:  # one byte: most values, every union index and null marker
        return np.int64(b >> 1) ^ -np.int64(b & 1), np.int64(pos + 1)
    u = np.uint64(b) & _U7F
    shift = np.uint64(7)
    pos += 1
    while True:
        if pos >= end:
            return np.int64(0), np.int64(-1)
        b = data[pos]
        pos += 1
        if shift == np.uint64(63) and b > 1:  # the tenth byte holds the 64th bit only
            return np.int64(0), np.int64(-1)
        u |= (np.uint64(b) & _U7F) << shift
        if b < 0x80:
            return np.int64(u >> _U1) ^ -np.int64(u & _U1), np.int64(pos)
        shift += np.uint64(7)
        if shift > np.uint64(63):
            return np.int64(0), np.int64(-1)


@kernel
def decode_records(data: np.ndarray, ends: np.ndarray, counts: np.ndarray, state: np.ndarray, union: bool,
                   first_op: np.ndarray, ops: np.ndarray, nullable: np.ndarray, slots: np.ndarray, wanted: np.ndarray,
                   first: int, room: np.ndarray, column: np.ndarray, held: np.ndarray, vals: np.ndarray,
                   valid: np.ndarray) -> Status:  # pragma: no cover - compiled
    """Decode ``counts[k]`` records from each block (its bytes end at ``ends[k]``) by the branches'
    programs, from where ``state`` says: (block, record in it, byte, record overall).

    A record of wanted branch b goes to column ``c = column[b] + held[b]``: its position (``first`` +
    its index) to ``vals[0, c]``, field j to ``vals[slots[j], c]`` (and the next row for two-slot
    ops), a nullable field's validity to ``valid[slots[j], c]``. When ``held[b]`` reaches ``room[b]``
    the kernel stops before that record, ``state`` pointing at it, and returns (FULL, b, ...).

    Returns (status, record or branch, op index or -1, detail); status 0 when every block was
    decoded exactly.
    """
    branches = len(first_op) - 1
    k, i, pos, rec = state[0], state[1], state[2], state[3]
    while k < len(counts):
        end = ends[k]
        while i < counts[k]:
            at = pos
            b = np.int64(0)
            if union:
                if pos < end and data[pos] < 0x80:  # up to 64 branches: one byte
                    b, pos = np.int64(data[pos] >> 1) ^ -np.int64(data[pos] & 1), pos + 1
                else:
                    b, pos = _varint(data, pos, end)
                if pos < 0:
                    return TRUNCATED, rec, -1, 0
                if b < 0 or b >= branches:
                    return BAD_BRANCH, rec, -1, b
            c = np.int64(0)
            if wanted[b]:
                if held[b] == room[b]:
                    state[0], state[1], state[2], state[3] = k, i, at, rec
                    return FULL, b, -1, 0
                c = column[b] + held[b]
                vals[0, c] = first + rec
                held[b] += 1
            for j in range(first_op[b], first_op[b + 1]):
                s = slots[j]  # -1: a branch only skipped over
                op = ops[j]
                if nullable[j]:
                    if pos < end and data[pos] == 2:  # the usual present marker: one byte, no varint call
                        index = np.int64(1)
                        pos += 1
                    else:
                        index, pos = _varint(data, pos, end)
                        if pos < 0:
                            return TRUNCATED, rec, j, 0
                    if index == 0:
                        if s >= 0:
                            valid[s, c] = 0
                            vals[s, c] = 0
                            if op >= BYTES:  # two slots: a null string has no bytes to gather
                                vals[s + 1, c] = 0
                        continue
                    if index != 1:
                        return BAD_NULL, rec, j, index
                    if s >= 0:
                        valid[s, c] = 1
                if op == LONG:
                    if pos < end and data[pos] < 0x80:  # small values: one byte
                        v = np.int64(data[pos] >> 1) ^ -np.int64(data[pos] & 1)
                        pos += 1
                    else:
                        v, pos = _varint(data, pos, end)
                        if pos < 0:
                            return TRUNCATED, rec, j, 0
                    if s >= 0:
                        vals[s, c] = v
                elif op == BYTES:
                    if pos < end and data[pos] < 0x80:  # lengths up to 63: one byte
                        size, start = np.int64(data[pos] >> 1) ^ -np.int64(data[pos] & 1), pos + 1
                    else:
                        size, start = _varint(data, pos, end)
                    if start < 0 or size < 0 or start + size > end:
                        return TRUNCATED, rec, j, 0
                    if s >= 0:
                        vals[s, c] = start
                        vals[s + 1, c] = size
                    pos = start + size
                elif op == DOUBLE:
                    if pos + 8 > end:
                        return TRUNCATED, rec, j, 0
                    if s >= 0:
                        v = np.int64(0)
                        for t in range(8):  # little-endian, as Avro writes it: the bits of the double
                            v |= np.int64(data[pos + t]) << (8 * t)
                        vals[s, c] = v
                    pos += 8
                elif op == FLOAT:
                    if pos + 4 > end:
                        return TRUNCATED, rec, j, 0
                    if s >= 0:
                        v = np.int64(0)
                        for t in range(4):
                            v |= np.int64(data[pos + t]) << (8 * t)
                        vals[s, c] = v
                    pos += 4
                elif op == BOOL:
                    if pos >= end:
                        return TRUNCATED, rec, j, 0
                    if s >= 0:
                        vals[s, c] = 1 if data[pos] != 0 else 0  # like fastavro: any byte but 0 is true
                    pos += 1
                else:  # DEC128: big-endian two's complement, sign-extended into 128 bits
                    size, start = _varint(data, pos, end)
                    if start < 0 or size < 0 or start + size > end:
                        return TRUNCATED, rec, j, 0
                    low = np.uint64(0)
                    high = np.uint64(0)
                    if size > 0:
                        sign = data[start] >> 7
                        if sign:
                            low = _ALL_ONES
                            high = _ALL_ONES
                        lead = start  # the first of the (at most 16) bytes that make the value
                        if size > 16:  # longer than needed: the extra leading bytes may only repeat the sign
                            lead = start + size - 16
                            for t in range(start, lead):
                                if data[t] != (0xFF if sign else 0):
                                    return TOO_WIDE, rec, j, 0
                            if data[lead] >> 7 != sign:
                                return TOO_WIDE, rec, j, 0
                        for t in range(lead, start + size):
                            high = (high << _U8) | (low >> np.uint64(56))
                            low = (low << _U8) | np.uint64(data[t])
                    if s >= 0:
                        vals[s, c] = np.int64(low)
                        vals[s + 1, c] = np.int64(high)
                    pos = start + size
            i += 1
            rec += 1
        if pos != end:
            return TRAILING, k, -1, pos
        k += 1
        i = 0
    return OK, 0, -1, 0


@kernel
def copy_values(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray,
                out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Each value's bytes (``lengths[i]`` from ``starts[i]`` in ``data``) to ``offsets[i]`` in ``out``."""
    for i in range(len(starts)):
        at, start = offsets[i], starts[i]
        for t in range(lengths[i]):
            out[at + t] = data[start + t]


@kernel
def plain_numbers(text: np.ndarray, offsets: np.ndarray, present: np.ndarray) -> bool:  # pragma: no cover
    """Whether every present value is plain decimal text, ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``."""
    for i in range(len(offsets) - 1):
        if present[i] and not plain_decimal(text, offsets[i], offsets[i + 1], True):
            return False
    return True


@kernel
def decimals_as_text(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, present: np.ndarray,
                     precision: int, scale: int, stride: int, out: np.ndarray,
                     out_lengths: np.ndarray) -> int:  # pragma: no cover - compiled
    """Each present value (big-endian two's complement unscaled bytes) as plain text with ``scale``
    fractional digits, at ``i * stride`` in ``out``; the index of a value of more than ``precision``
    digits, or -1."""
    widest = 0
    for i in range(len(lengths)):
        widest = max(widest, lengths[i])
    limbs = np.zeros((widest + 3) // 4 + 1, dtype=np.uint64)  # 32-bit limbs of the magnitude, low first
    digits = np.empty(10 * len(limbs) + 9, dtype=np.uint8)  # decimal digits, low first
    billion = np.uint64(1_000_000_000)
    for i in range(len(lengths)):
        at = i * stride
        if not present[i]:
            out_lengths[i] = 0
            continue
        start, size = starts[i], lengths[i]
        negative = size > 0 and data[start] >= 0x80
        used = (size + 3) // 4
        limbs[:used + 1] = 0
        for t in range(size):  # the magnitude: for a negative value, invert and add one
            byte = data[start + size - 1 - t]
            if negative:
                byte = ~byte & 0xFF
            limbs[t // 4] |= np.uint64(byte) << np.uint64(8 * (t % 4))
        if negative:
            t = 0
            while True:
                limbs[t] += np.uint64(1)
                if limbs[t] < np.uint64(1 << 32):
                    break
                limbs[t] = 0
                t += 1
            if t == used:
                used += 1
        count = 0
        while used > 0:  # divide by 10^9, nine digits at a time
            remainder = np.uint64(0)
            for t in range(used - 1, -1, -1):
                current = (remainder << np.uint64(32)) | limbs[t]
                limbs[t] = current // billion
                remainder = current % billion
            while used > 0 and limbs[used - 1] == 0:
                used -= 1
            for _ in range(9):
                digits[count] = remainder % np.uint64(10)
                remainder //= np.uint64(10)
                count += 1
        while count > 0 and digits[count - 1] == 0:
            count -= 1
        if count > precision:
            return i
        if negative:
            out[at] = 0x2D
            at += 1
        if count <= scale:
            out[at] = 0x30
            at += 1
        else:
            for t in range(count - 1, scale - 1, -1):
                out[at] = 0x30 + digits[t]
                at += 1
        if scale > 0:
            out[at] = 0x2E
            at += 1
            for t in range(scale - 1, -1, -1):
                out[at] = 0x30 + (digits[t] if t < count else 0)
                at += 1
        out_lengths[i] = at - i * stride
    return -1
