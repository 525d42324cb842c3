"""PostgreSQL's SQL as refresh filters see it (``sources.filters``), as the catalog reads the tables'
description from ``pg_catalog`` (``CATALOG``) and as key-range reads write it (``READS``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from sqlglot import TokenType
from sqlglot.dialects.postgres import Postgres

from dagster_databus.core.identifiers import quote_ansi
from dagster_databus.core.schema import Column
from dagster_databus.errors import ConfigError
from dagster_databus.sources import sqlfiles
from dagster_databus.sources.filters import Filter, FilterDialect
from dagster_databus.sources.generic.catalog import CatalogDialect
from dagster_databus.sources.generic.reads import PageSample, ReadDialect
from dagster_databus.sources.postgres.types import PgColumn, pg_column_type

# Why casts are refused, and the refusal's fix: a quoted literal needs none.
CAST = "a cast (::type, CAST(... AS type), or a typed literal such as date '...')"
CAST_FIX = ("compare with a plain quoted literal, which PostgreSQL reads as the type of what it is compared with "
            "(placed_at >= '2024-01-01', id = '12'), or use an allowed function; casts are refused because a cast "
            "may name any type, and some (regclass, regproc, ...) look up the catalog or run a type's input function "
            "on the filter's text")

FILTERS = FilterDialect(
    label="PostgreSQL", sqlglot=Postgres, placeholder="%s",  # psycopg2 fills parameters in with Python's %
    # No substring: with two arguments and a text second one PostgreSQL picks its regular-expression form
    # (substring('hello', '2') is NULL), whose cost depends on the pattern; substr takes positions only.
    functions={
        "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "char_length": (1, 1), "substr": (2, 3),
        "left": (2, 2), "right": (2, 2), "strpos": (2, 2), "trim": (1, 1), "btrim": (1, 2), "ltrim": (1, 2),
        "rtrim": (1, 2), "abs": (1, 1), "round": (1, 2), "trunc": (1, 2), "ceil": (1, 1), "floor": (1, 1),
        "mod": (2, 2), "coalesce": (2, 16), "nullif": (2, 2), "date_trunc": (2, 2), "date_part": (2, 2),
        "to_char": (2, 2), "to_date": (2, 2), "to_number": (2, 2),
    },
    null_safe_equal="IS DISTINCT FROM", ilike=True,
    # String literals with escape rules of their own: refused by token, before parsing, so a filter's text means
    # what it says to its reader ('' for a quote inside a plain literal, a backslash is itself).
    refused_strings={
        TokenType.BYTE_STRING: "an E'...' escape string (its backslash escapes are a second syntax inside the text)",
        TokenType.UNICODE_STRING: "a U&'...' Unicode escape string (its escapes are a second syntax inside the text)",
        TokenType.HEREDOC_STRING: "a dollar-quoted string ($$...$$ or $tag$...$tag$)",
    },
    text_holds_nul=False, casts=(CAST, CAST_FIX),
    # An unqualified function is resolved by search_path, where whoever may create in a schema on it can put a
    # look-alike with a closer argument type (CVE-2018-1058): calls are rendered as pg_catalog.name(...). These
    # three are grammar, not functions (pg_catalog.coalesce does not exist): the parser makes its own nodes of them.
    function_schema="pg_catalog", grammar_functions=frozenset({"coalesce", "nullif", "trim"}),
)


# -- the catalog ---------------------------------------------------------------------------------------------


def _column(name: str, row: tuple[Any, ...]) -> Column | str | None:
    """A row of ``sql/postgres/described_columns.sql``; its type gone (None): dropped since a relation message."""
    _name, declared, type_name, typmod, is_enum, element, element_is_enum, _nn, default, type_oid = row
    if declared is None:
        return None
    ctype = pg_column_type(PgColumn(name=name, declared=declared, type_name=type_name, typmod=typmod, is_enum=is_enum,
                                    element=element, element_is_enum=bool(element_is_enum), type_oid=type_oid))
    if ctype is None:
        return f"{name} {declared}"
    return Column(name=name, type=ctype, source_type=declared, default=default)


# The queries are SQL files of sql/postgres/, read when first run. A table's columns are described in two steps
# (``PostgresCatalog.read_columns``), as a relation message's are.
CATALOG = CatalogDialect(
    label="PostgreSQL", unmapped_fix="change the column to a mapped type (docs/types.md, PostgreSQL)",
    container="schema", tables="schema_tables.sql", columns="table_columns.sql", unique="unique_keys.sql",
    column=_column, quote=quote_ansi, first_row=" LIMIT 1", sql=partial(sqlfiles.load, "postgres"),
)


# -- key-range reads (``generic.reads``) ------------------------------------------------------------------------

def quote(name: str) -> str:
    """``name`` as a quoted identifier."""
    return '"' + name.replace('"', '""') + '"'


def _postgres_error(exc: Exception) -> str | None:
    import psycopg2

    return str(exc).strip().splitlines()[0] if isinstance(exc, psycopg2.Error) else None


@contextmanager
def filter_run(table: str, chosen: Filter | None) -> Iterator[None]:
    """A data error while a refresh filter is in the query as the filter's: a value it computes from a row fails
    (``id / 0``, ``to_number(v, '999')`` of a text that is no number), which the check on no rows cannot see."""
    import psycopg2

    try:
        yield
    except psycopg2.DataError as exc:
        if chosen is None:
            raise
        message = (exc.pgerror or str(exc)).strip().splitlines()[0]
        raise ConfigError("snapshot.where", f"the filter {chosen.text!r} failed on a row of {table!r} as PostgreSQL "
                          f"ran it: {message}", "write a filter that holds for every row of the table (guard "
                          "the failing expression, e.g. NULLIF for a divisor, or compare the text instead of "
                          "converting it), then run the snapshot again") from None


# SYSTEM sampling reads whole pages chosen at random: cheap, and any page's keys are as good a cut as any row's.
READS = ReadDialect(label="PostgreSQL", filters=FILTERS, quote=quote, placeholder="%s",
                    error_text=_postgres_error, running=filter_run,
                    sample=PageSample("TABLESAMPLE SYSTEM (%s)", partial(sqlfiles.load, "postgres", "table_size.sql")))
