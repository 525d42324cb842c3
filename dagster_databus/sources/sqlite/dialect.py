"""SQLite's SQL as refresh filters see it (``sources.filters``), as the catalog reads the database's own
description of its tables (``CATALOG``) and as key-range reads write it (``READS``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlglot.dialects.sqlite import SQLite

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column
from dagster_databus.sources.filters import FilterDialect
from dagster_databus.sources.generic.catalog import CatalogDialect
from dagster_databus.sources.generic.reads import ReadDialect
from dagster_databus.sources.sqlite.types import sqlite_column_type

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


# -- the catalog ---------------------------------------------------------------------------------------------


def _column(name: str, row: tuple[Any, ...]) -> Column | str:
    _name, declared, default = row
    ctype = sqlite_column_type(declared or "")
    if ctype is None:
        return f"{name} {declared}"
    return Column(name=name, type=ctype, source_type=declared or "",
                  default=None if default is None or default.upper() == "NULL" else default)


CATALOG = CatalogDialect(
    label="SQLite", unmapped_fix="declare DECIMAL(p,s) with 1 <= p and s <= p", container="database",
    tables="SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_databus\\_%' ESCAPE '\\' "
           "AND name NOT LIKE 'sqlite_%' ORDER BY name",
    columns="SELECT name, type, dflt_value FROM pragma_table_info(:table_name) ORDER BY cid",
    # The declared primary key, and each UNIQUE index on plain columns: not a partial one (rows outside its WHERE
    # may share the values), nor one with an expression part (only the columns with it are unique).
    unique="SELECT NULL, name FROM pragma_table_info(:table_name) WHERE pk "
           "UNION ALL SELECT i.name, c.name FROM pragma_index_list(:table_name) AS i, pragma_index_info(i.name) AS c "
           "WHERE i.\"unique\" AND NOT i.partial "
           "AND NOT EXISTS (SELECT 1 FROM pragma_index_info(i.name) AS e WHERE e.cid = -2)",
    column=_column, quote=quote_ansi, first_row=" LIMIT 1",
)


# -- key-range reads (``generic.reads``) ------------------------------------------------------------------------

def _sqlite_error(exc: Exception) -> str | None:
    return str(exc) if isinstance(exc, sqlite3.Error) else None


READS = ReadDialect(label="SQLite", filters=FILTERS, quote=quote_ansi, placeholder="?", error_text=_sqlite_error)
