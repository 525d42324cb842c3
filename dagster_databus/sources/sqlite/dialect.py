"""SQLite's SQL as refresh filters see it (``sources.filters``) and as key-range reads write it (``READS``)."""

from __future__ import annotations

import sqlite3

from sqlglot.dialects.sqlite import SQLite

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.sources.filters import FilterDialect
from dagster_databus.sources.generic.reads import ReadDialect

FILTERS = FilterDialect(
    label="SQLite", sqlglot=SQLite, placeholder="?",
    functions={
        "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "substr": (2, 3), "substring": (2, 3),
        "trim": (1, 2), "ltrim": (1, 2), "rtrim": (1, 2), "abs": (1, 1), "round": (1, 2),
        "coalesce": (2, 16), "ifnull": (2, 2), "nullif": (2, 2), "instr": (2, 2),
        "date": (1, 8), "time": (1, 8), "datetime": (1, 8), "julianday": (1, 8), "strftime": (2, 9),
    },
    operator_functions=frozenset({"like"}),  # its authorizer sees LIKE as a call of like()
    modulo="%", null_safe_equal="IS",
)


# -- key-range reads (``generic.reads``) ------------------------------------------------------------------------

def _sqlite_error(exc: Exception) -> str | None:
    return str(exc) if isinstance(exc, sqlite3.Error) else None


READS = ReadDialect(label="SQLite", filters=FILTERS, quote=quote_ansi, placeholder="?", error_text=_sqlite_error)
