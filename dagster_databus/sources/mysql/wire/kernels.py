"""Compiled kernels of the row decoder: row images walked once into a matrix of value offsets and lengths,
then each column cut out of the bytes by type, into the buffers Arrow arrays are built on. No Python
object is made per row. Compiled once and cached on disk (``numba``, as the change log's kernels).

Layouts are MySQL's (``mysys/my_time.cc``, ``strings/decimal.cc``, ``sql/log_event.cc``); the tests decode
values written by a real server and compare them with what the server reads back.
"""

from __future__ import annotations

import numpy as np

from dagster_databus.core.kernels import kernel

# What ``scan`` returns first.
OK, TRUNCATED, TRAILING = 0, 1, 2
NULL = -1  # a length in ``ln`` that marks a NULL


@kernel
def _le(data: np.ndarray, pos: int, n: int) -> int:  # pragma: no cover - compiled
    value = 0
    for i in range(n):
        value |= int(data[pos + i]) << (8 * i)
    return value


@kernel
def _be(data: np.ndarray, pos: int, n: int) -> int:  # pragma: no cover - compiled
    value = 0
    for i in range(n):
        value = (value << 8) | int(data[pos + i])
    return value


@kernel
def scan(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, images: np.ndarray, widths: np.ndarray,
         off: np.ndarray, ln: np.ndarray, fill: bool) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Walk the row images of each event (bytes ``starts[e]:ends[e]``, ``images[e]`` images a row: 2 for
    an update's before and after) and, with ``fill``, note every value's offset and length (``NULL`` for
    a NULL). Returns (status, images walked, the event that failed)."""
    n = 0
    for e in range(len(starts)):
        status, n = _walk(data, starts[e], ends[e], images[e], widths, off, ln, n, fill)
        if status != OK:
            return status, n, e
    return OK, n, -1


@kernel
def count(data: np.ndarray, images: int, widths: np.ndarray) -> tuple[int, int]:  # pragma: no cover - compiled
    """Walk one event's row images (all of ``data``) only to count them: (status, images walked). One event
    a call, so its few arguments are what the call costs: a one-row event is walked as it arrives."""
    none = np.empty((0, 0), np.int64)
    return _walk(data, 0, len(data), images, widths, none, none, 0, False)


@kernel
def _walk(data: np.ndarray, pos: int, end: int, images: int, widths: np.ndarray, off: np.ndarray, ln: np.ndarray,
          n: int, fill: bool) -> tuple[int, int]:  # pragma: no cover - compiled
    """One event's row images, bytes ``pos:end``, numbered on from ``n``: (status, images walked so far)."""
    ncols = len(widths)
    nullbytes = (ncols + 7) // 8
    while pos < end:
        for _ in range(images):
            nulls = pos
            pos += nullbytes
            if pos > end:
                return TRUNCATED, n
            for c in range(ncols):
                if (data[nulls + (c >> 3)] >> (c & 7)) & 1:
                    if fill:
                        ln[n, c] = NULL
                    continue
                w = widths[c]
                if w < 0:
                    if pos - w > end:
                        return TRUNCATED, n
                    size = _le(data, pos, -w)
                    pos -= w
                else:
                    size = w
                if pos + size > end:
                    return TRUNCATED, n
                if fill:
                    off[n, c] = pos
                    ln[n, c] = size
                pos += size
            n += 1
    return (OK if pos == end else TRAILING), n


@kernel
def gather_fixed(data: np.ndarray, off: np.ndarray, ln: np.ndarray, width: int,
                 out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Each value's ``width`` bytes side by side (zeros for a NULL), to be viewed as numbers."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        p, q = off[i], i * width
        for j in range(width):
            out[q + j] = data[p + j]


@kernel
def int24(data: np.ndarray, off: np.ndarray, ln: np.ndarray, signed: bool,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(len(off)):
        if ln[i] != NULL:
            v = _le(data, off[i], 3)
            out[i] = v - (1 << 24) if signed and v >= (1 << 23) else v


@kernel
def unsigned_le(data: np.ndarray, off: np.ndarray, ln: np.ndarray, width: int,
                out: np.ndarray) -> None:  # pragma: no cover - compiled
    """ENUM indexes and YEAR: small unsigned integers."""
    for i in range(len(off)):
        if ln[i] != NULL:
            out[i] = _le(data, off[i], width)


@kernel
def gather_var(data: np.ndarray, off: np.ndarray, ln: np.ndarray, pad_to: int, offsets: np.ndarray,
               out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Variable-length values into Arrow's offsets and data buffers, each right-padded with zero bytes to
    ``pad_to`` (BINARY(n), whose padding the binlog leaves out; 0 for none). ``offsets`` has one more
    entry than there are values, and ``out`` room for ``offsets[-1]`` bytes (``var_sizes``)."""
    for i in range(len(off)):
        q = offsets[i]
        if ln[i] == NULL:
            continue
        p, n = off[i], ln[i]
        for j in range(n):
            out[q + j] = data[p + j]
        for j in range(n, offsets[i + 1] - q):
            out[q + j] = 0


@kernel
def var_sizes(ln: np.ndarray, pad_to: int, offsets: np.ndarray) -> None:  # pragma: no cover - compiled
    total = 0
    offsets[0] = 0
    for i in range(len(ln)):
        if ln[i] != NULL:
            total += max(ln[i], pad_to)
        offsets[i + 1] = total


# -- dates and times -----------------------------------------------------------------------


@kernel
def _days(year: int, month: int, day: int) -> int:  # pragma: no cover - compiled
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil)."""
    y = year - (1 if month <= 2 else 0)
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@kernel
def _valid_date(year: int, month: int, day: int) -> bool:  # pragma: no cover - compiled
    """A date Python and Delta can hold: no zero parts (MySQL's zero dates), year 1..9999, a real day."""
    if year < 1 or year > 9999 or month < 1 or month > 12 or day < 1:
        return False
    if month == 2:
        leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
        return day <= (29 if leap else 28)
    return day <= (30 if month in (4, 6, 9, 11) else 31)


@kernel
def _fraction(data: np.ndarray, pos: int, fsp: int) -> int:  # pragma: no cover - compiled
    """Microseconds of a big-endian fractional-second part of (fsp + 1) // 2 bytes."""
    if fsp <= 0:
        return 0
    if fsp <= 2:
        return int(data[pos]) * 10000
    if fsp <= 4:
        return _be(data, pos, 2) * 100
    return _be(data, pos, 3)


@kernel
def dates(data: np.ndarray, off: np.ndarray, ln: np.ndarray, out: np.ndarray,
          bad: np.ndarray) -> None:  # pragma: no cover - compiled
    """DATE (3 bytes: day | month << 5 | year << 9) → days since the epoch; ``bad`` marks zero or
    invalid dates."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        v = _le(data, off[i], 3)
        year, month, day = v >> 9, (v >> 5) & 15, v & 31
        if _valid_date(year, month, day):
            out[i] = _days(year, month, day)
        else:
            bad[i] = True


@kernel
def datetimes2(data: np.ndarray, off: np.ndarray, ln: np.ndarray, fsp: int, out: np.ndarray,
               bad: np.ndarray) -> None:  # pragma: no cover - compiled
    """DATETIME2: 5 bytes big-endian (sign, year * 13 + month, day, hour, minute, second) and the
    fraction → microseconds since the epoch, as a wall-clock value."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        p = off[i]
        packed = _be(data, p, 5) - 0x8000000000
        ymd, hms = packed >> 17, packed & 0x1FFFF
        ym = ymd >> 5
        year, month, day = ym // 13, ym % 13, ymd & 31
        if packed < 0 or not _valid_date(year, month, day):
            bad[i] = True
            continue
        seconds = (hms >> 12) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)
        out[i] = (_days(year, month, day) * 86400 + seconds) * 1000000 + _fraction(data, p + 5, fsp)


@kernel
def datetimes_old(data: np.ndarray, off: np.ndarray, ln: np.ndarray, out: np.ndarray,
                  bad: np.ndarray) -> None:  # pragma: no cover - compiled
    """DATETIME before MySQL 5.6: 8 bytes little-endian holding YYYYMMDDhhmmss as a decimal number."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        v = _le(data, off[i], 8)
        date, time = v // 1000000, v % 1000000
        year, month, day = date // 10000, date // 100 % 100, date % 100
        if not _valid_date(year, month, day):
            bad[i] = True
            continue
        seconds = time // 10000 * 3600 + time // 100 % 100 * 60 + time % 100
        out[i] = (_days(year, month, day) * 86400 + seconds) * 1000000


@kernel
def timestamps(data: np.ndarray, off: np.ndarray, ln: np.ndarray, fsp: int, big_endian: bool, out: np.ndarray,
               bad: np.ndarray) -> None:  # pragma: no cover - compiled
    """TIMESTAMP2 (4 bytes big-endian seconds and the fraction) or the old TIMESTAMP (4 bytes
    little-endian) → UTC microseconds; ``bad`` marks the zero timestamp (stored as 0 seconds)."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        p = off[i]
        seconds = _be(data, p, 4) if big_endian else _le(data, p, 4)
        micros = _fraction(data, p + 4, fsp)
        if seconds == 0 and micros == 0:
            bad[i] = True
        else:
            out[i] = seconds * 1000000 + micros


@kernel
def times2(data: np.ndarray, off: np.ndarray, ln: np.ndarray, fsp: int,
           out: np.ndarray) -> None:  # pragma: no cover - compiled
    """TIME2 → signed microseconds (``my_time_packed_from_binary``, then the packed time unpacked)."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        p = off[i]
        if fsp >= 5:
            packed = _be(data, p, 6) - 0x800000000000
        else:
            intpart = _be(data, p, 3) - 0x800000
            frac = 0
            if fsp >= 3:
                frac = _be(data, p + 3, 2)
                if intpart < 0 and frac:
                    intpart += 1
                    frac -= 0x10000
                frac *= 100
            elif fsp >= 1:
                frac = int(data[p + 3])
                if intpart < 0 and frac:
                    intpart += 1
                    frac -= 0x100
                frac *= 10000
            packed = (intpart << 24) + frac
        sign = -1 if packed < 0 else 1
        packed = abs(packed)
        hms = packed >> 24
        seconds = ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)
        out[i] = sign * (seconds * 1000000 + (packed & 0xFFFFFF))


@kernel
def times_old(data: np.ndarray, off: np.ndarray, ln: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """TIME before MySQL 5.6: 3 bytes little-endian, signed, holding [-]HHMMSS as a decimal number."""
    for i in range(len(off)):
        if ln[i] == NULL:
            continue
        v = _le(data, off[i], 3)
        if v >= (1 << 23):
            v -= 1 << 24
        sign = -1 if v < 0 else 1
        v = abs(v)
        out[i] = sign * (v // 10000 * 3600 + v // 100 % 100 * 60 + v % 100) * 1000000


# -- decimals and sets ---------------------------------------------------------------------

_DIG2BYTES = np.array([0, 1, 1, 2, 2, 3, 3, 4, 4, 4], np.int64)


@kernel
def _digit_group(buf: np.ndarray, q: int, size: int, count: int, digits: np.ndarray,
                 nd: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """``count`` decimal digits held big-endian in ``size`` bytes at ``buf[q]``, written as ASCII at
    ``digits[nd]``: (the next byte, the next digit)."""
    v = 0
    for j in range(size):
        v = (v << 8) | int(buf[q + j])
    for k in range(count - 1, -1, -1):
        digits[nd + k] = 48 + v % 10
        v //= 10
    return q + size, nd + count


@kernel
def decimals_text(data: np.ndarray, off: np.ndarray, ln: np.ndarray, precision: int, scale: int,
                  offsets: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Packed DECIMAL(precision, scale) → its plain text with exactly ``scale`` fractional digits
    (``-12.50``, ``0.05``; no negative zero), in ``precision + 3`` bytes a value, sized in ``offsets``.

    The packing (``decimal2bin``): whole then fractional digits in groups of nine, four bytes
    big-endian each, the leftover digits in fewer bytes; the first bit flipped; all bits inverted
    for a negative number."""
    whole = precision - scale
    lead, lead_bytes = whole % 9, _DIG2BYTES[whole % 9]
    trail, trail_bytes = scale % 9, _DIG2BYTES[scale % 9]
    stride = precision + 3
    digits = np.empty(precision + 9, np.uint8)
    buf = np.empty(64, np.uint8)
    pos = 0
    for i in range(len(off)):
        offsets[i] = pos
        if ln[i] == NULL:
            continue
        p = off[i]
        size = ln[i]
        for j in range(size):
            buf[j] = data[p + j]
        negative = (buf[0] & 0x80) == 0
        buf[0] ^= 0x80
        if negative:
            for j in range(size):
                buf[j] ^= 0xFF
        nd = 0
        q = 0
        # whole digits: the leftover group first, then groups of nine; then the fraction's, leftover last
        if lead_bytes:
            q, nd = _digit_group(buf, q, lead_bytes, lead, digits, nd)
        for _ in range(whole // 9):
            q, nd = _digit_group(buf, q, 4, 9, digits, nd)
        for _ in range(scale // 9):
            q, nd = _digit_group(buf, q, 4, 9, digits, nd)
        if trail_bytes:
            q, nd = _digit_group(buf, q, trail_bytes, trail, digits, nd)
        zero = True
        for k in range(nd):
            if digits[k] != 48:
                zero = False
                break
        start = pos
        if negative and not zero:
            out[pos] = 45  # '-'
            pos += 1
        first = 0
        while first < whole - 1 and digits[first] == 48:
            first += 1
        if whole == 0:
            out[pos] = 48
            pos += 1
        for k in range(first, whole):
            out[pos] = digits[k]
            pos += 1
        if scale:
            out[pos] = 46  # '.'
            pos += 1
            for k in range(whole, whole + scale):
                out[pos] = digits[k]
                pos += 1
        assert pos - start <= stride
    offsets[len(off)] = pos


@kernel
def sets_text(data: np.ndarray, off: np.ndarray, ln: np.ndarray, width: int, names: np.ndarray,
              name_offsets: np.ndarray, offsets: np.ndarray, out: np.ndarray,
              fill: bool) -> int:  # pragma: no cover - compiled
    """A SET's bitmask (``width`` bytes, little-endian) → its members' names joined by commas, in the
    order of the column's definition (as MySQL prints it). Sizes first (``fill`` False), then the text;
    returns the number of the first bit that names no member + 1, or 0."""
    members = len(name_offsets) - 1
    pos = 0
    for i in range(len(off)):
        offsets[i] = pos
        if ln[i] == NULL:
            continue
        mask = np.uint64(_le(data, off[i], width)) if width < 8 else np.uint64(0)
        if width == 8:
            for j in range(8):
                mask |= np.uint64(data[off[i] + j]) << np.uint64(8 * j)
        first = True
        for b in range(width * 8):
            if not (mask >> np.uint64(b)) & np.uint64(1):
                continue
            if b >= members:
                return b + 1
            if not first:
                if fill:
                    out[pos] = 44  # ','
                pos += 1
            first = False
            for k in range(name_offsets[b], name_offsets[b + 1]):
                if fill:
                    out[pos] = names[k]
                pos += 1
    offsets[len(off)] = pos
    return 0


# -- keys of updates -----------------------------------------------------------------------


@kernel
def keys_changed(data: np.ndarray, off: np.ndarray, ln: np.ndarray, before: np.ndarray, key: np.ndarray,
                 out: np.ndarray) -> None:  # pragma: no cover - compiled
    """For each update (its before image at ``before[i]``, its after image next), whether a key column's
    stored bytes differ: a change of case in a case-insensitive key is a new key."""
    for i in range(len(before)):
        b = before[i]
        a = b + 1
        changed = False
        for c in key:
            if ln[b, c] != ln[a, c]:
                changed = True
                break
            if ln[b, c] == NULL:
                continue
            pb, pa = off[b, c], off[a, c]
            for j in range(ln[b, c]):
                if data[pb + j] != data[pa + j]:
                    changed = True
                    break
            if changed:
                break
        out[i] = changed
