"""Validation and quoting of identifiers that come from configuration.

Names from config are never pasted into SQL: they are checked against a strict pattern
here and then quoted for the dialect that uses them.
"""

from __future__ import annotations

import re

PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_PREFIX = "__"


def is_plain_name(name: object) -> bool:
    return isinstance(name, str) and bool(PLAIN_NAME.match(name))


def quote_ansi(name: str) -> str:
    """Quote a validated identifier as ANSI SQL does (double quotes)."""
    if not is_plain_name(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return f'"{name}"'


def quote_literal(value: str) -> str:
    """A SQL string literal for a validated identifier (used in trigger bodies)."""
    if not is_plain_name(value):
        raise ValueError(f"not a plain identifier: {value!r}")
    return f"'{value}'"
