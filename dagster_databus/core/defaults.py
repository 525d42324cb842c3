"""A column's SQL default as a value of its type, when it is a constant: what the source gave every existing
row when the column was added, which the snapshot can then fill in itself instead of reading the table again.

Defaults are kept as SQL literal text (``'it''s'``, ``-1.5``, ``NULL``, ``X'00ff'``); anything else
(``CURRENT_TIMESTAMP``, ``(expression)``, a function call, text with escapes this parser does not read) is
not a constant here, and the table is read again as before.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

from dagster_databus.core.types import ColumnType
from dagster_databus.errors import TypeValueError

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_STRING = re.compile(r"'((?:[^'\\]|'')*)'")
_HEX = re.compile(r"[xX]'([0-9a-fA-F]*)'")
NOT_CONSTANT = object()  # what ``constant_value`` returns for a default it cannot read as a constant


def constant_value(text: str | None, ctype: ColumnType) -> Any:
    """The canonical value of ``ctype`` the default ``text`` gives (None for no default or NULL), or
    ``NOT_CONSTANT``."""
    if text is None:
        return None
    text = text.strip()
    if text.upper() == "NULL":
        return None
    try:
        return _value(text, ctype)
    except (TypeValueError, ValueError, ArithmeticError):
        return NOT_CONSTANT


def _value(text: str, ctype: ColumnType) -> Any:
    kind = ctype.kind
    string = _STRING.fullmatch(text)
    number = _NUMBER.fullmatch(text)
    hexa = _HEX.fullmatch(text)
    if kind in ("byte", "short", "integer", "long") and number:
        as_decimal = decimal.Decimal(text)
        if as_decimal != as_decimal.to_integral_value():
            return NOT_CONSTANT
        return ctype.check(int(as_decimal))
    if kind in ("decimal", "number") and (number or string):
        return ctype.check(decimal.Decimal(string.group(1) if string else text))
    if kind in ("float", "double") and number:
        return ctype.check(float(text))
    if kind == "boolean" and (number or text.upper() in ("TRUE", "FALSE")):
        return text.upper() == "TRUE" or (number is not None and decimal.Decimal(text) != 0)
    if kind == "string" and string:
        return ctype.check(string.group(1).replace("''", "'"))
    if kind == "binary" and hexa:
        return bytes.fromhex(hexa.group(1))
    if kind == "date" and string:
        return ctype.check(dt.date.fromisoformat(string.group(1)))
    if kind == "timestamp_ntz" and string:
        return ctype.check(dt.datetime.fromisoformat(string.group(1)))
    return NOT_CONSTANT
