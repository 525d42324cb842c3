"""MySQL's and MariaDB's SQL as refresh filters see it (``sources.filters``)."""

from __future__ import annotations

from sqlglot.dialects.mysql import MySQL

from dagster_databus.sources.filters import FilterDialect

FILTERS = FilterDialect(
    label="MySQL/MariaDB", sqlglot=MySQL, placeholder="%s",  # pymysql fills parameters in with Python's %
    functions={
        "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "char_length": (1, 1), "substr": (2, 3),
        "substring": (2, 3), "left": (2, 2), "right": (2, 2), "trim": (1, 1), "ltrim": (1, 1), "rtrim": (1, 1),
        "abs": (1, 1), "round": (1, 2), "mod": (2, 2), "coalesce": (2, 16), "ifnull": (2, 2), "nullif": (2, 2),
        "date": (1, 1), "year": (1, 1), "month": (1, 1), "day": (1, 1), "dayofmonth": (1, 1), "hour": (1, 1),
        "to_days": (1, 1), "datediff": (2, 2), "date_format": (2, 2), "str_to_date": (2, 2),
    },
    integer_division=True, concatenation=False,  # || is OR unless PIPES_AS_CONCAT: not rendered at all
    null_safe_equal="<=>", double_quotes_are_text=True,
)
