"""Oracle's SQL as refresh filters see it (``sources.filters``), and as the catalog reads the tables'
description from the data dictionary (``generic.catalog``)."""

from __future__ import annotations

from typing import Any

from sqlglot.dialects.oracle import Oracle

from dagster_databus.core.schema import Column
from dagster_databus.sources.filters import FilterDialect
from dagster_databus.sources.generic.catalog import CatalogDialect
from dagster_databus.sources.oracle.sql import quote
from dagster_databus.sources.oracle.types import oracle_column_type, oracle_declared

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


# -- the catalog ---------------------------------------------------------------------------------------------


def _column(name: str, row: tuple[Any, ...]) -> Column | str:
    """A column of ``user_tab_columns``, named ``name`` in the snapshot (the dictionary's name may be lower-cased)."""
    spelled, data_type, precision, scale = row
    declared = oracle_declared(data_type, precision, scale)
    ctype = oracle_column_type(declared)
    if ctype is None:
        return f"{spelled} {declared}"
    return Column(name=name, type=ctype, source_type=declared)


# A table's columns and unique keys are read by its name in the dictionary (``OracleCatalog.columns_of``).
CATALOG = CatalogDialect(
    label="Oracle", unmapped_fix="change the column to a mapped type", container="schema",
    tables="SELECT table_name FROM user_tables WHERE table_name NOT LIKE 'SY$%' ORDER BY 1",
    columns="SELECT column_name, data_type, data_precision, data_scale FROM user_tab_columns "
            "WHERE table_name = :table_name AND column_name <> 'TXN' ORDER BY column_id",
    unique="SELECT c.constraint_name, cc.column_name FROM user_constraints c JOIN user_cons_columns cc "
           "ON cc.constraint_name = c.constraint_name WHERE c.table_name = :table_name AND c.constraint_type IN "
           "('P', 'U')",
    column=_column, quote=quote, first_row=" FETCH FIRST 1 ROWS ONLY",
)
