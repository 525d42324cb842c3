"""Where each value sits in the capture triggers' JSON row images, found in one compiled pass.

The triggers write every image with ``json_object`` in the table's column order, each value one of:
``null``, an integer, a string, ``{"$r":"<%!.20e>"}`` for a REAL, ``{"$b":"<hex>"}`` for a BLOB
(``sources/sqlite/render.py``). Arrow's JSON reader needs one JSON type per column, which a DECIMAL or
date column does not have (SQLite stores integers, reals and text side by side in it), so for those
columns ``scan`` returns, per image, the value's kind and the span of its text in the image's
bytes. ``sqlite.batch`` turns the spans into typed columns with Arrow; anything outside the grammar
above stops the scan, and the chunk takes the value-by-value path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dagster_databus.core.kernels import kernel

# Value kinds in the images.
NULL, INTEGER, TEXT, REAL, BLOB, ESCAPED = 0, 1, 2, 3, 4, 5  # ESCAPED: text with backslash escapes

_QUOTE, _BACKSLASH, _COLON, _COMMA = ord('"'), ord("\\"), ord(":"), ord(",")
_OPEN, _CLOSE, _MINUS, _ZERO, _NINE = ord("{"), ord("}"), ord("-"), ord("0"), ord("9")
_N, _DOLLAR, _R, _B = ord("n"), ord("$"), ord("r"), ord("b")


@dataclass(frozen=True, slots=True)
class Spans:
    """For each scanned column: the kind of each image's value and its text's [start, end) in ``data``."""

    data: np.ndarray  # the images' bytes (uint8)
    kinds: np.ndarray  # (columns, images) uint8
    starts: np.ndarray  # (columns, images) int64
    ends: np.ndarray  # (columns, images) int64

    def texts(self, column: int) -> pa.Array:
        """The column's value texts as strings (null where the image holds null); escapes not undone."""
        starts, ends = self.starts[column], self.ends[column]
        offsets = np.zeros(len(starts) + 1, np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        payload = np.empty(int(offsets[-1]), np.uint8)
        _copy(self.data, starts, ends, offsets, payload)
        valid = self.kinds[column] != NULL
        return pa.LargeStringArray.from_buffers(
            len(starts), pa.py_buffer(offsets), pa.py_buffer(payload),
            pa.py_buffer(np.packbits(valid, bitorder="little")) if not valid.all() else None,
        ).cast(pa.string())


def scan(images: pa.Array, columns: int, wanted: Sequence[int]) -> Spans | None:
    """Spans of the ``wanted`` column positions in every image (of ``columns`` values each); None when an
    image is not of the triggers' grammar."""
    if images.null_count:
        return None
    if pa.types.is_large_string(images.type):
        images = images.cast(pa.string())
    n = len(images)
    offsets = np.frombuffer(images.buffers()[1], np.int32, n + 1, images.offset * 4).astype(np.int64)
    buffer = images.buffers()[2]
    data = np.frombuffer(buffer, np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    slot = np.full(columns, -1, np.int64)
    slot[list(wanted)] = np.arange(len(wanted))
    kinds = np.zeros((len(wanted), n), np.uint8)
    starts = np.zeros((len(wanted), n), np.int64)
    ends = np.zeros((len(wanted), n), np.int64)
    if _scan(data, offsets, columns, slot, kinds, starts, ends) >= 0:
        return None
    return Spans(data, kinds, starts, ends)


@kernel
def _string_end(data: np.ndarray, pos: int, end: int) -> tuple[int, bool]:  # pragma: no cover - compiled
    """From just inside an opening quote: (position of the closing quote, escapes seen); -1 if none."""
    escaped = False
    while pos < end:
        c = data[pos]
        if c == _BACKSLASH:
            escaped = True
            pos += 2
            continue
        if c == _QUOTE:
            return pos, escaped
        pos += 1
    return -1, escaped


@kernel
def _scan(data: np.ndarray, offsets: np.ndarray, columns: int, slot: np.ndarray, kinds: np.ndarray,
          starts: np.ndarray, ends: np.ndarray) -> int:  # pragma: no cover - compiled
    """Fill kinds/starts/ends; -1 when every image parsed, else the index of the first that did not."""
    for i in range(len(offsets) - 1):
        pos, end = offsets[i], offsets[i + 1]
        if pos >= end or data[pos] != _OPEN:
            return i
        pos += 1
        column = 0
        while pos < end and data[pos] != _CLOSE:
            if column > 0:
                if data[pos] != _COMMA:
                    return i
                pos += 1
            if column >= columns or pos >= end or data[pos] != _QUOTE:
                return i
            close, _ = _string_end(data, pos + 1, end)  # the key: its order is the triggers' column order
            if close < 0 or close + 1 >= end or data[close + 1] != _COLON:
                return i
            pos = close + 2
            if pos >= end:
                return i
            c = data[pos]
            kind, start, stop = NULL, pos, pos
            if c == _N:
                if pos + 4 > end or data[pos + 1] != ord("u") or data[pos + 2] != ord("l") or data[pos + 3] != ord("l"):
                    return i
                pos += 4
            elif c == _MINUS or _ZERO <= c <= _NINE:
                stop = pos + 1
                while stop < end and _ZERO <= data[stop] <= _NINE:
                    stop += 1
                if stop == pos + 1 and c == _MINUS:
                    return i
                kind, start, pos = INTEGER, pos, stop
                if pos < end and data[pos] != _COMMA and data[pos] != _CLOSE:
                    return i  # a JSON number with a fraction or exponent: not what the triggers write
            elif c == _QUOTE:
                close, escaped = _string_end(data, pos + 1, end)
                if close < 0:
                    return i
                kind = ESCAPED if escaped else TEXT
                start, stop, pos = pos + 1, close, close + 1
            elif c == _OPEN:
                # {"$r":"..."} or {"$b":"..."}: exactly one tagged member
                if (pos + 7 > end or data[pos + 1] != _QUOTE or data[pos + 2] != _DOLLAR
                        or data[pos + 4] != _QUOTE or data[pos + 5] != _COLON or data[pos + 6] != _QUOTE):
                    return i
                tag = data[pos + 3]
                if tag == _R:
                    kind = REAL
                elif tag == _B:
                    kind = BLOB
                else:
                    return i
                close, escaped = _string_end(data, pos + 7, end)
                if close < 0 or escaped or close + 1 >= end or data[close + 1] != _CLOSE:
                    return i
                start, stop, pos = pos + 7, close, close + 2
            else:
                return i  # true, false, an array or an object of another shape
            s = slot[column]
            if s >= 0:
                kinds[s, i] = kind
                starts[s, i] = start
                ends[s, i] = stop
            column += 1
        if pos >= end or column != columns or pos + 1 != end:
            return i
    return -1


@kernel
def _copy(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, offsets: np.ndarray,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(len(starts)):
        out[offsets[i]:offsets[i + 1]] = data[starts[i]:ends[i]]
