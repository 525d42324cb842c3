"""Oracle's SQL as refresh filters see it (``sources.filters``)."""

from __future__ import annotations

from sqlglot.dialects.oracle import Oracle

from dagster_databus.sources.filters import FilterDialect

FILTERS = FilterDialect(
    label="Oracle", sqlglot=Oracle, placeholder=":name",
    functions={
        "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "substr": (2, 3), "trim": (1, 1), "ltrim": (1, 2),
        "rtrim": (1, 2), "abs": (1, 1), "round": (1, 2), "trunc": (1, 2), "mod": (2, 2), "coalesce": (2, 16),
        "nvl": (2, 2), "nullif": (2, 2), "to_char": (1, 2), "to_date": (1, 2), "to_number": (1, 1),
        "add_months": (2, 2), "months_between": (2, 2), "last_day": (1, 1),
    },
    booleans=False,  # Oracle SQL has no TRUE/FALSE literal
)
