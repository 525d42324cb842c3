"""The check both directions of the segment format make of decimal text: the encoder reads sources' decimal
text into unscaled integers, the decoder writes a decimal column's text form; each takes only plain text."""

from __future__ import annotations

import numpy as np

from dagster_databus.core.kernels import kernel


@kernel
def plain_decimal(text: np.ndarray, at: int, end: int, canonical: bool) -> bool:  # pragma: no cover - compiled
    """Whether ``text[at:end]`` is ``-?[0-9]+(\\.[0-9]+)?``; with ``canonical``, also without a leading zero
    before more integer digits (``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``)."""
    if at < end and text[at] == 0x2D:  # -
        at += 1
    digits = at
    while at < end and 0x30 <= text[at] <= 0x39:
        at += 1
    if at == digits or (canonical and text[digits] == 0x30 and at - digits > 1):
        return False
    if at == end:
        return True
    if text[at] != 0x2E or at + 1 == end:  # .
        return False
    at += 1
    while at < end:
        if not 0x30 <= text[at] <= 0x39:
            return False
        at += 1
    return True
