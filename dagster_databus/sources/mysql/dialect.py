"""MySQL's and MariaDB's SQL as refresh filters see it (``sources.filters``), as the catalog reads the tables'
description from ``information_schema`` (``CATALOG``) and as key-range reads write it (``READS``)."""



from __future__ import annotations

from typing import Any

from sqlglot.dialects.mysql import MySQL

from dagster_databus.core.schema import Column
from dagster_databus.sources.filters import FilterDialect
from dagster_databus.sources.generic.catalog import CatalogDialect
from dagster_databus.sources.generic.reads import ReadDialect
from dagster_databus.sources.mysql.types import mysql_column_type, sql_default

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


# -- the catalog ---------------------------------------------------------------------------------------------


def quote(name: str) -> str:
    """A validated plain name as a MySQL identifier (no backtick inside it to double)."""
    return f"`{name}`"


def _column(name: str, row: tuple[Any, ...]) -> Column | str:
    _name, _data_type, column_type, default, extra, version = row
    ctype = mysql_column_type(column_type)
    if ctype is None:
        return f"{name} {column_type}"
    return Column(name=name, type=ctype, source_type=column_type,
                  default=sql_default(default, extra, ctype, "mariadb" in str(version).lower()))


CATALOG = CatalogDialect(
    label="MySQL", unmapped_fix="change the column to a mapped type", container="database",
    tables="SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %(database)s ORDER BY 1",
    columns="SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_DEFAULT, EXTRA, VERSION() "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %(database)s AND TABLE_NAME = %(table_name)s "
            "ORDER BY ORDINAL_POSITION",
    unique="SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %(database)s "
           "AND TABLE_NAME = %(table_name)s AND NON_UNIQUE = 0",
    column=_column, quote=quote, first_row=" LIMIT 1",
)


# -- key-range reads (``generic.reads``) ------------------------------------------------------------------------

def _mysql_error(exc: Exception) -> str | None:
    from dagster_databus.sources.mysql.connect import MySQLError

    return str(exc.args[-1] if exc.args else exc) if isinstance(exc, MySQLError) else None


# A filter's text holds no ``%`` (modulo renders as MOD()), so pymysql's parameter formatting leaves it be.
READS = ReadDialect(label="MySQL", filters=FILTERS, quote=quote, placeholder="%s",
                    error_text=_mysql_error)
