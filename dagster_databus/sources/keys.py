"""Key ranges and keyset paging, for every dialect: a user's selection typed as the key columns
(``selection_for``), the key space cut into ranges by walking the key index (``split_keys``), a range read a
page at a time (``keyset_pages``), and the WHERE clause that selects a range (``key_clause``)."""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dagster_databus.core.schema import TableSchema
from dagster_databus.errors import ConfigError
from dagster_databus.sources.base import ALL_KEYS, KeyRange, RowSelection

_INTEGER_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_NUMERIC = {*_INTEGER_BITS, "decimal"}  # kinds whose order this process knows as the database does


def selection_for(schema: TableSchema, after: Sequence[Any] | None, through: Sequence[Any] | None,
                  where: str | None) -> RowSelection:
    """A ``RowSelection`` from what a user typed (CLI, Dagster run config): key values in key order, one per
    key column, made the key columns' types (integers and decimals checked to fit the column's type; anything
    else as text, which every database compares with its dates and strings), and not an empty range; ``where``
    kept as typed, refused when empty. The filter itself is checked in the source's dialect by the source
    (``check_selection``, and again wherever it is read: ``sources.filters``), never pasted into SQL."""
    def key(values: Sequence[Any] | None, what: str) -> tuple[Any, ...] | None:
        if values is None:
            return None
        if len(values) != len(schema.primary_key):
            raise ConfigError(f"snapshot.{what}", f"{len(values)} value(s) for table {schema.table!r}, whose key is "
                              f"({', '.join(schema.primary_key)})", "give one value per key column, in key order")
        return tuple(_key_value(schema, name, value, what)
                     for name, value in zip(schema.primary_key, values, strict=True))

    keys = KeyRange(key(after, "after"), key(through, "through"))
    _require_nonempty(schema, keys)
    if where is not None and not where.strip():
        raise ConfigError("snapshot.where", f"the refresh filter {where!r} is empty: it would read every row of "
                          f"{schema.table!r} in the key range instead of the ones meant",
                          "give a condition on the table's columns, such as status = 'new'; or leave the filter out "
                          "(no --where, no where in the run config) to read every row of the key range")
    return RowSelection(keys, where)


def _key_value(schema: TableSchema, name: str, value: Any, what: str) -> Any:
    """A key bound typed as its column: an int in the column's integer range, a finite decimal with no more
    digits before the point than the column holds, or text."""
    column = schema.column(name).type
    kind, bound = column.kind, f"--{what} (key_{what})"
    try:
        if kind in _INTEGER_BITS:
            number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
            low, high = -(2 ** (_INTEGER_BITS[kind] - 1)), 2 ** (_INTEGER_BITS[kind] - 1) - 1
            if not low <= number <= high:
                raise ConfigError(f"snapshot.{what}", f"{bound} {value} is beyond the range of key column {name!r} "
                                  f"({kind}: {low} to {high}), so it cannot be compared with its keys",
                                  f"give {name} a value from {low} to {high}; leave {bound} out to leave the range "
                                  f"open at that end")
            return number
        if kind == "decimal":
            exact = decimal.Decimal(str(value).strip())
            whole = column.precision - column.scale
            if not exact.is_finite() or (exact and exact.adjusted() >= whole):
                raise ConfigError(f"snapshot.{what}", f"{bound} {value} is beyond the range of key column {name!r} "
                                  f"({column}: at most {whole} digit(s) before the point)",
                                  f"give {name} a finite value with at most {whole} digit(s) before the point; "
                                  f"leave {bound} out to leave the range open at that end")
            return exact
    except (ValueError, decimal.InvalidOperation):
        raise ConfigError(f"snapshot.{what}", f"{value!r} is not a value of key column {name!r} ({kind})",
                          f"give {name} as a {kind}") from None
    return str(value)


def _require_nonempty(schema: TableSchema, keys: KeyRange) -> None:
    """Refuse bounds that leave no key between them: (after, through] with after at or past through, where the
    order is known here (numeric key columns, or bounds equal up to the first column where they differ)."""
    if keys.after is None or keys.through is None:
        return
    for name, low, high in zip(schema.primary_key, keys.after, keys.through, strict=True):
        if low == high:
            continue
        if schema.column(name).type.kind not in _NUMERIC or low < high:
            return  # a text key's order is the database's collation: not decided here
        break
    raise ConfigError("snapshot.through", f"keys after {list(keys.after)} through {list(keys.through)} of table "
                      f"{schema.table!r} are an empty range (after is excluded, through included): nothing would "
                      "be read", "give --through (key_through) a key above --after (key_after), or leave one out")


def split_keys(key_at: Callable[[tuple[Any, ...] | None, int], tuple[Any, ...] | None], rows_per_range: int,
               bounds: KeyRange = ALL_KEYS, first: int | None = None) -> tuple[KeyRange, ...]:
    """Ranges of about ``rows_per_range`` rows within ``bounds``: ``key_at(after, n)`` is the key ``n`` places
    (0: the first) after ``after`` (None: from the start) and at or before ``bounds.through``, in key order,
    or None when there is none. Only the ranges' boundary keys leave the database: the index is skipped
    through where it lives. The last range ends where ``bounds`` does (open-ended when unbounded, so keys
    inserted later land somewhere). ``first``: only the first ranges, that many, found with that many
    lookups (a rolling verification reads one range a run, not the whole key space's cuts)."""
    cuts: list[tuple[Any, ...]] = []
    while (first is None or len(cuts) < first) and \
            (key := key_at(cuts[-1] if cuts else bounds.after, rows_per_range - 1)) is not None:
        cuts.append(tuple(key))
    if first is not None and len(cuts) == first:
        return tuple(KeyRange(lo, hi) for lo, hi in zip([bounds.after, *cuts[:-1]], cuts, strict=True))
    if cuts and key_at(cuts[-1], 0) is None:
        cuts.pop()  # the last full range reached the end: it takes the open end itself
    return ranges_between(cuts, bounds)


def ranges_between(cuts: Sequence[tuple[Any, ...]], bounds: KeyRange = ALL_KEYS) -> tuple[KeyRange, ...]:
    """The ranges ``cuts`` (keys in key order, within ``bounds``) divide ``bounds`` into: each cut ends a range
    and the next starts after it; the last range ends where ``bounds`` does."""
    lowers: list[tuple[Any, ...] | None] = [bounds.after, *cuts]
    uppers: list[tuple[Any, ...] | None] = [*cuts, bounds.through]
    return tuple(KeyRange(lo, hi) for lo, hi in zip(lowers, uppers, strict=True))


def keyset_pages(fetch: Callable[[KeyRange], list[Any]], where: KeyRange, last_key: Callable[[Any], tuple[Any, ...]],
                 page: int) -> Iterator[list[Any]]:
    """The rows of key range ``where`` a page at a time, by keyset pagination, for every dialect:
    ``fetch(keys)`` reads at most ``page`` rows of ``keys`` in key order (selecting the range with
    ``key_clause``, or a kind's own clause), and ``last_key(row)``
    is a fetched row's key, the next page's lower bound. A short page is the last."""
    after = where.after
    while rows := fetch(KeyRange(after, where.through)):
        yield rows
        if len(rows) < page:
            return
        after = last_key(rows[-1])


def row_key(key_index: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A row's key, from the positions of the key columns in the row (``keyset_pages``'s ``last_key``)."""
    return lambda row: tuple(row[i] for i in key_index)


def key_clause(cols: str, marks: str, keys: KeyRange, predicate: str | None = None) -> tuple[str, list[Any]]:
    """"WHERE ... " (or "") selecting ``keys`` by row-value comparison, and ``predicate``; its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if keys.after is not None:
        clauses.append(f"({cols}) > ({marks})")
        params += keys.after
    if keys.through is not None:
        clauses.append(f"({cols}) <= ({marks})")
        params += keys.through
    if predicate is not None:
        clauses.append(f"({predicate})")
    return (f"WHERE {' AND '.join(clauses)} " if clauses else ""), params
