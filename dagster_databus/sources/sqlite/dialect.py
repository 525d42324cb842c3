"""SQLite's SQL as refresh filters see it (``sources.filters``)."""

from __future__ import annotations

from sqlglot.dialects.sqlite import SQLite

from dagster_databus.sources.filters import FilterDialect

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
