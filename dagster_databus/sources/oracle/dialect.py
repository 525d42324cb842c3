"""Oracle's SQL as refresh filters see it (``sources.filters``), as the catalog reads the tables' description
from the data dictionary (``CATALOG``) and as key-range reads write it (``READS``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlglot.dialects.oracle import Oracle

from dagster_databus.core.schema import Column
from dagster_databus.sources.base import KeyRange
from dagster_databus.sources.filters import Filter, FilterDialect
from dagster_databus.sources.generic.catalog import CatalogDialect
from dagster_databus.sources.generic.reads import ReadDialect
from dagster_databus.sources.oracle.sql import after_clause, quote, through_clause
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


# -- key-range reads (``generic.reads``) ------------------------------------------------------------------------

def selection_clause(keys: Sequence[str], where: KeyRange, predicate: Filter | None) -> tuple[str, dict[str, Any]]:
    """" WHERE ..." (or "") selecting the key range and the checked filter ``predicate``, with all binds (Oracle
    has no row-value comparison: ``oracle.sql.after_clause``)."""
    clauses: list[str] = []
    binds: dict[str, Any] = {}
    if where.after is not None:
        clauses.append(f"({after_clause(keys, 'a')})")
        binds |= {f"a{i}": v for i, v in enumerate(where.after)}
    if where.through is not None:
        clauses.append(through_clause(keys, "t"))
        binds |= {f"t{i}": v for i, v in enumerate(where.through)}
    if predicate is not None:
        clauses.append(f"({predicate.sql})")
        binds |= predicate.binds
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), binds


def _oracle_error(exc: Exception) -> str | None:
    import oracledb

    return str(exc) if isinstance(exc, oracledb.DatabaseError) else None


# Its text literals are binds :w0, :w1, ...; the key bounds :a0 ... and :t0 ..., a page's size :n.
READS = ReadDialect(label="Oracle", filters=FILTERS, quote=quote, placeholder=None,
                    offset_row="OFFSET {n} ROWS FETCH NEXT 1 ROWS ONLY", first_rows="FETCH FIRST {n} ROWS ONLY",
                    no_rows="FETCH FIRST 0 ROWS ONLY", selection=selection_clause, error_text=_oracle_error,
                    columns_named="naming the table's columns as Oracle knows them")
